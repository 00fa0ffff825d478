// The params structs, one per direction, in the style of FlashAttention-2's Flash_fwd_params:
// raw views and every field commented with its shape and layout. Backends take only these.
//
// Shapes below use the Problem's names. Q/K/V/O/dO/dQ/dK/dV views are logically
// (batch, seq, head, dim); see tensor.hpp. Pointers are host pointers for host backends and
// device pointers for the cuda backend (Backend::memory_space()).
#pragma once

#include "flashref/problem.hpp"
#include "flashref/tensor.hpp"

namespace flashref {

// Knobs shared by both directions and every backend. Zero means "the backend's own default".
// Settings of one backend alone (the cpu backend's trace observer and planted faults) are given
// to that backend's own factory instead (cpu/include/flashref/cpu/backend.hpp).
struct ExecutionOptions {
  int tile_q = 0;       // B_q: query rows per tile (cpu: any >= 1; cuda: ignored, fixed per d)
  int tile_k = 0;       // B_k: key rows per tile (cpu: any >= 1; cuda: ignored, fixed per d)
  int num_threads = 0;  // cpu: OpenMP threads (0: OpenMP's default)
  bool allow_tf32 = false;  // cuda, f32 inputs: use TF32 tensor cores (baseline becomes TF32)
  void* stream = nullptr;   // cuda: the cudaStream_t to launch on (nullptr: default stream)
  // false: the backward may sum in an order that changes from run to run (cuda, sm90 family:
  // dQ's partials added atomically; faster, judged by the rule, not bit-reproducible). Every
  // other backend and family is deterministic either way.
  bool deterministic = true;
};

struct ForwardParams {
  Problem problem;
  TensorView q;  // (B, S_q, H, d), dtype problem.dtype
  TensorView k;  // (B, S_k, H_kv, d), dtype problem.dtype
  TensorView v;  // (B, S_k, H_kv, d), dtype problem.dtype
  TensorView o;  // (B, S_q, H, d), dtype problem.dtype; output
  float* lse = nullptr;  // L, (B, H, S_q) contiguous float32; output. -inf for fully masked rows
  ExecutionOptions options;
};

struct BackwardParams {
  Problem problem;
  TensorView q;   // (B, S_q, H, d), dtype problem.dtype
  TensorView k;   // (B, S_k, H_kv, d), dtype problem.dtype
  TensorView v;   // (B, S_k, H_kv, d), dtype problem.dtype
  TensorView o;   // (B, S_q, H, d), dtype problem.dtype: the forward's output
  TensorView dO;  // (B, S_q, H, d), dtype problem.dtype: gradient of the loss w.r.t. O
  const float* lse = nullptr;  // L from the forward, (B, H, S_q) contiguous float32
  TensorView dq;  // (B, S_q, H, d), dtype problem.grad_dtype; output
  TensorView dk;  // (B, S_k, H_kv, d), dtype problem.grad_dtype; output, summed over the group
  TensorView dv;  // (B, S_k, H_kv, d), dtype problem.grad_dtype; output, summed over the group
  ExecutionOptions options;
};

// Validation shared by every backend: shapes against the problem, dtypes, null pointers,
// H_kv dividing H, d in 1..256, S >= 1, a finite scale, a contiguous last dim, outputs that
// overlap inputs or each other. Throws InvalidArgument naming the field and the values.
void validate(const Problem& p);
void validate(const ForwardParams& p);
void validate(const BackwardParams& p);
// The problem and the input views only (Q, K, V; and dO for backward), for code that reads the
// inputs but writes its results elsewhere (the gold reference). Same errors as validate().
void validate_inputs(const ForwardParams& p);
void validate_inputs(const BackwardParams& p);

}  // namespace flashref

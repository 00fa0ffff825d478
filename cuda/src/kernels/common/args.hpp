// The one argument struct every kernel of the cuda backend takes (by value), built on the host
// from ForwardParams / BackwardParams after validation. Plain C++: no CUDA types.
#pragma once

#include <cstdint>

namespace flashref::cuda::kernels {

// A (batch, seq, head, dim) tensor: base pointer and element strides; the dim is contiguous.
struct TensorArg {
  void* ptr = nullptr;
  std::int64_t batch_stride = 0, row_stride = 0, head_stride = 0;
};

// Element type codes for outputs whose dtype is only known at run time (the gradients).
enum OutCode : int { kOutF32 = 0, kOutF16 = 1, kOutBF16 = 2 };

// Rows of the backward workspace (lse2, dsum below) are padded to a multiple of this, which
// every kernel's query tile divides.
inline constexpr int kWorkspaceRowPad = 128;
// The query tile of the sm90 fused backward's dQ accumulator (AttnArgs::dq_accum).
inline constexpr int kDqTileRows = 64;

struct AttnArgs {
  TensorArg q, k, v, o;  // (B, S_q, H, d), (B, S_k, H_kv, d) x2, (B, S_q, H, d)
  TensorArg dO;          // (B, S_q, H, d); backward only
  TensorArg dq, dk, dv;  // gradients, dtype grad_code; backward only
  float* lse = nullptr;  // L, (B, H, S_q) contiguous: written by forward, read by backward
  // Backward workspace, each (B * H, S_q_pad) float32, rows past S_q padded so tiles need no
  // predicate: lse2 = L * log2(e) for the tensor-core kernels, L itself for the float32 ones
  // (+inf where L = -inf, so P = 0 there and a fully masked row never makes NaN), and
  // dsum = D = rowsum(dO * O) (0 in the padding).
  float* lse2 = nullptr;
  float* dsum = nullptr;
  int B = 1, H = 1, H_kv = 1, group = 1;  // group = H / H_kv query heads per key/value head
  int S_q = 1, S_k = 1, S_q_pad = 1;
  int d = 1;              // true head dim (kernels are compiled for a padded kD >= d)
  float scale = 1.0f;     // softmax scale
  float scale_log2 = 1;   // scale * log2(e): scores go to the log2 domain in one multiply
  int causal = 0;         // 0: no mask; 1: key k visible to query q iff k <= q + causal_offset
  int causal_offset = 0;  // 0 for top-left, S_k - S_q for bottom-right; a placed block's:
                          // its global offsets folded in (backend.cpp, placed_causal_offset)
  // 1 when each query row's keys are all here (a whole problem); 0 for a placed block, whose
  // rows may see keys of other blocks, so a row seeing one key here is not P = 1.
  int whole_rows = 1;
  int grad_code = kOutF32;
  // The sm90 fused backward's workspace (null otherwise): dQ's float32 accumulator, (B * H,
  // S_q_pad / 64) tiles of 64 x kD in the order its kernel writes them, and one counter per
  // tile that orders the adds (null: the atomic, unordered option).
  float* dq_accum = nullptr;
  int* dq_semaphore = nullptr;
  // The sm90 kernels' tile order: the tiles of this many (batch, head) pairs are numbered
  // together, so that their other side stays in L2 (kernels/common/tile_order.hpp); 0: all.
  int tile_section = 0;
  // The sm90 fused backward's workspace too: the count of key tiles its persistent blocks
  // have taken (zeroed by the preprocess; each block takes the next with an atomic add).
  int* tile_counter = nullptr;
};

}  // namespace flashref::cuda::kernels

// Tile choices of the sm80 family (mma.sync; kernels/sm80/), per operand policy and compiled
// head dim: the one place they live. Registers and shared memory per choice are in
// docs/cuda.md (from `nvcc -Xptxas -v`); measured timings and the rejected alternatives are in
// docs/perf-notes.md. The exact float32 kernels' tiles are in kernels/ffma/configs.hpp.
//
// Compiled head dims: 32, 64, 128, 256 (TF32: up to 128). A problem's d (a multiple of 8 for
// bf16/f16, of 4 for float32) runs on the smallest compiled kD >= d, its extra columns
// zero-filled on load and never stored.
//
// Variants other than 0 are the rejected alternatives, kept with their numbers; they are
// compiled only with FLASHREF_CUDA_TUNING_VARIANTS (kernels/common/launch.cuh).
#pragma once

#include "kernels/sm80/bwd_dkdv.cuh"
#include "kernels/sm80/bwd_dq.cuh"
#include "kernels/sm80/fwd.cuh"
#include "kernels/sm80/ops_3xtf32.cuh"
#include "kernels/sm80/ops_fp16.cuh"
#include "kernels/sm80/ops_tf32.cuh"

namespace flashref::cuda::kernels {

// bf16 / f16 (Sm80Fp16Ops<E>).
//
// Forward: <Ops, kD, B_q, B_k, warps, Q in registers>.
// Variant 0 is the default; for d = 64 the others are the alternatives measured against it
// (FLASHREF_CUDA_TUNE selects one for benchmarking; docs/perf-notes.md has the numbers, run 2,
// leaderboard forward on the H200):
//   d = 64, v0: 64 x 64, 4 warps of 16 rows, Q in registers (162 registers, 3 blocks per SM):
//               2.11 ms
//           v1: 128 x 32, 4 warps of 32 rows (each K/V fragment feeds two mma tiles; 244
//               registers): 2.39 ms
//           v2: 128 x 64, 8 warps of 16 rows (166 registers, 1 block per SM): 2.81 ms
//           v3: 128 x 64, 4 warps of 32 rows, Q re-read from shared memory (FlashAttention-2's
//               choice; here 255 registers and 40 bytes of spills): 2.17 ms
//   d = 128: 8 warps of 16 rows; 32 rows per warp would need ~190 accumulator registers.
//   d = 256: 128 x 32, Q re-read from shared memory (64 x 32 spilled 92 bytes).
template <typename Ops, int kD, int kVariant = 0>
struct FwdMmaConfig;
template <typename E>
struct FwdMmaConfig<Sm80Fp16Ops<E>, 32, 0> {
  using Traits = FwdMmaTraits<Sm80Fp16Ops<E>, 32, 128, 64, 4, false>;
};
template <typename E>
struct FwdMmaConfig<Sm80Fp16Ops<E>, 64, 0> {
  using Traits = FwdMmaTraits<Sm80Fp16Ops<E>, 64, 64, 64, 4, true>;
};
template <typename E>
struct FwdMmaConfig<Sm80Fp16Ops<E>, 64, 1> {
  using Traits = FwdMmaTraits<Sm80Fp16Ops<E>, 64, 128, 32, 4, true>;
};
template <typename E>
struct FwdMmaConfig<Sm80Fp16Ops<E>, 64, 2> {
  using Traits = FwdMmaTraits<Sm80Fp16Ops<E>, 64, 128, 64, 8, true>;
};
template <typename E>
struct FwdMmaConfig<Sm80Fp16Ops<E>, 64, 3> {
  using Traits = FwdMmaTraits<Sm80Fp16Ops<E>, 64, 128, 64, 4, false>;
};
template <typename E>
struct FwdMmaConfig<Sm80Fp16Ops<E>, 128, 0> {
  using Traits = FwdMmaTraits<Sm80Fp16Ops<E>, 128, 128, 64, 8, true>;
};
template <typename E>
struct FwdMmaConfig<Sm80Fp16Ops<E>, 256, 0> {
  using Traits = FwdMmaTraits<Sm80Fp16Ops<E>, 256, 128, 32, 8, false>;
};

// Backward dQ pass: <Ops, kD, B_k, warps (B_q = 16 * warps), Q/dO in registers>.
//   d = 64, v0: B_q = 128 (8 warps, 234 registers): 3.26 ms alone (ncu, run 2)
//           v1: B_q = 64 (4 warps, 250 registers): no faster (backward 7.51 vs 7.47 ms)
//   d = 256: B_k = 16 (B_k = 32 spilled 48 bytes).
template <typename Ops, int kD, int kVariant = 0>
struct BwdDqMmaConfig;
template <typename E>
struct BwdDqMmaConfig<Sm80Fp16Ops<E>, 32, 0> {
  using Traits = BwdDqMmaTraits<Sm80Fp16Ops<E>, 32, 64, 8, true>;
};
template <typename E>
struct BwdDqMmaConfig<Sm80Fp16Ops<E>, 64, 0> {
  using Traits = BwdDqMmaTraits<Sm80Fp16Ops<E>, 64, 64, 8, true>;
};
template <typename E>
struct BwdDqMmaConfig<Sm80Fp16Ops<E>, 64, 1> {
  using Traits = BwdDqMmaTraits<Sm80Fp16Ops<E>, 64, 64, 4, true>;
};
template <typename E>
struct BwdDqMmaConfig<Sm80Fp16Ops<E>, 128, 0> {
  using Traits = BwdDqMmaTraits<Sm80Fp16Ops<E>, 128, 64, 8, false>;
};
template <typename E>
struct BwdDqMmaConfig<Sm80Fp16Ops<E>, 256, 0> {
  using Traits = BwdDqMmaTraits<Sm80Fp16Ops<E>, 256, 16, 4, false>;
};

// Backward dK/dV pass: <Ops, kD, B_q, warps (B_k = 16 * warps), K/V in registers,
// dV, dK>. `Second` is a second launch when one is needed: d = 256 would need 256 accumulator
// registers for dK and dV together, so it runs one launch per gradient (the second recomputes
// S^T: 7 products instead of 5 for d = 256).
//   d = 64, v0: B_k = 64, B_q = 64, 4 warps: backward 7.43 ms (run 2)
//           v1: B_k = 128, B_q = 32, 8 warps (170 registers): 8.26 ms
//           v2: B_k = 128, B_q = 64, 8 warps (247 registers): 7.47 ms, 4.13 ms alone
template <typename Ops, int kD, int kVariant = 0>
struct BwdDkvMmaConfig;
template <typename E>
struct BwdDkvMmaConfig<Sm80Fp16Ops<E>, 32, 0> {
  using Traits = BwdDkvMmaTraits<Sm80Fp16Ops<E>, 32, 64, 8, true, true, true>;
  using Second = void;
};
template <typename E>
struct BwdDkvMmaConfig<Sm80Fp16Ops<E>, 64, 0> {
  using Traits = BwdDkvMmaTraits<Sm80Fp16Ops<E>, 64, 64, 4, true, true, true>;
  using Second = void;
};
template <typename E>
struct BwdDkvMmaConfig<Sm80Fp16Ops<E>, 64, 1> {
  using Traits = BwdDkvMmaTraits<Sm80Fp16Ops<E>, 64, 32, 8, true, true, true>;
  using Second = void;
};
template <typename E>
struct BwdDkvMmaConfig<Sm80Fp16Ops<E>, 64, 2> {
  using Traits = BwdDkvMmaTraits<Sm80Fp16Ops<E>, 64, 64, 8, true, true, true>;
  using Second = void;
};
template <typename E>
struct BwdDkvMmaConfig<Sm80Fp16Ops<E>, 128, 0> {
  using Traits = BwdDkvMmaTraits<Sm80Fp16Ops<E>, 128, 32, 8, false, true, true>;
  using Second = void;
};
template <typename E>
struct BwdDkvMmaConfig<Sm80Fp16Ops<E>, 256, 0> {
  using Traits = BwdDkvMmaTraits<Sm80Fp16Ops<E>, 256, 16, 4, false, true, false>;
  using Second = BwdDkvMmaTraits<Sm80Fp16Ops<E>, 256, 16, 4, false, false, true>;
};

// TF32 (Sm80Tf32Ops: float32 inputs with allow_tf32): the same three configs and arguments.
// Operand tiles are float32 in shared memory (twice the bytes of bf16), and a TF32 fragment
// holds half the reduction width of a bf16 one, so the tiles are the bf16 ones shrunk to keep
// registers under 255 with no spills and every block under the 163 KB of shared memory an
// A100 (sm_80) allows; registers and shared memory per kernel are in
// docs/cuda.md. Not yet tuned on the GPU (docs/perf-notes.md, run 6).
//   d = 64: B_k = 64 in the forward spilled 12 bytes and in the dQ pass 96 (every B fragment
//   load of the unrolled tile hoisted into registers); B_k = 32 spills nothing.
//   d = 128: Q re-read from shared memory in the forward (in registers: 72 bytes of spills).
//   d = 256 is not compiled: a warp's 16 x 256 float accumulator takes 128 registers, and
//   every tiling tried (forward 64 x 16, dQ and dK/dV with 2 warps, dV and dK as separate
//   launches) spilled 290-400 bytes. forward()/backward() refuse d > 128 with allow_tf32
//   (kMaxTf32HeadDim, family.hpp).
template <>
struct FwdMmaConfig<Sm80Tf32Ops, 32, 0> {
  using Traits = FwdMmaTraits<Sm80Tf32Ops, 32, 64, 64, 4, true>;
};
template <>
struct BwdDqMmaConfig<Sm80Tf32Ops, 32, 0> {
  using Traits = BwdDqMmaTraits<Sm80Tf32Ops, 32, 64, 4, true>;
};
template <>
struct BwdDkvMmaConfig<Sm80Tf32Ops, 32, 0> {
  using Traits = BwdDkvMmaTraits<Sm80Tf32Ops, 32, 64, 4, true, true, true>;
  using Second = void;
};
template <>
struct FwdMmaConfig<Sm80Tf32Ops, 64, 0> {
  using Traits = FwdMmaTraits<Sm80Tf32Ops, 64, 64, 32, 4, true>;
};
template <>
struct BwdDqMmaConfig<Sm80Tf32Ops, 64, 0> {
  using Traits = BwdDqMmaTraits<Sm80Tf32Ops, 64, 32, 4, true>;
};
template <>
struct BwdDkvMmaConfig<Sm80Tf32Ops, 64, 0> {
  using Traits = BwdDkvMmaTraits<Sm80Tf32Ops, 64, 32, 4, true, true, true>;
  using Second = void;
};
template <>
struct FwdMmaConfig<Sm80Tf32Ops, 128, 0> {
  using Traits = FwdMmaTraits<Sm80Tf32Ops, 128, 64, 32, 4, false>;
};
template <>
struct BwdDqMmaConfig<Sm80Tf32Ops, 128, 0> {
  using Traits = BwdDqMmaTraits<Sm80Tf32Ops, 128, 16, 4, false>;
};
template <>
struct BwdDkvMmaConfig<Sm80Tf32Ops, 128, 0> {
  using Traits = BwdDkvMmaTraits<Sm80Tf32Ops, 128, 16, 4, false, true, true>;
  using Second = void;
};

// Exact float32 as 3xTF32 (Sm80Tf32x3Ops; FLASHREF_CUDA_FAMILY=3xtf32, not the default): each
// product is three mma from a zeroed accumulator plus an FADD, with its operands split where
// they are used, so the split's temporaries sit on top of the TF32 kernels' registers. The
// TF32 tiles spilled (ptxas, sm_90a), so these are the largest of a sweep that spill nothing,
// with the kept operand's fragments (Q_i; K_j, V_j) re-read from shared memory wherever
// holding them spilled. Registers, sm_90a, no spills:
//   forward    d = 32: 64 x 64, 4 warps, Q in registers; d = 64: 64 x 32, 4 warps (Q in
//              registers: 255); d = 128: 128 x 32, 8 warps (255; 64 x 16 spilled 20 bytes),
//              variant fwd=1 64 x 8, 4 warps (244)
//   dQ         d = 32: B_k 32 (134; Q/dO in registers spilled 60 bytes); d = 64: B_k 32 (174);
//              d = 128: B_k 16 (178)
//   dK/dV      d = 32: B_q 32 (134; B_q 64 spilled 32 bytes); d = 64: B_q 16 (158; B_q 32: 16
//              bytes of spills at the 168 registers of 3 blocks); d = 128: B_q 8 (227), variant
//              dkdv=1 B_q 16 (76 bytes of spills)
// Timed in docs/perf-notes.md (runs 25a, 25b).
template <int kD, int kVariant>
struct FwdMmaConfig<Sm80Tf32x3Ops, kD, kVariant> {
  static_assert(kD == 32 || kD == 64 || kD == 128, "3xTF32 compiled head dims: 32, 64, 128");
  static constexpr bool kNarrow = kD == 128 && kVariant == 1;
  using Traits = FwdMmaTraits<Sm80Tf32x3Ops, kD, kD == 128 && !kNarrow ? 128 : 64,
                              kD == 32   ? 64
                              : kD == 64 ? 32
                              : kNarrow  ? 8
                                         : 32,
                              kD == 128 && !kNarrow ? 8 : 4, kD == 32>;
};
template <int kD, int kVariant>
struct BwdDqMmaConfig<Sm80Tf32x3Ops, kD, kVariant> {
  using Traits = BwdDqMmaTraits<Sm80Tf32x3Ops, kD, kD == 128 ? 16 : 32, 4, false>;
};
template <int kD, int kVariant>
struct BwdDkvMmaConfig<Sm80Tf32x3Ops, kD, kVariant> {
  using Traits = BwdDkvMmaTraits<Sm80Tf32x3Ops, kD,
                                 kD == 32        ? 32
                                 : kD == 64      ? 16
                                 : kVariant == 1 ? 16
                                                 : 8,
                                 4, false, true, true>;
  using Second = void;
};

}  // namespace flashref::cuda::kernels

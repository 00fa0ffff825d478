// Tile choices per compiled head dim, for every kernel: the one place they live. Registers and
// shared memory per choice are in docs/cuda.md (from `nvcc -Xptxas -v`); measured timings and
// the rejected alternatives are in docs/perf-notes.md.
//
// Compiled head dims: 32, 64, 128, 256. A problem's d (a multiple of 8 for bf16/f16, of 4 for
// float32) runs on the smallest compiled kD >= d, its extra columns zero-filled on load and
// never stored.
#pragma once

#include "kernels/bwd_dkdv_mma.cuh"
#include "kernels/bwd_dkdv_tf32.cuh"
#include "kernels/bwd_dq_mma.cuh"
#include "kernels/bwd_dq_tf32.cuh"
#include "kernels/bwd_f32.cuh"
#include "kernels/fwd_f32.cuh"
#include "kernels/fwd_mma.cuh"
#include "kernels/fwd_tf32.cuh"

namespace flashref::cuda::kernels {

// Forward, tensor cores: <Element, kD, B_q, B_k, warps, Q in registers>.
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
template <typename E, int kD, int kVariant = 0>
struct FwdMmaConfig;
template <typename E>
struct FwdMmaConfig<E, 32, 0> {
  using Traits = FwdMmaTraits<E, 32, 128, 64, 4, false>;
};
template <typename E>
struct FwdMmaConfig<E, 64, 0> {
  using Traits = FwdMmaTraits<E, 64, 64, 64, 4, true>;
};
template <typename E>
struct FwdMmaConfig<E, 64, 1> {
  using Traits = FwdMmaTraits<E, 64, 128, 32, 4, true>;
};
template <typename E>
struct FwdMmaConfig<E, 64, 2> {
  using Traits = FwdMmaTraits<E, 64, 128, 64, 8, true>;
};
template <typename E>
struct FwdMmaConfig<E, 64, 3> {
  using Traits = FwdMmaTraits<E, 64, 128, 64, 4, false>;
};
template <typename E>
struct FwdMmaConfig<E, 128, 0> {
  using Traits = FwdMmaTraits<E, 128, 128, 64, 8, true>;
};
template <typename E>
struct FwdMmaConfig<E, 256, 0> {
  using Traits = FwdMmaTraits<E, 256, 128, 32, 8, false>;
};

// Backward dQ pass, tensor cores: <Element, kD, B_k, warps (B_q = 16 * warps), Q/dO in regs>.
//   d = 64, v0: B_q = 128 (8 warps, 234 registers): 3.26 ms alone (ncu, run 2)
//           v1: B_q = 64 (4 warps, 250 registers): no faster (backward 7.51 vs 7.47 ms)
//   d = 256: B_k = 16 (B_k = 32 spilled 48 bytes).
template <typename E, int kD, int kVariant = 0>
struct BwdDqMmaConfig;
template <typename E>
struct BwdDqMmaConfig<E, 32, 0> {
  using Traits = BwdDqMmaTraits<E, 32, 64, 8, true>;
};
template <typename E>
struct BwdDqMmaConfig<E, 64, 0> {
  using Traits = BwdDqMmaTraits<E, 64, 64, 8, true>;
};
template <typename E>
struct BwdDqMmaConfig<E, 64, 1> {
  using Traits = BwdDqMmaTraits<E, 64, 64, 4, true>;
};
template <typename E>
struct BwdDqMmaConfig<E, 128, 0> {
  using Traits = BwdDqMmaTraits<E, 128, 64, 8, false>;
};
template <typename E>
struct BwdDqMmaConfig<E, 256, 0> {
  using Traits = BwdDqMmaTraits<E, 256, 16, 4, false>;
};

// Backward dK/dV pass, tensor cores: <Element, kD, B_q, warps (B_k = 16 * warps), K/V in regs,
// dV, dK>. `Second` is a second launch when one is needed: d = 256 would need 256 accumulator
// registers for dK and dV together, so it runs one launch per gradient (the second recomputes
// S^T: 7 products instead of 5 for d = 256).
//   d = 64, v0: B_k = 64, B_q = 64, 4 warps: backward 7.43 ms (run 2)
//           v1: B_k = 128, B_q = 32, 8 warps (170 registers): 8.26 ms
//           v2: B_k = 128, B_q = 64, 8 warps (247 registers): 7.47 ms, 4.13 ms alone
template <typename E, int kD, int kVariant = 0>
struct BwdDkvMmaConfig;
template <typename E>
struct BwdDkvMmaConfig<E, 32, 0> {
  using Traits = BwdDkvMmaTraits<E, 32, 64, 8, true, true, true>;
  using Second = void;
};
template <typename E>
struct BwdDkvMmaConfig<E, 64, 0> {
  using Traits = BwdDkvMmaTraits<E, 64, 64, 4, true, true, true>;
  using Second = void;
};
template <typename E>
struct BwdDkvMmaConfig<E, 64, 1> {
  using Traits = BwdDkvMmaTraits<E, 64, 32, 8, true, true, true>;
  using Second = void;
};
template <typename E>
struct BwdDkvMmaConfig<E, 64, 2> {
  using Traits = BwdDkvMmaTraits<E, 64, 64, 8, true, true, true>;
  using Second = void;
};
template <typename E>
struct BwdDkvMmaConfig<E, 128, 0> {
  using Traits = BwdDkvMmaTraits<E, 128, 32, 8, false, true, true>;
  using Second = void;
};
template <typename E>
struct BwdDkvMmaConfig<E, 256, 0> {
  using Traits = BwdDkvMmaTraits<E, 256, 16, 4, false, true, false>;
  using Second = BwdDkvMmaTraits<E, 256, 16, 4, false, false, true>;
};

// Exact float32 (FFMA): <kD, B_q, B_k> for the forward and the two backward passes. Each
// thread holds (B_q / 8) rows x (d / 16) columns of its output accumulator; the tiles shrink
// with d so that stays near 32-64 registers (64 x 64 at d = 128 spilled 56 bytes).
// `Small*` are the tiles used when the grid would be short of blocks (few heads, one batch:
// B * H * ceil(S / 64) < 4 per SM). With a causal mask the longest block then sets the time,
// and halving the tile halves that critical path (run 2: 256 blocks of 64 rows for 132 SMs
// left the achieved occupancy at 8.8% of 12.5%).
// The backward traits' last argument, kPairedLanes, picks the paired-lane kernels (the
// default) or the plain ones (bwd_f32.cuh; FLASHREF_CUDA_TUNE f32bwd=1 swaps every one for the
// plain). Measured on the H200 (docs/perf-notes.md, run 7), paired lanes with bitwise-identical
// results: backward 3.85 vs 4.24 ms at d = 64 (B1 H1 S16384 causal), 8.47 vs 9.84 ms at
// d = 128 (same), 8.72 vs 9.74 ms at d = 128 (B8 H1 S4096, no mask).
//   d = 128: 32 x 32 stays. Without L'_i, D_i the dK/dV block is 76,800 bytes, so 3 blocks
//   (12 warps, at most 168 registers: __launch_bounds__ min 3) share an SM, where the plain one
//   ran 2. A second Q_i/dO_i stage (+33 KB) would take it back to 2, and issuing the next
//   Q_i/dO_i at the end of a step took ptxas from 168 to 228 registers (2 blocks; 40 bytes of
//   spills at 168), so neither is done. 64 x 64 at d = 128 spilled (above).
//   d = 32, large dK/dV tile: the plain kernel, since the paired one took 246 registers there
//   (2 blocks per SM instead of 3; 8 bytes of spills when held to 168).
template <int kD>
struct F32Config;
template <>
struct F32Config<32> {
  using Fwd = FwdF32Traits<32, 64, 64>;
  using Dq = BwdF32Traits<32, 64, 64>;
  using Dkv = BwdF32Traits<32, 64, 64, false>;  // paired: 246 registers (plain: 168)
  using FwdSmall = FwdF32Traits<32, 32, 64>;
  using DqSmall = BwdF32Traits<32, 32, 64>;
  using DkvSmall = BwdF32Traits<32, 64, 32>;
};
template <>
struct F32Config<64> {
  using Fwd = FwdF32Traits<64, 64, 64>;
  using Dq = BwdF32Traits<64, 64, 64>;
  using Dkv = BwdF32Traits<64, 64, 64>;
  using FwdSmall = FwdF32Traits<64, 32, 64>;
  using DqSmall = BwdF32Traits<64, 32, 64>;
  using DkvSmall = BwdF32Traits<64, 64, 32>;
};
template <>
struct F32Config<128> {
  using Fwd = FwdF32Traits<128, 32, 64>;
  using Dq = BwdF32Traits<128, 32, 32>;
  using Dkv = BwdF32Traits<128, 32, 32>;
  using FwdSmall = Fwd;
  using DqSmall = Dq;
  using DkvSmall = Dkv;
};
template <>
struct F32Config<256> {
  using Fwd = FwdF32Traits<256, 16, 32>;
  using Dq = BwdF32Traits<256, 16, 32>;
  using Dkv = BwdF32Traits<256, 32, 16>;
  using FwdSmall = Fwd;
  using DqSmall = Dq;
  using DkvSmall = Dkv;
};

// TF32 tensor cores (float32 inputs with allow_tf32): forward <kD, B_q, B_k, warps, Q in
// registers>, dQ pass <kD, B_k, warps (B_q = 16 * warps), Q/dO in registers>, dK/dV pass
// <kD, B_q, warps (B_k = 16 * warps), K/V in registers, dV, dK> (+ `DkvSecond`, a second
// launch, or void). Operand tiles are float32 in shared memory (twice the bytes of bf16), and
// a TF32 fragment holds half the reduction width of a bf16 one, so the tiles are the bf16
// ones shrunk to keep registers under 255 with no spills and every block under the 163 KB of
// shared memory an A100 (sm_80) allows; registers and shared memory per kernel are in
// docs/cuda.md. Not yet tuned on the GPU (docs/perf-notes.md, run 6).
//   d = 64: B_k = 64 in the forward spilled 12 bytes and in the dQ pass 96 (every B fragment
//   load of the unrolled tile hoisted into registers); B_k = 32 spills nothing.
//   d = 128: Q re-read from shared memory in the forward (in registers: 72 bytes of spills).
//   d = 256 is not compiled: a warp's 16 x 256 float accumulator takes 128 registers, and
//   every tiling tried (forward 64 x 16, dQ and dK/dV with 2 warps, dV and dK as separate
//   launches) spilled 290-400 bytes. forward()/backward() refuse d > 128 with allow_tf32
//   (kMaxTf32HeadDim, dispatch.hpp).
template <int kD>
struct Tf32Config;
template <>
struct Tf32Config<32> {
  using Fwd = FwdTf32Traits<32, 64, 64, 4, true>;
  using Dq = BwdDqTf32Traits<32, 64, 4, true>;
  using Dkv = BwdDkvTf32Traits<32, 64, 4, true, true, true>;
  using DkvSecond = void;
};
template <>
struct Tf32Config<64> {
  using Fwd = FwdTf32Traits<64, 64, 32, 4, true>;
  using Dq = BwdDqTf32Traits<64, 32, 4, true>;
  using Dkv = BwdDkvTf32Traits<64, 32, 4, true, true, true>;
  using DkvSecond = void;
};
template <>
struct Tf32Config<128> {
  using Fwd = FwdTf32Traits<128, 64, 32, 4, false>;
  using Dq = BwdDqTf32Traits<128, 16, 4, false>;
  using Dkv = BwdDkvTf32Traits<128, 16, 4, false, true, true>;
  using DkvSecond = void;
};

}  // namespace flashref::cuda::kernels

// Tile choices of the ffma family (the exact float32 kernels, kernels/ffma/), per compiled head
// dim, with the measured reason for each; docs/perf-notes.md has the runs.
//
// Compiled head dims: 32, 64, 128, 256; a problem's d (a multiple of 4) runs on the smallest
// compiled kD >= d.
#pragma once

#include "kernels/ffma/bwd.cuh"
#include "kernels/ffma/fwd.cuh"

namespace flashref::cuda::kernels {

// Exact float32 (FFMA): <kD, B_q, B_k> for the forward and the two backward passes. Each
// thread holds (B_q / 8) rows x (d / 16) columns of its output accumulator; the tiles shrink
// with d so that stays near 32-64 registers (64 x 64 at d = 128 spilled 56 bytes).
// `Small*` are the tiles used when the grid would be short of blocks (few heads, one batch:
// B * H * ceil(S / 64) < 4 per SM). With a causal mask the longest block then sets the time,
// and halving the tile halves that critical path (run 2: 256 blocks of 64 rows for 132 SMs
// left the achieved occupancy at 8.8% of 12.5%).
// The backward traits' last argument, kPairedLanes, picks the paired-lane kernels (the
// default) or the plain ones (kernels/ffma/bwd.cuh; FLASHREF_CUDA_TUNE f32bwd=1, a tuning variant,
// swaps every one for the plain). Measured on the H200 (docs/perf-notes.md, run 7), paired lanes
// with bitwise-identical results: backward 3.85 vs 4.24 ms at d = 64 (B1 H1 S16384 causal), 8.47
// vs 9.84 ms at d = 128 (same), 8.72 vs 9.74 ms at d = 128 (B8 H1 S4096, no mask).
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

}  // namespace flashref::cuda::kernels

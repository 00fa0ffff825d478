// Tile and pipeline choices of the sm90 forward, per compiled head dim, with the measured reason
// (H200, 2026-12-01; the experiments of dev/sm90, README there, raw logs in
// bench/results/2026-12-01-h200-sm90-exp{1,2,3}).
#pragma once

#include "kernels/sm90/bwd_dkdv.cuh"
#include "kernels/sm90/bwd_dq.cuh"
#include "kernels/sm90/fwd.cuh"

namespace flashref::cuda::kernels::sm90 {

template <typename Element, int kD>
struct FwdConfig;

// d = 64: two consumers (B_q = 128), two stages, ping-pong, pipelined: 1.530 ms on the
// leaderboard (B1 H16 S16384 causal; cuDNN 1.247, FA2 1.973); without ping-pong 1.640; the
// same roles unpipelined 1.742. Rejected for now: three consumers (B_q = 192) ran 1.386 ms but
// spill 16 bytes (512 threads cap ptxas at 128 registers before setmaxnreg raises them to 160);
// the next step is to make it fit (B_k = 96 or 112 shrinks S and P~ by a quarter).
template <typename Element>
struct FwdConfig<Element, 64> {
  using Traits = FwdTraits<Element, 64, 2, 2, true>;
};

// d = 128: two consumers (three leave each 160 registers, less than S, O and P~ need), two
// stages (a third does not fit beside Q in 227 KB), ping-pong, pipelined: 2.213 ms (B1 H16
// S16384 causal; cuDNN 1.900, FA2 3.400). Without ping-pong 2.385; unpipelined 2.08-2.28 (the
// spread of two processes: at d = 128 the choice is within noise, to be timed again by bench).
template <typename Element>
struct FwdConfig<Element, 128> {
  using Traits = FwdTraits<Element, 128, 2, 2, true>;
};

// The backward's two passes (dQ; dK and dV), two stages each. First version: to be timed.
template <typename Element, int kD>
struct BwdConfig {
  using Dq = BwdDqTraits<Element, kD, 2>;
  using Dkv = BwdDkvTraits<Element, kD, 2>;
};

}  // namespace flashref::cuda::kernels::sm90

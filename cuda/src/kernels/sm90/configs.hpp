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

// The d = 64 alternatives FLASHREF_CUDA_TUNE fwd90=1..5 picks (compiled with
// FLASHREF_CUDA_TUNING_VARIANTS): three consumers (B_q = 192), which need B_k below 128 to fit
// their 160 registers (ptxas: 16 bytes spilled at B_k = 128, none at 112 or 96; S and P~ shrink
// by 8 + 4 registers at 112).
template <typename Element, int kVariant>
struct FwdVariant64;
template <typename Element>
struct FwdVariant64<Element, 1> {
  using Traits = FwdTraits<Element, 64, 3, 2, true, 112>;
};
template <typename Element>
struct FwdVariant64<Element, 2> {
  using Traits = FwdTraits<Element, 64, 3, 2, true, 96>;
};
template <typename Element>
struct FwdVariant64<Element, 3> {
  using Traits = FwdTraits<Element, 64, 3, 3, true, 112>;
};
// fwd90=4: the kept configuration on a persistent grid; fwd90=5: variant 1 on one.
template <typename Element>
struct FwdVariant64<Element, 4> {
  using Traits = FwdTraits<Element, 64, 2, 2, true, 128, true>;
};
template <typename Element>
struct FwdVariant64<Element, 5> {
  using Traits = FwdTraits<Element, 64, 3, 2, true, 112, true>;
};

// fwd90=4 at d = 128: the kept configuration on a persistent grid (the only d = 128 variant).
template <typename Element>
struct FwdVariant128Persistent {
  using Traits = FwdTraits<Element, 128, 2, 2, true, 128, true>;
};

// d = 128: two consumers (three leave each 160 registers, less than S, O and P~ need), two
// stages (a third does not fit beside Q in 227 KB), ping-pong, pipelined: 2.213 ms (B1 H16
// S16384 causal; cuDNN 1.900, FA2 3.400). Without ping-pong 2.385; unpipelined 2.08-2.28 (the
// spread of two processes: at d = 128 the choice is within noise, to be timed again by bench).
template <typename Element>
struct FwdConfig<Element, 128> {
  using Traits = FwdTraits<Element, 128, 2, 2, true>;
};

// The backward's two passes (dQ; dK and dV): three stages in both, and at d = 64 the dQ pass
// with B_k = 128 (it has the registers: S and dP 64 + 64, dQ 32, dS 32). Runs 10e and 10f
// (bench/results/2026-12-01-h200-run10/variants-*.txt), leaderboard backward at d = 64, medians
// of 20 per round: run 10's two stages and B_k = 64, 4.29-4.32 ms; B_k = 128, 3.85-4.05; three
// stages, 3.98-4.02; both (kept), 3.83-4.05. At d = 128 every choice is within the spread
// (7.02-7.22). FlashAttention-3's grid at S = 1k (d = 64): 0.955 ms, 0.900, 0.920, 0.905.
template <typename Element, int kD>
struct BwdConfig {
  using Dq = BwdDqTraits<Element, kD, 3, kD == 64 ? 128 : 64>;
  using Dkv = BwdDkvTraits<Element, kD, 3>;
};

}  // namespace flashref::cuda::kernels::sm90

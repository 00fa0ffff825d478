// Tile and pipeline choices of the sm90 forward, per compiled head dim, with the measured reason
// (H200, 2026-12-01; the experiments of dev/sm90, README there, raw logs in
// bench/results/2026-12-01-h200-sm90-exp{1,2,3}).
#pragma once

#include <type_traits>

#include "kernels/sm90/bwd_dkdv.cuh"
#include "kernels/sm90/bwd_dq.cuh"
#include "kernels/sm90/fwd.cuh"

namespace flashref::cuda::kernels::sm90 {

template <typename Element, int kD>
struct FwdConfig;

// d = 64: three consumers (B_q = 192), three stages, B_k = 112, ping-pong, pipelined, on a
// persistent grid. Run 11 (bench/results/2026-12-01-h200-run11, medians of 20, two rounds,
// leaderboard = B1 H16 S16384 causal; cuDNN 1.243 in run 10c): two consumers at B_k = 128 (run
// 10's choice) 1.520-1.533 ms; three consumers need B_k below 128 to fit their 160 registers
// (16 bytes spilled at 128, none at 112 or 96): with two stages 1.411-1.425 (B_k = 112) and
// 1.481-1.489 (96), with three stages at 112 1.298-1.310. The persistent grid (a block per
// multiprocessor looping over tiles, fwd.cuh) took FlashAttention-3's grid at S = 1k from
// 0.339 to 0.296 ms with two consumers and left the leaderboard within 1.5% (1.498-1.506).
// Run 11b, this combination against its parts: 1.296-1.298 ms on the leaderboard, 0.746-0.751
// at S = 4k (B 8), 0.300-0.301 at S = 1k (B 32); one block per tile (fwd90=1) 1.309-1.311,
// 0.786-0.787, 0.335-0.336; four stages (fwd90=3) within 0.5% of three.
//
// Both head dims: the scale folded into the exponent (FwdTraitsFoldScale), for a positive scale
// (otherwise the same tiles unfolded, `Unfolded`). Run 14b (bench/results/2026-12-02-h200-
// run14b, medians of 20, two rounds, same call), unfolded -> folded, ms: leaderboard d = 64
// 1.284-1.297 -> 1.247-1.255, no mask 2.620-2.636 -> 2.528-2.563, S = 4k 0.751 -> 0.730-0.731,
// S = 1k 0.299-0.301 -> 0.290; d = 128 leaderboard 1.975 -> 1.959-1.963, S = 1k 0.431 -> 0.427.
template <typename Element>
struct FwdConfig<Element, 64> {
  // The rows past the fold's range computed by a kernel of their own after this one
  // (FwdTraitsRowsAfter). Run 34c (bench/results/2026-12-05-h200-run34c, medians of 30, three
  // rounds in alternation, ms, the rows in the kernel -> after it): leaderboard 1.034-1.042 ->
  // 1.019-1.023, no mask 2.089-2.195 -> 2.058-2.170 (minima 2.082-2.084 -> 2.050-2.052), S = 2k
  // (B 16) 0.376-0.380 -> 0.367-0.371, S = 8k (B 4) 1.123-1.124 -> 1.104-1.105: 1.5-2.3% of the
  // 2.3-3.8% the fix had cost (run 33f). The short tiles keep them in the kernel (FwdShortConfig).
  using Traits = FwdTraitsRowsAfter<FwdTraitsFoldScale<Element, 64, 3, 3, true, 112, true>>;
  using Unfolded = FwdTraits<Element, 64, 3, 3, true, 112, true>;
};

// d = 64 at S_q <= 2048: 128 x 128 tiles (two consumers, three stages), where the 192-row
// tiles leave the last one of a sequence a third full and the causal diagonal costs more of
// 192 x 112 than of 128 x 128 (their key tiles cross it two or three at a time: 14.5% more of S
// than the causal half at S = 2k, the short tiles 6.25%, 3.1% with narrow steps). Run 17b
// (bench/results/2026-12-02-h200-run17b, medians of 20, two rounds): S = 1k (B 32) 0.261-0.262
// ms against 0.281; S = 2k (B 16) 0.440-0.442 against 0.413, 4k 0.800-0.803 against
// 0.721-0.726. Since then the short tiles gained the hand-over and narrow steps, and run 38c
// (bench/results/2026-12-05-h100-run38c, H100, medians of 30, two rounds alternating, ms, the
// 192-row tiles -> the short ones, fwd90=28) measured S = 2k (B 16) 0.3675, 0.3669 -> 0.3580,
// 0.3552 and (B 32) 0.7338, 0.7204 -> 0.6987, 0.6939: 3-5% faster, so kMaxRows went from 1024
// to 2048 with the causal mask (fwd90=7 runs the 192-row tiles there again; fwd90=28 the short
// tiles up to 4096, and without the mask up to 2048). Not further: run 39a (bench/results/
// 2026-12-06-h200-run39a, H200, the same rounds) had the short tiles 3% slower at 4k causal (B 8:
// 0.6147, 0.6118 -> 0.6336, 0.6333) and 10% slower at 2k without the mask (B 16: 0.5832, 0.5880
// -> 0.6465, 0.6507).
// The producer hands each tile's coordinates to the consumers, with Q loaded a tile ahead in
// a second buffer (FwdTraitsHandTile). Run 30c (bench/results/2026-12-04-h200-run30c, medians
// of 30, three rounds in rotating order, ms, the consumers decoding their tiles -> handed over
// with two Q buffers): S = 1k (B 32) 0.2306, 0.2289, 0.2287 -> 0.2232, 0.2221, 0.2220; S = 512
// (B 64) 0.1601, 0.1597, 0.1600 -> 0.1503, 0.1500, 0.1495; the same bits. Handed over with one Q
// buffer: 0.2245, 0.2231, 0.2228 and 0.1582, 0.1570, 0.1571, deleted. On the 192-row tiles (S =
// 2k, B 16) two buffers were level (0.3629, 0.3602, 0.3612 against 0.3653, 0.3618, 0.3624) and
// one slower (0.3713, 0.3712, 0.3692), and on the leaderboard level (1.0131-1.0136 against
// 1.0094-1.0123); at d = 128, S = 1k, one buffer level (0.2912-0.2916 against 0.2911-0.2924;
// no room for two): neither kept.
// Without a mask, the next tile's first step runs under the last one's tail
// (FwdTraitsTileOverlap). Run 31a (bench/results/2026-12-04-h200-run31a, medians of 30, three
// rounds in rotating order, ms, the default -> the overlap): without the mask S = 1k (B 32)
// 0.3555, 0.3543, 0.3548 -> 0.3424, 0.3428, 0.3423; causal S = 1k 0.2223, 0.2227, 0.2222 ->
// 0.2291, 0.2286, 0.2286 and S = 512 (B 64) 0.1494, 0.1493, 0.1496 -> 0.1576, 0.1576, 0.1570, so
// not with the mask. Not for want of the next tile's loads: run 31f (bench/results/2026-12-04-
// h200-run31f) gave the overlap four stages, and it was as slow (S = 1k 0.2303, 0.2304, 0.2301
// against the default's 0.2235, 0.2228, 0.2232; four stages alone 0.2257, 0.2263, 0.2250); run
// 31b took it only where those loads had landed, by a vote of the warpgroup, slower still
// (0.240).
// With the causal mask, narrow steps (FwdTraitsNarrowSteps): on the diagonal the upper consumer's
// rows see 64 keys of the tile, and its S and P~ V run over those alone. Run 36c (bench/results/
// 2026-12-05-h100-run36c, H100, medians of 30, three rounds alternating, ms, without -> with):
// S = 1k (B 32) 0.2369, 0.2357, 0.2363 -> 0.2283, 0.2269, 0.2275 (-3.7%); S = 512 (B 64) 0.1636,
// 0.1641, 0.1636 -> 0.1586, 0.1592, 0.1577 (-3.3%); the same bits on 450 problems. Not on the
// 192-row tiles (S = 2k 0.365 -> 0.500, the leaderboard 1.01 -> 1.60: ptxas serializes their
// wgmma there, C7511, out of registers) nor at d = 128 (S = 1k 0.314 -> 0.321, 2k 0.490 ->
// 0.501, where the main loop's descriptors leave the uniform datapath: R2UR before each wgmma);
// fwd90=21 times them there. Run 36a: the width by a plain branch (not a warp vote) took every
// kernel's descriptors off the uniform datapath: S = 1k -0.7%, the leaderboard +12%.
template <typename Element>
struct FwdShortConfig {
  using Base = FwdTraitsHandTile<FwdTraitsFoldScale<Element, 64, 2, 3, true, 128, true>>;
  using Traits = FwdTraitsNarrowSteps<Base>;
  using NoMaskTraits = FwdTraitsTileOverlap<Base>;
  // Walks past kShortWalkKeys keys (S_k, with the causal mask): each step's P~ V wait held after
  // its softmax, the full steps' P~ in two register arrays in turn (FwdTraitsPinPvWait,
  // FwdTraitsTwoPBuffers; the same bits). Run 46c (bench/results/2026-12-06-h100-run46c, H100,
  // medians of 30, two rounds, ms, without -> with): S = 2k (B 16) 0.3468, 0.3483 -> 0.3417,
  // 0.3416, but 1k (B 32) 0.2116, 0.2110 -> 0.2144, 0.2139: the gain is the full steps', and
  // a 1k walk has few. Run 47b (bench/results/2026-12-07-h100-run47b, the same rounds): S = 2k
  // 0.3482, 0.3490 -> 0.3416, 0.3423 (-1.9%), 1.5k (B 20) 0.2642, 0.2663 -> 0.2637, 0.2636.
  // fwd90=34 runs the other choice of each walk; fwd90=35 (a default kernel, in any build) this
  // one on every causal problem the short tiles take, so that the suites' small problems run it.
  using LongWalkTraits = FwdTraitsTwoPBuffers<FwdTraitsPinPvWait<Traits>>;
  static constexpr int kShortWalkKeys = 1024;
  static constexpr int kMaxRows = 2048;
  // Without the mask, where run 38c measured nothing past 1024 (there the tiles overlap their
  // first step with the last one's tail, and every tile walks every key tile).
  static constexpr int kMaxRowsNoMask = 1024;
  static bool takes(const AttnArgs& args) {
    return args.S_q <= (args.causal ? kMaxRows : kMaxRowsNoMask);
  }
};

// Whether the forward of head dim kD keeps one section of heads where each wave of blocks holds
// two tiles of each head or more (kernels/common/tile_order.hpp's wave rule). At d = 64 it does:
// run 17b, sections there instead (order90=5) took the leaderboard from 1.242 to 1.304 ms and
// S = 8k (B 4) from 1.280-1.287 to 1.339-1.342, their grids 129 blocks for a level snake. At
// d = 128 it does not: sections took S = 8k from 1.945 to 1.802 and S = 32k from 7.912 to 7.505
// (the leaderboard 1.735 either way), on 128 blocks.
constexpr bool fwd_one_section_per_wave(int kD) {
  return kD == 64;
}

// Whether the forward's sections take one L2 partition's budget (launch.cuh's
// tile_order_budget) rather than the whole L2's: everywhere but d = 64 past S_k = 2048, where the
// whole L2's was faster in every pair timed. Run 41a (bench/results/2026-12-06-h100-run41a,
// H100, medians of 30, two rounds in turn, ms, one partition's -> the whole L2's, order90=2):
// d = 64 S = 4k (B 8) 0.6172, 0.6216 -> 0.6164, 0.6137 (-0.7%); run 40b +1.0% for one
// partition's in one pair. From 8k at d = 64 the wave rule keeps one section whatever the
// budget; at S = 1k and 2k one partition's was faster (run 40b: -6.5% and -0.8%), at d = 128
// everywhere but 8k (level): -6.2% at 1k, -5.4% at 16k.
constexpr bool fwd_one_partition(int kD, long long S_k) {
  return kD != 64 || S_k <= 2048;
}

// The tiles of a head that each wave must hold for the fused backward to keep one section
// (tile_order.hpp's wave rule; 0: no rule, sections by the L2 budget alone). At d = 64, four:
// run 18a (bench/results/2026-12-02-h200-run18a, medians of 20, two rounds), the leaderboard's
// 16 heads (eight tiles a head a wave) in one section (order90=6) against sections of 9 heads:
// 3.103 / 3.093 ms against 3.263 / 3.179; run 18b, S = 16k (B 2, 32 heads): one section
// 6.560 against 6.506 for sections (order90=5); run 17b, S = 8k (B 4, 64 heads, two tiles a
// head a wave): sections 3.335 against 3.614. At d = 128 none: run 18b, S = 16k (B 2) one
// section 11.676 against 10.748 for sections of 2 heads; the leaderboard, run 18a, one
// section 5.254 / 5.489 against 5.580 / 5.583 for sections of 4 (counted before the
// accumulator was).
constexpr int fused_bwd_wave_tiles(int kD) {
  return kD == 64 ? 4 : 0;
}

// Whether the fused backward's sections take one L2 partition's budget, as the forward's mostly do
// (launch.cuh's tile_order_budget), rather than the whole L2's: up to S_q = 1024 at d = 64 and
// 4096 at d = 128. Run 40b (bench/results/2026-12-06-h100-run40b, H100, medians of 20, the
// whole L2's budget -> one partition's, ms): d = 64 S = 1k (B 32) 0.6335, 0.6342 -> 0.6166,
// 0.6164 (-2.7%), but 2k (B 16) 0.912, 0.916 -> 1.022, 1.021 (+12%), 4k (B 8) 1.621 -> 1.819,
// 8k (B 4) 2.969 -> 3.358; d = 128 S = 1k 1.085, 1.089 -> 1.038, 1.043 (-4.3%), 2k 1.621, 1.628
// -> 1.595, 1.608 (-1.4%), 4k 2.826 -> 2.689 (-4.8%), but 8k 5.011 -> 5.212 (+4%), 16k (B 2)
// 10.02 -> 10.20, the leaderboard 4.715 -> 5.018. Smaller sections read less from memory; they
// also put more of a head's key tiles in each wave, where the ordered dQ has each wait for the
// one before it to add its tile. Run 41a measured that at d = 64, S = 2k (Nsight Compute's
// warp samples, the dK/dV kernel on one partition's budget against the whole L2's: 890 against
// 786 us, DRAM 18% of its peak against 35%): all of the 12% more samples were the writers'
// polls of the counter (+64%, 1.50 M tries against 1.03 M) and the consumers waiting for a free
// dQ buffer (+113%).
constexpr bool fused_bwd_one_partition(int kD, long long S_q) {
  return S_q <= (kD == 64 ? 1024 : 4096);
}

// The alternatives FLASHREF_CUDA_TUNE fwd90=N picks (compiled with
// FLASHREF_CUDA_TUNING_VARIANTS), for the run that compares them with the kept one:
//   1: the kept d = 64 tiles on a grid of one block per tile;
//   2: run 10's choice (two consumers, two stages, B_k = 128, a block per tile), at d = 64 and
//      128;
//   3: the kept d = 64 configuration with four stages (unfolded);
//   4: the kept configuration of either head dim unfolded (FwdConfig::Unfolded, which a scale
//      <= 0 always runs);
//   6: the d = 128 configuration before run 17, with two stages (folded);
//   7: at d = 64, the 192-row tiles (FwdConfig) where FwdShortConfig's are taken too
//      (FwdShortConfig's measurement; a default kernel, so any build takes it: the GPU suites
//      run with it);
//   12: the epilogue the configuration does not take (FwdTraits::kStoreOByTma, below).
template <typename Element, int kD, int kVariant>
struct FwdVariant;
template <typename Element>
struct FwdVariant<Element, 64, 1> {
  using Traits = FwdTraits<Element, 64, 3, 3, true, 112, false>;
};
template <typename Element, int kD>
struct FwdVariant<Element, kD, 2> {
  using Traits = FwdTraits<Element, kD, 2, 2, true, 128, false>;
};
template <typename Element>
struct FwdVariant<Element, 64, 3> {
  using Traits = FwdTraits<Element, 64, 3, 4, true, 112, true>;
};
template <typename Element>
struct FwdVariant<Element, 128, 6> {
  using Traits = FwdTraitsFoldScale<Element, 128, 2, 2, true, 128, true>;
};
// 12: the other epilogue of FwdTraits::kStoreOByTma: at d = 128 O written from the registers
// (the configuration before run 23c), on d = 64's short tiles (FwdShortConfig::takes) O stored by
// the TMA (the 192-row tiles have no room for it: B_q > B_k). For a positive scale. Run 23c
// (bench/results/2026-12-03-h200-run23c, medians of 20, two rounds): at d = 64, S = 1k, by
// the TMA 0.231 ms against 0.230 from the registers: level, so not taken.
template <typename Element>
struct FwdVariant<Element, 128, 12> {
  using Traits = FwdTraitsFoldScale<Element, 128, 2, 3, true, 128, true, false>;
};
// 15: d = 64's short tiles with the next tile's first step under the last one's tail with a
// causal mask too (FwdShortConfig::NoMaskTraits where the short tiles run; a positive scale).
template <typename Element>
struct FwdVariant<Element, 64, 15> {
  using Traits = typename FwdShortConfig<Element>::NoMaskTraits;
};
// 20: the marked rows' other place (FwdTraitsRowsAfter): in the kernel for the 192-row tiles
// (the default before run 34c), by a kernel of their own after the short tiles.
// Run 34c (same medians): S = 1k (B 32) causal 0.2247-0.2265 -> 0.2263-0.2276 with the second
// kernel (its launch), without the mask 0.3509-0.3531 -> 0.3493-0.3522: so not taken there.
template <typename Element>
struct FwdVariant<Element, 64, 20> {
  using Traits = FwdTraitsFoldScale<Element, 64, 3, 3, true, 112, true>;
};
template <typename Element>
struct FwdVariant<Element, 64, 12> {
  using Traits = FwdTraitsFoldScale<Element, 64, 2, 3, true, 128, true, true>;
};
// 5: without ping-pong (FwdTraits::kPingPong false: each consumer issues its products as soon
// as it has them), causal: d = 64's short tiles (with their narrow steps and hand-over) and
// d = 128's. Ping-pong keeps the two consumers half a step apart, which at a tile's start and
// end (walks of 1 to 8 key tiles at S = 1k) makes each wait for the other's turn.
template <typename Element>
struct FwdVariant<Element, 64, 5> {
  using Traits = FwdTraitsNarrowSteps<
      FwdTraitsHandTile<FwdTraitsFoldScale<Element, 64, 2, 3, false, 128, true>>>;
};
template <typename Element>
struct FwdVariant<Element, 128, 5> {
  using Traits = FwdTraitsFoldScale<Element, 128, 2, 3, false, 128, true, true>;
};
// 8-11, on the configured kernels (bf16, causal, a positive scale; launch.cuh wraps them, at
// d = 128 its Base, without the deferred rescale): 8 the softmax's row max by a tree
// (FwdTraitsTreeMax; the same bits); 9 with it one in 4 of each row's pairs of exponentials
// starting on the FMA pipe (FwdTraitsPolyExp: an eighth of them); 10 the other choice of the
// deferred rescale (FwdTraitsLazyRescale: with it at d = 64, without it at d = 128), 11 the
// deferral in one pass (FwdTraitsLazyRescaleOnePass; run 37c's 11, the deferral with the tree,
// measured as 10 and was replaced, not timed yet). Run 37b (bench/
// results/2026-12-05-h200-run37b, H200, medians of 30, two rounds alternating, ms, the default
// -> 8 / 9): d = 64 S = 1k (B 32) 0.2143, 0.2141 -> 0.2142, 0.2146 / 0.2202, 0.2201; S = 2k
// (B 16) 0.3691, 0.3682 -> 0.3728, 0.3742 / 0.3953, 0.3948; the leaderboard 1.0160, 1.0135 ->
// 1.0264, 1.0262 / 1.1045, 1.1041; d = 128 S = 1k 0.2970, 0.2974 -> 0.2932, 0.2946 / 0.3046,
// 0.3035. A quarter and half of the exponentials on the FMA pipe were slower still (S = 1k
// 0.2350 and 0.2596; deleted): the consumers are short of issue slots, not of the
// special-function unit (docs/perf-notes.md, run 37b).
template <typename Traits, int kVariant>
struct FwdStepVariant;
template <typename Traits>
struct FwdStepVariant<Traits, 8> {
  using type = FwdTraitsTreeMax<Traits>;
};
template <typename Traits>
struct FwdStepVariant<Traits, 9> {
  using type = FwdTraitsPolyExp<FwdTraitsTreeMax<Traits>, 4>;
};
template <typename Traits>
struct FwdStepVariant<Traits, 10> {
  using type = FwdTraitsLazyRescale<Traits>;
};
template <typename Traits>
struct FwdStepVariant<Traits, 11> {
  using type = FwdTraitsLazyRescaleOnePass<Traits>;
};
// 23: the configured kernels (d = 128's with its deferred rescale) with each step's wgmma
// descriptors advanced from its first (FwdTraitsDescAdvance; the same bits). Written after run
// 37d, not yet timed.
template <typename Traits>
struct FwdStepVariant<Traits, 23> {
  using type = FwdTraitsDescAdvance<Traits>;
};
// 24: the configured kernels with the consumer's index provably warp-uniform
// (FwdTraitsUniformConsumer; the same bits); 25: with their descriptors advanced too; 26: 25
// with the deferral in one pass (d = 64 only: FwdTraitsLazyRescaleOnePass; at d = 128, 25).
// Not taken: run 38a (bench/results/2026-12-05-h100-run38a, H100, medians of 30, two rounds,
// ms, default -> 24 / 25 / 26) measured d = 64 S = 1k (B 32) 0.2278, 0.2265 -> 0.2264, 0.2256 /
// 0.2257, 0.2255 / 0.2268, 0.2272; 2k (B 16) 0.3671, 0.3669 -> 0.3703, 0.3695 / 0.3709, 0.3700 /
// 0.3742, 0.3716; the leaderboard 1.0066, 1.0147 -> 1.0116, 1.0176 / 0.9972, 0.9995 / 1.0051,
// 1.0028; d = 128 S = 1k 0.3128, 0.3105 -> 0.3156, 0.3127 / 0.3132, 0.3110, the leaderboard
// minima 1.569, 1.571 -> 1.582, 1.585 / 1.580, 1.580: the 14-51 uniform-datapath instructions a
// step they remove were not what bounded it (docs/perf-notes.md, run 38a).
template <typename Traits>
struct FwdStepVariant<Traits, 24> {
  using type = FwdTraitsUniformConsumer<Traits>;
};
template <typename Traits>
struct FwdStepVariant<Traits, 25> {
  using type = FwdTraitsDescAdvance<FwdTraitsUniformConsumer<Traits>>;
};
template <typename Traits>
struct FwdStepVariant<Traits, 26> {
  using type = typename FwdStepVariant<
      std::conditional_t<Traits::kLazyRescale, Traits, FwdTraitsLazyRescaleOnePass<Traits>>,
      25>::type;
};
// 30: the configured kernels with L2's eviction priorities (FwdTraitsL2Hints: K and V by
// evict_last, Q by evict_first, O stored streaming; the same bits). Written after run 39c, whose
// d = 64 forward at S = 1k read 80 MB more from DRAM than cuDNN's. Not taken: run 40a
// (bench/results/2026-12-06-h100-run40a, H100, medians of 30, two rounds, ms, default -> 30)
// measured d = 64 S = 1k (B 32) 0.2260, 0.2247 -> 0.2309, 0.2316; d = 128 S = 1k 0.3132, 0.3108
// -> 0.3068, 0.3083; d = 64 S = 2k (B 16) 0.3507, 0.3532 -> 0.3618, 0.3606; the leaderboard
// 1.0100, 1.0134 -> 1.0168, 1.0155; DRAM reads at d = 64 S = 1k 282 -> 255 MB, where one L2
// partition's section budget (the default since) took them to 202.
template <typename Traits>
struct FwdStepVariant<Traits, 30> {
  using type = FwdTraitsL2Hints<Traits>;
};
// 31: the configured kernels with the producer suspending between its tries for a free stage
// (FwdTraitsProducerSuspends; the same bits). Not taken: run 41a (bench/results/2026-12-06-h100-
// run41a, H100, medians of 30, two rounds, ms, default -> 31) measured d = 64 S = 1k (B 32)
// 0.2119, 0.2104 -> 0.2113, 0.2108; 2k (B 16) 0.3473, 0.3487 -> 0.3476, 0.3491; d = 128 S = 1k
// 0.2928, 0.2927 -> 0.2928, 0.2925.
template <typename Traits>
struct FwdStepVariant<Traits, 31> {
  using type = FwdTraitsProducerSuspends<Traits>;
};
// 32: the configured kernels with the consumers' ping-pong turns taken around the softmax's
// exponentials rather than the products' issue (FwdTraitsExpTurns; the same bits), as cuDNN's d
// = 64 forward takes them (run 41c). Written after run 41e, not yet run on a GPU.
template <typename Traits>
struct FwdStepVariant<Traits, 32> {
  using type = FwdTraitsExpTurns<Traits>;
};
// 33: the configured kernels with each step's wait for its own P~ V held after its softmax
// (FwdTraitsPinPvWait; the same bits): ptxas put that wait before the first exponential in every
// default kernel, so the softmax never ran under the product. 34: the same with the full steps'
// P~ in two register arrays in turn (FwdTraitsTwoPBuffers), so that the packs need not wait for
// the product either (C7511 on d = 64's 192-row tiles). Not taken: run 46c (bench/results/
// 2026-12-06-h100-run46c, H100, medians of 30, two rounds, ms, default -> 33 / 34) measured d = 64
// S = 1k (B 32) 0.2116, 0.2110 -> 0.2158, 0.2155 / 0.2144, 0.2139; 2k (B 16) 0.3468, 0.3483 ->
// 0.3478, 0.3484 / 0.3417, 0.3416; the leaderboard 1.0170, 1.0178 -> 1.0554, 1.0507; d = 128 S =
// 1k 0.2952, 0.2954 -> 0.2930, 0.2936 / 0.2950, 0.2949; the leaderboard (minima) 1.5815 -> 1.5611
// / 1.5595. The same bits (450 problems). d = 128's 1% waits for the suites on it.
template <typename Traits>
struct FwdStepVariant<Traits, 33> {
  using type = FwdTraitsPinPvWait<Traits>;
};
template <typename Traits>
struct FwdStepVariant<Traits, 34> {
  using type = FwdTraitsTwoPBuffers<FwdTraitsPinPvWait<Traits>>;
};
// d = 128: two consumers (three leave each 160 registers, less than S, O and P~ need), three
// stages (230,488 bytes of the 232,448 a block may have), ping-pong, pipelined, on a persistent
// grid. Run 9: 1.995 ms on the leaderboard (cuDNN 1.938), without ping-pong 2.385; run 11: the
// persistent grid 1.971-1.986 against 1.992-2.006 for a block per tile, and 0.429-0.430
// against 0.468 at S = 1k (FlashAttention-3's grid). Run 17 (bench/results/2026-12-02-h200-
// run17a and b, medians of 20, sectioned order): three stages against two (fwd90=6), S = 1k
// (B 32) 0.340 against 0.362 ms, 2k 0.542 against 0.577, 4k 0.974 against 1.053, 8k
// 1.945-1.946 against 2.188-2.214, the leaderboard 1.735-1.737 against 1.948-1.959, S = 32k
// 7.912 against 8.500: the next tile's keys load under the last products and the epilogue,
// and within a tile one more load is in flight.
// O stored by the TMA out of the last stage's K tile (kStoreOByTma; the unfolded kernel, for a
// scale <= 0, keeps the stores from the registers). Run 23b measured a tile's cost beyond its
// key tiles at 6,301 cycles, 2.4 key tiles' worth; run 23c (bench/results/2026-12-03-h200-
// run23c, `flashref bench`, medians of 20, two rounds, against the stores from the registers,
// fwd90=12): S = 1k (B 32) 0.296-0.297 ms against 0.334-0.335, 2k 0.480 against 0.524, 4k
// 0.876 against 0.922, 8k 1.651-1.652 against 1.698-1.699; the leaderboard 1.604 against 1.625
// (minima 1.602 against 1.623), without the mask minima 3.123 against 3.157, S = 32k minima
// 6.307 against 6.369 (their medians fell with the clock halfway through the repetitions).
template <typename Element>
//
// The rescale deferred until a row's max grows by more than 2^8 (FwdTraitsLazyRescale: the
// step skips O's 64 multiplies a thread and alpha's exponentials). Run 37c (bench/results/
// 2026-12-05-h100-run37c, H100, medians of 30, two rounds alternating, ms, without -> with;
// fwd90=10 times the other choice): S = 1k (B 32) 0.3170, 0.3161 -> 0.3116, 0.3158; the
// leaderboard 1.6480, 1.6496 -> 1.5921, 1.5858 (minima 1.6012, 1.5994 -> 1.5804, 1.5805). Not at
// d = 64, where it was slower (S = 1k 0.2296, 0.2265 -> 0.2323, 0.2317; 2k +1.6%; the
// leaderboard level): its softmax is the step's critical path, and the deferral takes both
// rows' max before either row's exponentials (docs/perf-notes.md, run 37c).
//
// Each step's wait for its own P~ V held after its softmax (FwdTraitsPinPvWait; the same bits):
// ptxas put that wait before the step's first exponential, so the softmax never ran under the
// product (docs/perf-notes.md, run 46a). Run 46c (bench/results/2026-12-06-h100-run46c, H100,
// medians of 30, two rounds, ms, without -> with): S = 1k (B 32) 0.2952, 0.2954 -> 0.2930,
// 0.2936; the leaderboard in minima 1.5815 -> 1.5611. Run 47b (bench/results/2026-12-07-h100-
// run47b, the same rounds): S = 1k 0.2937, 0.2928 -> 0.2908, 0.2904; the leaderboard 1.6341,
// 1.6801 -> 1.5585, 1.5599 (minima 1.5751, 1.5728 -> 1.5545, 1.5554); S = 16k (B 2) in minima
// 3.1536, 3.1487 -> 3.1063, 3.1104 (medians within the calls' spread, +0.3% and +0.8%); without
// the mask, minima 3.0571, 3.0572 -> 3.0158, 3.0154. fwd90=33 runs the other choice (Deferred,
// unpinned).
struct FwdConfig<Element, 128> {
  using Base = FwdTraitsFoldScale<Element, 128, 2, 3, true, 128, true, true>;
  using Deferred = FwdTraitsLazyRescale<Base>;
  using Traits = FwdTraitsPinPvWait<Deferred>;
  using Unfolded = FwdTraits<Element, 128, 2, 3, true, 128, true>;
};

// d = 256 (d in 129..256; its backward is the mma.sync kernels', launch.cuh): two consumers of
// 64 rows over key tiles of 64, two stages, persistent, O written from the registers (its tile
// does not fit a K tile), the rescale deferred. What
// fits: O's accumulator is 128 registers a thread (64 x 256 over a warpgroup), S's 32 at B_k =
// 64; shared memory Q 64 KiB and K and V 32 KiB each a stage: 192 KiB at two stages (three would
// take 256). FlashAttention-3 takes 128 x 80 at d = 256, with the same two consumers. Run 48b
// (bench/results/2026-12-07-h100-run48b, H100, medians of 30, two rounds, causal S = 8k B 1 H 16,
// ms, the mma.sync forward -> this one): 2.6679, 2.6679 -> 1.7488, 1.7603 (206 -> 313 TFLOP/s).
// Run 49a (bench/results/2026-12-07-h100-run49a, the same rounds): S = 2k B 8 1.4918, 1.4922 ->
// 0.6367, 0.6378 (184 -> 431 TFLOP/s); S = 8k 2.693, 2.713 -> 1.747, 1.765.
template <typename Element>
struct FwdConfig<Element, 256> {
  using Base = FwdTraitsFoldScale<Element, 256, 2, 2, true, 64, true>;
  using Traits = FwdTraitsLazyRescale<Base>;
  using Unfolded = FwdTraits<Element, 256, 2, 2, true, 64, true>;
};

// 27: d = 128 with O's stores issued by a warp of the producer's warpgroup (FwdTraitsStoreWarp);
// 29: with narrow steps too (FwdTraitsNarrowSteps), which the consumers' elected store had
// kept off the uniform datapath at d = 128 (run 36; fwd.cuh). Not taken: run 38c (bench/
// results/2026-12-05-h100-run38c, H100, medians of 30, two rounds alternating, ms, default ->
// 27 / 29) measured S = 1k (B 32) 0.3184, 0.3133 -> 0.3204, 0.3201 / 0.3123, 0.3131; 2k 0.4831,
// 0.4839 -> 0.4998, 0.5010 / 0.4834, 0.4839; 4k 0.8705, 0.8725 -> 0.9097, 0.9094 / 0.8801,
// 0.8791; the leaderboard 1.5783, 1.5771 -> 1.6639, 1.6589 / 1.6111, 1.6104: the store warp
// cost 1-5%, growing with S; the narrow steps on it gained 2.5-3.3%. With its wait sleeping
// (mbar_wait_sleeping) run 39a (bench/results/2026-12-06-h200-run39a, H200) measured the same:
// S = 1k 0.2969, 0.2969 -> 0.3053, 0.3056 / 0.2963, 0.2960; the leaderboard 1.5842, 1.6350
// (minima 1.5793, 1.5756) -> 1.6614, 1.6624 / 1.6151, 1.6220. So the waiting warp's issue slots
// were not the cost, and 29 gains nothing over the default.
template <typename Element>
struct FwdVariant<Element, 128, 27> {
  using Traits = FwdTraitsStoreWarp<typename FwdConfig<Element, 128>::Deferred>;
};
template <typename Element>
struct FwdVariant<Element, 128, 29> {
  using Traits = FwdTraitsNarrowSteps<typename FwdVariant<Element, 128, 27>::Traits>;
};

// The backward's two passes (dQ; dK and dV): three stages in both, and at d = 64 the dQ pass
// with B_k = 128 (it has the registers: S and dP 64 + 64, dQ 32, dS 32). Runs 10e and 10f
// (bench/results/2026-12-01-h200-run10/variants-*.txt), leaderboard backward at d = 64, medians
// of 20 per round: run 10's two stages and B_k = 64, 4.29-4.32 ms; B_k = 128, 3.85-4.05; three
// stages, 3.98-4.02; both (kept), 3.83-4.05. At d = 128 every choice is within the spread
// (7.02-7.22). FlashAttention-3's grid at S = 1k (d = 64): 0.955 ms, 0.900, 0.920, 0.905.
//
// The fused backward (dQ added from the dK/dV pass, kernels/sm90/bwd_dkdv.cuh), each head's
// query tiles walked down. At d = 64, 128 queries per step with dQ made by rows
// (BwdFusedRowsTraits), three stages (the ordered kernel two since run 28a, below). Run 14b,
// leaderboard backward, medians of 20, two rounds, same call: ordered 3.399-3.409 ms and
// atomic 3.118-3.166 against 4.257-4.287 and 4.067-4.087 for run 13's 64-query kernels with
// partials (deleted), and 3.910-3.933 for the two passes. At d = 128, 64 queries per step with dQ
// made by columns (BwdFusedColsTraits), three stages (one 32 KB dQ tile leaves room for them: 216
// KB; the ordered kernel, since run 28a, two stages and two dQ tiles, 215 KB). Run 15a,
// leaderboard: ordered 5.528-5.596, atomic 5.404-5.578, against 6.453-6.537 for the two passes (run
// 14c: run 14's 64-query kernel with partials and two stages, atomic, 6.684; that kernel and a
// two-stage one by columns were deleted untimed in run 15, their set of run 15a cut off by the
// call's limit). Which strategy runs is dispatch.cu's dq_strategy, with its measured reasons.
template <typename Element, int kD>
struct BwdConfig;
//
// Both on a persistent grid (a block per multiprocessor taking key tiles from a counter,
// bwd_dkdv.cuh's kPersistent). Run 26b (bench/results/2026-12-03-h200-run26b, `flashref
// bench` backward, medians of 20, two rounds, against run 25's build, whose fused kernels ran
// a block per key tile): S = 1k (B 32) d = 128 1.173 ms against 1.195 (atomic 1.087 against
// 1.111), d = 64 0.668 against 0.696; S = 2k d = 128 1.704 against 1.738; S = 4k d = 128 2.810
// against 2.889-2.914, d = 64 1.731 against 1.748; the leaderboard d = 128 5.171-5.188 against
// 5.167-5.233, d = 64 2.921-2.962 against 3.011; the same bits (run 26a: this build's grid of a
// block per key tile, fused90=1, level with run 25's or slower).
// Until run 30a, d = 64 without a causal mask ran its in-step kernels on a grid of a block per
// key tile (OtherOrdered, OtherAtomic), 2.5-3.8% faster there than the persistent grid (runs
// 27a-b: the leaderboard without the mask, backward, 5.886-6.056 ms against 6.118-6.227); the
// deferred kernels below are persistent, and faster than both (5.35-5.40 ms, runs 29d-e).
// FLASHREF_CUDA_TUNE fused90=1 (tuning builds) runs the same tiles on a grid of a block per
// key tile (OtherOrdered, OtherAtomic) everywhere. Run 27a-b also timed, and deleted, two sets
// of dQ tiles (with two stages to make room), two sets of dS (one named barrier a step, not
// two), two stages alone, and dK, dV staged over dS and dQ so that the next K_j, V_j load under
// the epilogue: each level with this one within the rounds' spread (docs/perf-notes.md).
// The in-step ordered kernel (InStepOrdered) keeps two sets of dQ tiles, each with a writer of
// its own, and two stages to make room: its writer's step is a chain of memory round trips
// (poll, add, wait, release) that one thread ran one step at a time (run 27d). Run 28a
// (bench/results/2026-12-03-h200-run28a, `flashref bench` backward, causal, medians of 30,
// three rounds in rotating order, same call): S = 1k (B 32) d = 128 1.094-1.096 ms against
// 1.158-1.160 for one writer and three stages (atomic 1.083-1.085), d = 64 0.652-0.655 against
// 0.664; S = 2k d = 128 1.658-1.679 against 1.696-1.725; S = 4k d = 128 2.846-3.002 against
// 2.836-2.940; the leaderboard d = 128 5.203-5.205 against 5.217-5.257, d = 64 2.982-3.036
// against 3.062-3.079; Nsight Compute at free clocks (S = 1k d = 128): 1.502M cycles against
// 1.631M, the atomic kernel's 1.491M; the same bits on 120 outputs.
// The atomic kernel keeps one writer and three stages: run 28b (bench/results/2026-12-03-h200-
// run28b, medians of 20, two rounds) timed it with two writers and two dQ sets at 1.090-1.091
// ms against 1.083-1.084 at S = 1k d = 128, and 5.024-5.104 against 5.004-5.046 on the
// leaderboard d = 128: level or slower, its adds have no chain to overlap. Nor did two writers
// move d = 64's no-mask backward (the leaderboard without the mask): on the grid of a block per
// key tile 6.008 / 6.108 ms, persistent 6.040 / 6.058, against the default's 6.002 / 6.105.
// Both variants were deleted.
// dQ's product is deferred a step, the consumers taking turns (kDqDeferred). At d = 128, run
// 29a (bench/results/2026-12-04-h200-run29a, medians of 30, two rounds in rotating order, ms;
// in step -> deferred): the leaderboard 5.200-5.214 -> 4.986-5.027 (atomic 5.046-5.092 ->
// 5.007-5.009), S = 4k (B 8) 2.924-2.947 -> 2.710-2.896, S = 1k 1.087-1.095 -> 1.083-1.089
// (atomic level: 1.083-1.086 -> 1.090-1.093). Deferred without the turns: 5.028-5.068 on the
// leaderboard, deleted. At d = 64 the deferred kernel has room for one dQ set only (a second dS
// set is 32 KB there). Atomic, one writer, faster everywhere (runs 29c-d: the leaderboard
// 3.032 -> 2.607, S = 1k 0.655 -> 0.622, 4k 1.633 -> 1.409, without the mask 5.952 -> 5.352).
// Ordered, one writer: its chain of round trips held it back (the leaderboard 3.007-3.054 ->
// 2.904-2.951 but S = 1k 0.649 -> 0.668; it ran on long walks alone, run 29b-c, now deleted);
// with two writers sharing the one set (kDqWriters, BwdFusedRowsDeferredSharedTraits), run 29e
// (bench/results/2026-12-04-h200-run29e; the default then -> two writers): the leaderboard
// 2.906-2.948 -> 2.535-2.579, S = 1k 0.652 -> 0.627, 2k 0.982 -> 0.918, 4k 1.657 -> 1.569,
// without the mask 5.820 -> 5.396, the same bits; run 30a passed the suites on it. The same
// at d = 128 with the second set's room given to a third stage (run 30a, medians of 30, two
// rounds, ms, default / two writers): the leaderboard 5.046 / 5.108, 5.057 / 5.039; S = 1k
// 1.094 / 1.113, 1.098 / 1.114; S = 4k 2.756 / 2.844, 2.834 / 2.891: level or slower, deleted.
// On short walks the ordered kernel stores dK and dV by the TMA (BwdTraitsStoreDkvByTma), so
// that a persistent block's next K_j and V_j load under the stores: fused_bwd_store_by_tma
// below.
// The ordered kernels store their first dQ add (BwdTraitsDqFirstStore, bwd_dkdv.cuh), so that
// the preprocess need not zero the accumulator. Run 35a (bench/results/2026-12-05-h100-run35a,
// H100, `flashref bench` backward, causal, ms, zeroed -> stored): S = 1k (B 32) d = 128 1.228
// -> 1.094, d = 64 0.710 -> 0.637; 2k d = 128 1.756 -> 1.634; 16k (B 1) d = 128 5.196 -> 4.920;
// the same bits on 450 problems (scripts/cuda-bits against b806fb9).
// fused90=2 runs the in-step kernels (InStepOrdered, InStepAtomic) persistent, fused90=1 on a
// grid of a block per key tile (OtherOrdered, OtherAtomic), fused90=3 the kernels with dK and
// dV stored by the TMA at every S (TmaOrdered, TmaAtomic), fused90=4 the staged epilogue at
// every S. Deleted after timing (runs 43a and 44a, causal backward, medians of 20, two rounds,
// ms, variant -> default; commits dd8a7ca and fc2c4ef hold them): dQ written inside the
// ordered kernel, for the query tiles whose last add its block makes, by the producer's idle
// warp (BwdTraitsDqFinish: d = 128 S = 1k 2.525 -> 1.049, 2k 2.658 -> 1.616, the leaderboard
// level) or by the consumers a key tile late (BwdTraitsDqFinishLate: d = 128 S = 1k 1.105 ->
// 1.048, 2k 1.665 -> 1.619, the leaderboard 5.036 -> 4.997; d = 64 S = 1k 0.657 -> 0.621).
// Both had the same bits and passed the sanitizers; the postprocess is cheaper.
template <typename Element>
struct BwdConfig<Element, 64> {
  using Dq = BwdDqTraits<Element, 64, 3, 128>;
  using Dkv = BwdDkvTraits<Element, 64, 3>;
  // dQ deferred, two stages (room for the second dS set): ordered with two writers on one dQ
  // set (run 29e, run 30a) storing their first add (run 35a), atomic with one writer (run
  // 29c-d).
  using FusedOrdered =
      BwdTraitsDqFirstStore<BwdFusedRowsDeferredSharedTraits<Element, 64, 2, kDqOrdered>>;
  using FusedAtomic = BwdFusedRowsDeferredTraits<Element, 64, 2, kDqAtomic, 1>;
  // dQ in step (fused90=2): run 28's kernels.
  using InStepOrdered = BwdFusedRowsBufferedTraits<Element, 64, 2, kDqOrdered, 2>;
  using InStepAtomic = BwdFusedRowsTraits<Element, 64, 3, kDqAtomic, true>;
  // A block per key tile, dQ in step (fused90=1).
  using OtherOrdered = BwdFusedRowsTraits<Element, 64, 3, kDqOrdered>;
  using OtherAtomic = BwdFusedRowsTraits<Element, 64, 3, kDqAtomic>;
  // dK and dV stored by the TMA (short walks; fused90=3 everywhere).
  using TmaOrdered = BwdTraitsStoreDkvByTma<FusedOrdered>;
  using TmaAtomic = BwdTraitsStoreDkvByTma<FusedAtomic>;
};
template <typename Element>
struct BwdConfig<Element, 128> {
  using Dq = BwdDqTraits<Element, 128, 3, 64>;
  using Dkv = BwdDkvTraits<Element, 128, 3>;
  using FusedOrdered = BwdTraitsDqFirstStore<BwdFusedColsDeferredTraits<Element, 2, kDqOrdered, 2>>;
  using FusedAtomic = BwdFusedColsDeferredTraits<Element, 3, kDqAtomic, 1>;
  // dQ in step (fused90=2): run 28's kernels.
  using InStepOrdered = BwdFusedColsBufferedTraits<Element, 2, kDqOrdered, 2>;
  using InStepAtomic = BwdFusedColsTraits<Element, 3, kDqAtomic, true>;
  using OtherOrdered = BwdFusedColsTraits<Element, 3, kDqOrdered>;
  using OtherAtomic = BwdFusedColsTraits<Element, 3, kDqAtomic>;
  // (The atomic kernel, three stages, with the TMA's epilogue: ptxas serialized its wgmmas for
  // want of registers, C7512; it keeps the staged one.)
  using TmaOrdered = BwdTraitsStoreDkvByTma<FusedOrdered>;
  using TmaAtomic = FusedAtomic;
};

// Whether the fused backward's ordered kernel stores dK and dV by the TMA: where a key tile's
// walk averages 1,024 queries or fewer (causal S_q <= 2k, S_q <= 1k without the mask; times the
// GQA group, whose heads a walk takes in turn), and so its epilogue is a large share. Run 31b
// (bench/results/2026-12-04-h200-run31b, `flashref bench` backward, causal, medians of 30, two
// or three rounds in rotating order, ms, staged -> by the TMA): d = 128 S = 1k (B 32) 1.088,
// 1.089, 1.088 -> 1.063, 1.067, 1.066; S = 2k (B 16) 1.708, 1.688, 1.623 -> 1.634, 1.609, 1.578;
// S = 4k (B 8) 2.831, 2.926 -> 2.881, 2.908; the leaderboard 5.061, 5.085 -> 5.166, 5.237;
// d = 64 S = 1k 0.627, 0.625, 0.626 -> 0.609, 0.609, 0.610, the leaderboard 2.652, 2.790 ->
// 2.719, 2.575 (minima 2.543, 2.566 -> 2.488, 2.550). The same bits.
constexpr bool fused_bwd_store_by_tma(long long walk_queries) {
  return walk_queries <= 1024;
}

}  // namespace flashref::cuda::kernels::sm90

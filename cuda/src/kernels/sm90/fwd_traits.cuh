// The sm90 forward's traits (kernels/sm90/fwd.cuh): FwdTraits, the tiles, stages, roles and
// epilogue of one forward kernel, and the wrappers that each turn on one of its options (the
// folded scale, the hand-over, narrow steps, the deferred rescale, ...). configs.hpp picks
// among them, with each choice's measurement.
#pragma once

#include "kernels/sm90/hopper.cuh"

namespace flashref::cuda::kernels::sm90 {

template <typename Element_, int kD_, int kConsumers_, int kStages_, bool kPingPong_,
          int kBlockN_ = 128, bool kPersistent_ = false, bool kStoreOByTma_ = false>
struct FwdTraits {
  using Element = Element_;
  static constexpr int kD = kD_;                  // compiled head dim (d <= kD; TMA zero-fills)
  static constexpr int kConsumers = kConsumers_;  // warpgroups of 64 query rows
  static constexpr int kStages = kStages_;        // K/V stages in shared memory
  static constexpr bool kPingPong = kPingPong_;
  // A grid of one block per multiprocessor, each looping over query tiles (the next tile's Q
  // and K/V load under the current one's last product and epilogue), or one block per tile.
  static constexpr bool kPersistent = kPersistent_;
  // The softmax scales each score before the row max (FwdTraitsFoldScale: after).
  static constexpr bool kFoldScale = false;
  static constexpr int kBlockM = 64 * kConsumers;  // B_q
  static constexpr int kBlockN = kBlockN_;         // B_k: 128, or 96 / 112 (smaller S, P~)
  // The epilogue: O staged in the K tile of the tile's last stage (stmatrix, swizzled) and
  // written by the TMA, the stage released once the TMA has read it, under the next tile's
  // first product; or (false) O written from the registers, 4 bytes a thread and 8 rows a warp
  // instruction. Needs O's tile to fit in K's (B_q <= B_k) and O's tensor map (launch.cuh).
  static constexpr bool kStoreOByTma = kStoreOByTma_;
  // With kStoreOByTma: whether a warp of the producer's warpgroup issues O's stores and frees
  // the stage (FwdTraitsStoreWarp), or each consumer's first thread does.
  static constexpr bool kStoreWarp = false;
  static constexpr int kThreads = 128 * (1 + kConsumers);
  static constexpr int kColBlocks = kD / kBlockCols;
  static constexpr int kQBytes = kBlockM * kD * 2, kKVBytes = kBlockN * kD * 2;
  // Q's buffers, and whether the producer hands each tile's coordinates to the consumers
  // (FwdTraitsHandTile).
  static constexpr int kQBuffers = 1;
  static constexpr bool kHandTile = false;
  // Whether a tile's first step runs under the last one's tail (FwdTraitsTileOverlap).
  static constexpr bool kTileOverlap = false;
  // With kFoldScale: whether the rows marked past the fold's range are computed again by this
  // kernel after its last tile, or by a kernel of their own launched after it
  // (FwdTraitsRowsAfter; fwd_rows_unfolded.cuh).
  static constexpr bool kRowsInKernel = true;
  // Whether a consumer whose rows see at most the first kNarrowN keys of a key tile computes
  // S and P~ V over those alone (FwdTraitsNarrowSteps).
  static constexpr bool kNarrowSteps = false;
  static constexpr int kNarrowN = 64;
  // The softmax's row max by a tree of pairs rather than a chain (FwdTraitsTreeMax), and one in
  // kPolyExpEvery of each row's exponentials on the FMA pipe (FwdTraitsPolyExp; 0: none).
  static constexpr bool kTreeMax = false;
  static constexpr int kPolyExpEvery = 0;
  // Whether a step keeps the running max, and leaves O unscaled, unless a row's grows by more
  // than kLazyRescaleLog2 (FwdTraitsLazyRescale).
  static constexpr bool kLazyRescale = false;
  // Its vote per half of a thread's rows (FwdTraitsLazyRescaleOnePass).
  static constexpr bool kLazyOnePass = false;
  // Each wgmma k-step's descriptor advanced from the step's first (FwdTraitsDescAdvance).
  static constexpr bool kDescAdvance = false;
  // The consumer's index broadcast from lane 0, so that ptxas knows it is warp-uniform
  // (FwdTraitsUniformConsumer).
  static constexpr bool kUniformConsumer = false;
  // L2 eviction priorities (FwdTraitsL2Hints): K and V, which the head's other query tiles read
  // again, kept over Q and O, which pass through once.
  static constexpr bool kL2Hints = false;
  // The producer's waits for a free stage or Q buffer suspend it longer between tries
  // (FwdTraitsProducerSuspends).
  static constexpr bool kProducerSuspends = false;
  // With kPingPong: whether the consumers take their turns around the softmax's exponentials
  // rather than around the issue of their products (FwdTraitsExpTurns).
  static constexpr bool kExpTurns = false;
  // Whether the full steps' P~ alternates between two register arrays (FwdTraitsTwoPBuffers).
  static constexpr bool kTwoPBuffers = false;
  // Whether each step's wait for its P~_{j-1} V_{j-1} comes after its softmax (FwdTraitsPinPvWait).
  static constexpr bool kPinPvWait = false;
  static constexpr int kTileBytes = kQBytes + 2 * kStages * kKVBytes;
  // The tiles, 1024 bytes to align them for the swizzle, and the mbarriers (Q; K, V and empty
  // per stage; Q empty).
  static constexpr int kSmemBytes = kTileBytes + kSwizzleAtom + 8 * (2 + 3 * kStages);
  // Registers per thread after setmaxnreg (multiples of 8 that fill the 64K): the producer
  // keeps few, the consumers take the rest.
  static constexpr int kProducerRegs = kConsumers == 2 ? 40 : 24;
  static constexpr int kConsumerRegs = kConsumers == 2 ? 232 : 160;
  static_assert(setmaxnreg_fits(kProducerRegs, kConsumerRegs, kConsumers),
                "setmaxnreg: the consumers' registers come from those the producer gives back");
  static_assert(kD % kBlockCols == 0, "the sm90 forward is compiled for d = 64, 128 and 256");
  static_assert(kConsumers == 2 || kConsumers == 3, "two or three consumer warpgroups");
  static_assert(kBlockN % 16 == 0 && kBlockN <= 128, "B_k: a multiple of 16, at most 128");
  static_assert(kSmemBytes <= 227 * 1024, "a block's shared memory: 227 KiB on sm_90");
  static_assert(!kStoreOByTma || kBlockM <= kBlockN, "O is staged in a K tile");
};

// The softmax takes the row max of the raw scores and folds the scale into the exponent's
// argument (one FFMA, s scale log2(e) - m, instead of a multiply and a subtract per score). For
// a positive scale only (the max of scale x s is scale x the max of s): the launcher runs the
// unfolded kernel otherwise. A name of its own keeps the unfolded kernels' symbols what
// scripts/sass-compare knows. (Run 14a chose between the two per row at run time, which made
// the forward 12-14% slower at d = 64: both paths and a select per score.)
template <typename Element, int kD, int kConsumers, int kStages, bool kPingPong, int kBlockN,
          bool kPersistent, bool kStoreOByTma = false>
struct FwdTraitsFoldScale
    : FwdTraits<Element, kD, kConsumers, kStages, kPingPong, kBlockN, kPersistent, kStoreOByTma> {
  static constexpr bool kFoldScale = true;
};

// The producer decodes each tile (its batch, head, first row and key tiles: integer divisions
// that the consumers otherwise run between two tiles, both at once, with the tensor pipe idle)
// and hands them to the consumers in shared memory with Q, under Q's barrier; and with two Q
// buffers it loads the next tile's Q a tile ahead, as soon as it has issued this tile's K and V
// loads, rather than after the consumers' last S (d = 64's short tiles, run 30c: configs.hpp).
template <typename Base>
struct FwdTraitsHandTile : Base {
  static constexpr int kQBuffers = 2;
  static constexpr bool kHandTile = true;
  static constexpr int kTileBytes = kQBuffers * Base::kQBytes + 2 * Base::kStages * Base::kKVBytes;
  // The tiles, the alignment, the mbarriers (Q and Q empty per buffer; K, V and empty per
  // stage), and four words of a tile's coordinates per Q buffer.
  static constexpr int kSmemBytes =
      kTileBytes + kSwizzleAtom + 8 * (2 * kQBuffers + 3 * Base::kStages) + 16 * kQBuffers;
  static_assert(kSmemBytes <= 227 * 1024, "shared memory past the H100/H200 block limit");
};

// With Q a tile ahead, a consumer reads the next tile's coordinates before its last P~ V and
// issues the next tile's first S = Q K^T with it, in one turn, so that the first step's product
// and softmax run under this tile's last product and epilogue, where both consumers otherwise
// reach the tile's start at once and leave the tensor pipe idle. The same products in the same
// order: the same bits. It pays without the mask (every tile walks every key tile) and costs
// with the causal mask, where tiles walk 1 to 8 key tiles, for a reason not yet found (not the
// next tile's loads: configs.hpp, FwdShortConfig, runs 31a, 31b and 31f).
template <typename Base>
struct FwdTraitsTileOverlap : Base {
  static constexpr bool kTileOverlap = true;
  static_assert(Base::kHandTile && !Base::kStoreOByTma,
                "the overlap needs the next tile's coordinates and O written from registers");
};

// A consumer whose 64 rows see at most the first 64 keys of a key tile (the upper rows of a tile
// on the causal diagonal, or the last keys) computes S = Q K^T over those 64 columns (wgmma
// m64n64, half the product), its softmax over them, and P~ V over their 4 k-steps: the columns
// left out are masked, P~ = 0 there, so O, m and l are the same numbers (the sums add the same
// terms in the same order, less the zeros). Such key tiles are the first ones a tile walks (the
// keys a consumer sees past n0 only grow as n0 falls), so a tile's narrow steps are a prefix of
// its walk; each step's width is a compile-time constant (a product issued under a run-time
// condition makes ptxas serialize the wgmma).
template <typename Base>
struct FwdTraitsNarrowSteps : Base {
  static constexpr bool kNarrowSteps = true;
  static_assert(Base::kBlockN > Base::kNarrowN, "a narrow step is narrower than the key tile");
};

// The row max of online_softmax by a tree of pairs: log2(B_k / 4) dependent FMNMX instead of
// B_k / 4, ahead of the row's first exponential. fmaxf is exact and takes no order (NaN is
// dropped by either order; a 0's sign changes nothing downstream), so m is the same number and
// the results the same bits.
template <typename Base>
struct FwdTraitsTreeMax : Base {
  static constexpr bool kTreeMax = true;
};

// The loads and stores tell L2 what to keep: K and V by evict_last (every query tile of the head
// that sees a key tile reads it, spread over the section's rounds), Q by evict_first (one tile
// reads it once) and O stored by st.global.cs (streamed: evict-first). The sections of the tile
// order counted only K and V against three quarters of the whole L2 then (launch.cuh,
// query_tile_bytes), while Q and O stream through the same L2 as much again; run 39c read 80 MB
// more from DRAM than cuDNN's forward at S = 1k, d = 64 (the least possible being 270). The same
// bits. Run 40a: 2-3% slower; the excess was the budget (one L2 partition's since).
template <typename Base>
struct FwdTraitsL2Hints : Base {
  static constexpr bool kL2Hints = true;
};

// The producer waits for a free stage (and a free Q buffer) with a suspend-time hint on each try
// (hopper.cuh's mbar_wait_suspending, 10 us), so that its retries leave the issue slots of its
// scheduler to the two consumer warps that share it. Run 40a's source counters put 6.3 M of the
// d = 64 forward's 93.9 M warp instructions at S = 1k in mbarrier retry loops (cuDNN's 0.4 M of
// 88.6 M). The same bits. Run 41a: level at d = 64 S = 1k and 2k and d = 128 S = 1k, not taken.
template <typename Base>
struct FwdTraitsProducerSuspends : Base {
  static constexpr bool kProducerSuspends = true;
};

// The consumers take their ping-pong turns around a step's exponentials (both rows' max, the
// turn, the exponentials and the sums, then the next consumer's turn; ptxas places the max
// before the turn in the main loop, fwd_softmax.cuh's ExpTurn) and issue their products as soon
// as they have them. cuDNN's d = 64 forward does this (run 41c's reading of its source
// counters): its two consumers' bursts of 64 MUFU.EX2 never meet on a sub-partition's
// special-function unit, where ours do (its MIO queue full for 1,375 warp samples at S = 1k,
// cuDNN's 427). The same bits: the same operations on the same values.
template <typename Base>
struct FwdTraitsExpTurns : Base {
  static_assert(Base::kPingPong && Base::kFoldScale && !Base::kLazyOnePass);
  static constexpr bool kExpTurns = true;
};

// A step's wait for its P~_{j-1} V_{j-1} (WARPGROUP.DEPBAR.LE gsb0, 0x0) held after its
// softmax. In every default forward's SASS (2026-12-06) ptxas put that wait before the step's
// first exponential, although the source has it after the softmax: the softmax ran after its own
// P~ V had landed, not under it, and FlashAttention-3's intra-warpgroup overlap was not there
// (ptxas moves register-only work across the wait freely; the wait stays after a named barrier,
// as in fwd90=32's SASS). So each consumer marks its sums made by arriving at a barrier of its
// own warpgroup (128 threads, arrive only: nobody waits), whose id goes through the sums' bits
// (hopper.cuh's named_bar_arrive_after), and waits for the product after it. The same
// operations on the same values: the same bits. Run 46c: 2-3.5% slower at d = 64 (the other
// consumer's products fill the tensor pipe during the early wait, and the late one puts the
// packs and O's rescale on the path to the next issue), about 1% faster at d = 128.
template <typename Base>
struct FwdTraitsPinPvWait : Base {
  static constexpr bool kPinPvWait = true;
};

// The full steps' P~ in two register arrays, in turn (the main loop unrolled by two), so that a
// step packs its P~ into registers other than those its P~_{j-1} V_{j-1} reads while it runs:
// with one array the packs must follow the wait for that product. Alone it moves nothing (ptxas
// still hoists the wait: FwdTraitsPinPvWait); with the pin, the packs may run among the
// exponentials. The same bits. 32 more registers a consumer thread (B_k = 128).
template <typename Base>
struct FwdTraitsTwoPBuffers : Base {
  static constexpr bool kTwoPBuffers = true;
  static_assert(!Base::kTileOverlap, "the overlap's carried P~ is a second array already");
};

// One in kEvery of each row's exponentials (every kEvery-th pair of columns, its first) computed
// on the FMA pipe by exp2_fma, so that the special-function unit, which takes 8 cycles a warp
// instruction and at d = 64 is as busy as the tensor cores, does not set the softmax's pace
// alone (FlashAttention-4's trick, on Blackwell). exp2_fma's error is that of ex2.approx
// (docs/verification.md), so the judge's bounds hold; the bits differ.
template <typename Base, int kEvery>
struct FwdTraitsPolyExp : Base {
  static constexpr int kPolyExpEvery = kEvery;
  static_assert(kEvery >= 1, "one exponential in kEvery");
};

// A step keeps its rows' running max m, and skips O's rescale (kD / 2 multiplies a thread) and
// alpha's two exponentials, unless a row of the warp sees its max grow by more than
// kLazyRescaleLog2 (2^8 = 256 in P~): P~ = 2^(s - m) is then at most 256 rather than 1, which
// float32's sums and the 16-bit P~ (the same relative rounding at any size) take as they are,
// and O / l and L = m + log2 l are the same numbers (FlashAttention-4's conditional rescale). The
// warp decides by a vote, so the skip is a branch the whole warp takes. With random scores a
// row's max grows by that much almost only at its first key tile. The bits differ.
template <typename Base>
struct FwdTraitsLazyRescale : Base {
  static constexpr bool kLazyRescale = true;
};
inline constexpr float kLazyRescaleLog2 = 8.0f;

// The deferred rescale decided per half of the thread's rows (online_softmax's kLazyOnePass), in
// the plain softmax's one pass, for d = 64, where online_softmax_lazy's two phases cost more
// than the skipped multiplies saved (run 37c).
template <typename Base>
struct FwdTraitsLazyRescaleOnePass : Base {
  static constexpr bool kLazyRescale = true;
  static constexpr bool kLazyOnePass = true;
};

// A step's descriptors (4 of Q and K for S at d = 64, 8 of V for P~ V) built once from the
// stage's tile and advanced by one add each (smem_desc_advance), where make_smem_desc packs
// each from its address in four uniform instructions: 85 of the d = 64 short tiles' 476
// instructions a step are uniform-datapath ones, mostly that packing, and the consumers are
// short of issue slots (run 37b). The same descriptors, so the same bits. (Run 20c measured the
// forward so 1-5% slower, when Q's descriptor was rebuilt in the loop from a consumer index
// in the vector datapath; here Q's cost what the default's do.)
template <typename Base>
struct FwdTraitsDescAdvance : Base {
  static constexpr bool kDescAdvance = true;
};

// The consumer's index c taken from lane 0 by a shuffle, which ptxas knows gives every lane the
// same value: c = threadIdx.x / 128 - 1 is the same for a warp too, but ptxas cannot prove it,
// so Q's descriptors (the tile's address plus c's 64 rows) live in vector registers and each of
// a step's S k-steps moves them to the uniform ones (8 R2UR and 4 moves a step at d = 64, 14 of
// the short tiles' 476 instructions; CUTLASS's canonical_warp_group_idx does the same). The
// same products, so the same bits.
template <typename Base>
struct FwdTraitsUniformConsumer : Base {
  static constexpr bool kUniformConsumer = true;
};

// O's tensor stores issued by a warp of the producer's warpgroup: the consumers stage O in the
// last stage's K tile as before and arrive on that stage's "O staged" barrier; the store warp
// walks the block's tiles as the producer does, waits for each tile's O, stores it, and frees
// the stage once the TMA has read it. The consumers then run no code of one elected thread:
// with it, d = 128's narrow steps took the consumers' main loop off the uniform datapath (every
// descriptor moved by R2UR, the mbarrier waits in BSSY; the store instruction alone did it:
// without it the loop kept 16 R2UR and no BSSY). The same stores of the same numbers: the same
// bits.
template <typename Base>
struct FwdTraitsStoreWarp : Base {
  static constexpr bool kStoreWarp = true;
  // An "O staged" mbarrier per stage, and one the store warp completes after its last store.
  static constexpr int kSmemBytes = Base::kSmemBytes + 8 * (Base::kStages + 1);
  static_assert(Base::kStoreOByTma, "the store warp issues the TMA's stores of O");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory past the H100/H200 block limit");
};

// The rows marked past the fold's range computed again by a kernel of their own
// (fwd_rows_unfolded_kernel), launched after the forward, which then holds no code for them
// but the marker's select: d = 64's 192-row tiles, where that code in the kernel cost 1.5-2.3%
// (configs.hpp, run 34c); the short tiles keep it, a second launch costing them more.
template <typename Base>
struct FwdTraitsRowsAfter : Base {
  static constexpr bool kRowsInKernel = false;
  static_assert(Base::kFoldScale, "only the folded forward marks rows");
};

}  // namespace flashref::cuda::kernels::sm90

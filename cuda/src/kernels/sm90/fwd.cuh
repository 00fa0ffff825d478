// Forward pass on Hopper (sm_90a): Algorithm 1 on wgmma, with the tiles brought by the TMA and
// the block split by role (FlashAttention-3's structure).
//
// Grid: one block per (query tile, head, batch), longest query tiles first within sections of
// heads that share L2 (QueryTileSchedule's sectioned order), or with kPersistent one block per
// multiprocessor that loops over query tiles (tile_of_round). Warpgroup 0 is the producer: after
// lending its registers (setmaxnreg), one thread loads Q_i (once the consumers have released the
// previous tile's) and then, for each key tile j and stage s (the block's running count of K/V
// loads mod kStages), waits for s to be empty and loads K_j and V_j into it, each completing on its
// own "full" mbarrier. Warpgroups 1..kConsumers are the consumers, each owning 64 query rows; they
// wait on "full" and arrive on "empty", and release Q once the tile's last S has landed. With
// kHandTile (FwdTraitsHandTile) Q has two buffers, taken in turn, and the producer hands each
// tile's coordinates to the consumers with it, so that they start a tile without decoding it.
//
// A consumer, per key tile j (walked from the last to the first, so the masked tiles come
// first), with the products pipelined so that the softmax runs under a product:
//   S_j = Q_i K_j^T                  wgmma m64n{B_k}k16, Q and K from shared memory (line 9)
//   O += P~_{j-1} V_{j-1}            wgmma m64n{d}k16, P~ from registers, V MN-major (line 13)
//   wait for S_j; m, P~_j, l          lines 10-12 in the log2 domain, under the P~ V product
//   wait for P~ V; O *= 2^(m_{j-1} - m_j); release the stage of j-1
// and the last P~ V after the loop; then O / l and L (lines 15-16): L from the registers, O
// from the registers or (kStoreOByTma) staged in the last stage's K tile and stored by the TMA.
// The key tiles that cross the diagonal or the end of the keys (the first ones walked) run in a
// loop of their own; the full tiles' loop has no index compares.
// With kPingPong the consumers take turns issuing their pair of products (named barriers), so
// one warpgroup's softmax runs while another's products do. With kNarrowSteps a consumer whose
// rows see at most 64 keys of a key tile takes a narrow step (FwdTraitsNarrowSteps).
#pragma once

#include <cuda.h>

#include <type_traits>

#include "kernels/common/args.hpp"
#include "kernels/common/epilogue.cuh"
#include "kernels/common/ptx.cuh"
#include "kernels/common/schedule.cuh"
#include "kernels/common/tile_io.cuh"
#include "kernels/sm90/fwd_rows_unfolded.cuh"
#include "kernels/sm90/hopper.cuh"
#include "kernels/sm90/stage_rows.cuh"
#include "kernels/sm90/wgmma.cuh"

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
  static_assert(kD % kBlockCols == 0, "the sm90 forward is compiled for d = 64 and 128");
  static_assert(kConsumers == 2 || kConsumers == 3, "two or three consumer warpgroups");
  static_assert(kBlockN % 16 == 0 && kBlockN <= 128, "B_k: a multiple of 16, at most 128");
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
// order count only K and V against three quarters of L2 (launch.cuh, query_tile_bytes), while Q
// and O stream through the same L2 as much again; run 39c read 80 MB more from DRAM than cuDNN's
// forward at S = 1k, d = 64 (the least possible being 270). The same bits.
template <typename Base>
struct FwdTraitsL2Hints : Base {
  static constexpr bool kL2Hints = true;
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

// 2^x for x <= 0 (a score less its row's max; -inf for a masked one) on the FMA pipe, as
// accurate as ex2.approx.ftz: x = j + f with j = rint(x) and f in [-1/2, 1/2] (the add and
// subtract of 1.5 x 2^23 round x to an integer, which the sum keeps in its low mantissa bits),
// 2^f by a degree-5 polynomial (coefficients fitted for relative error on [-1/2, 1/2]: at most
// 2.14e-7 = 2^-22.16 in float32's Horner, measured on every 7th float in [-125.5, 0],
// docs/verification.md), and
// 2^j added to its exponent. Below -125.5 (2^x < 2^-125, where j would reach the exponent's
// floor) the result is 0, as the flush to zero makes ex2.approx.ftz's below 2^-126; -inf gives 0,
// NaN stays NaN.
__device__ __forceinline__ float exp2_fma(float x) {
  const float shifted = __fadd_rn(x, 12582912.0f);  // 1.5 x 2^23 + j, j in the low bits
  const float f = __fsub_rn(x, __fsub_rn(shifted, 12582912.0f));
  float p = 1.32764562e-3f;
  p = fmaf(p, f, 9.67554096e-3f);
  p = fmaf(p, f, 5.55071346e-2f);
  p = fmaf(p, f, 2.40221202e-1f);
  p = fmaf(p, f, 6.93146944e-1f);
  p = fmaf(p, f, 1.00000012f);
  // (1.5 x 2^23 + j) << 23 = j << 23 modulo 2^32: 2^j into p's exponent.
  const float y = __int_as_float(__float_as_int(p) + (__float_as_int(shifted) << 23));
  return x < -125.5f ? 0.0f : y;
}

// Which of a thread's scores in a row are visible, as bits: its k-th score (k = 2 i + e) is
// column 8 i + e past the thread's first, visible iff 8 i + e < `room` (the row's limit less that
// first column). Those k are a prefix, of length 2 floor(room / 8) + min(room mod 8, 2), so the
// row's mask is one shift, and each score's test a bit of it, which ptxas reads seven at a time
// into predicates (R2P) where a compare per score (ISETP, and an add for its column) stood.
__device__ __forceinline__ uint32_t visible_score_bits(int room) {
  const int r = max(room, 0);
  const int visible = (r >> 3) * 2 + min(r & 7, 2);
  return __funnelshift_lc(0xffffffffu, 0u, visible);  // the low `visible` bits; 32 from 32 on
}

// Line 10's max of half hf of a thread's rows (rows r and r + 8) over a 64 x kBlockN score tile,
// the scores first taken to the log2 domain (unfolded) and masked (-inf past S_k and above the
// diagonal, kMasked): the new running max from m_old, over the quad's four threads. With kFold
// (a positive scale) the max is taken over the raw scores and scaled once:
// fl(c x max s) = max fl(c x s) for c > 0, so m is the same number. kTreeMax: a tree of pairs.
template <int kBlockN, bool kFold, bool kMasked, bool kTreeMax>
__device__ __forceinline__ float half_row_max(float (&acc_s)[kBlockN / 2], int hf, float m_old,
                                              int limit, int n0, int t, float scale_log2) {
  static_assert(kBlockN / 4 <= 32, "a row half's scores fit one word of visible_score_bits");
  float m = kFold ? -INFINITY : m_old;
  [[maybe_unused]] float pair_max[kBlockN / 8];  // kTreeMax: each pair's max, then the tree's
  [[maybe_unused]] uint32_t visible = 0;
  if constexpr (kMasked) visible = visible_score_bits(limit - n0 - 2 * t);
#pragma unroll
  for (int i = 0; i < kBlockN / 8; ++i)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      float& s = acc_s[4 * i + 2 * hf + e];
      if constexpr (!kFold) s *= scale_log2;
      if (kMasked && (visible & (1u << (2 * i + e))) == 0) s = -INFINITY;
      if constexpr (kTreeMax)
        pair_max[i] = e == 0 ? s : fmaxf(pair_max[i], s);
      else
        m = fmaxf(m, s);
    }
  if constexpr (kTreeMax) {
#pragma unroll
    for (int stride = 1; stride < kBlockN / 8; stride *= 2)
#pragma unroll
      for (int i = 0; i + stride < kBlockN / 8; i += 2 * stride)
        pair_max[i] = fmaxf(pair_max[i], pair_max[i + stride]);
    m = fmaxf(m, pair_max[0]);
  }
  m = fmaxf(m, __shfl_xor_sync(0xffffffff, m, 1));
  m = fmaxf(m, __shfl_xor_sync(0xffffffff, m, 2));
  return kFold ? fmaxf(m_old, m * scale_log2) : m;
}

// Line 11's P~ = 2^(s - m) of half hf in place, against m_base (the running max, or 0 for a
// row that has seen no key), and their sum. Folded, each score enters the exponent through one
// FFMA (P~ differs from the unfolded one by its single rounding). kPolyExpEvery: one pair in
// that many starts on the FMA pipe (exp2_fma).
template <int kBlockN, bool kFold, int kPolyExpEvery>
__device__ __forceinline__ float half_row_exp_sum(float (&acc_s)[kBlockN / 2], int hf, float m_base,
                                                  float scale_log2) {
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < kBlockN / 8; ++i)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      float& s = acc_s[4 * i + 2 * hf + e];
      const float x = kFold ? fmaf(s, scale_log2, -m_base) : s - m_base;
      constexpr int kEvery = kPolyExpEvery > 0 ? kPolyExpEvery : 1;
      s = kPolyExpEvery > 0 && e == 0 && i % kEvery == kEvery - 1 ? exp2_fma(x) : fast_exp2(x);
      sum += s;
    }
  return sum;
}

// The exponent's base for a row's max m: a row that has seen no visible key yet keeps
// m = -inf, and its P~ and alpha are 0, not NaN. Folded, a max past float32 (scores above
// 2.36e38, docs/verification.md) would zero every P~ through fma(s, c, -inf) and pass for a row
// that sees no key: NaN instead, as unfolded.
template <bool kFold>
__device__ __forceinline__ float exp_base(float m) {
  return m == -INFINITY ? 0.0f : (kFold && m == INFINITY ? NAN : m);
}

// Lines 10-12 of Alg. 1 on a consumer's 64 x kBlockN score tile, in place: the running max m,
// P~ = 2^(s - m), the running sum l; alpha = 2^(m_old - m) per row for the rescale of O.
// kMasked: the tile crosses the diagonal or the end of the keys, so each score's index is
// compared; a full tile compiles without them.
// kLazyOnePass (FwdTraitsLazyRescaleOnePass): each row keeps its running max unless a row of the
// warp in the same half grows by more than kLazyRescaleLog2, by a vote per half, so that row 1's
// max still runs under row 0's exponentials (online_softmax_lazy votes once, after both rows'
// max). Returns whether either half rescaled (always true without kLazyOnePass).
template <int kBlockN, bool kFold, bool kMasked, bool kTreeMax = false, int kPolyExpEvery = 0,
          bool kLazyOnePass = false>
__device__ __forceinline__ bool online_softmax(float (&acc_s)[kBlockN / 2], float (&row_m)[2],
                                               float (&row_l)[2], float (&alpha)[2],
                                               const int (&limit)[2], int n0, int t,
                                               float scale_log2) {
  [[maybe_unused]] bool rescaled = false;
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    float m = half_row_max<kBlockN, kFold, kMasked, kTreeMax>(acc_s, hf, row_m[hf], limit[hf], n0,
                                                              t, scale_log2);
    if constexpr (kLazyOnePass) {
      // Kept, m is row_m: alpha = 2^0 = 1 and l + sum, the same as a skipped rescale.
      const bool grows = __any_sync(0xffffffff, m > row_m[hf] + kLazyRescaleLog2) != 0;
      if (!grows) m = row_m[hf];
      rescaled = rescaled || grows;
    }
    const float m_base = exp_base<kFold>(m);
    alpha[hf] = fast_exp2(row_m[hf] - m_base);
    row_m[hf] = m;
    const float sum =
        half_row_exp_sum<kBlockN, kFold, kPolyExpEvery>(acc_s, hf, m_base, scale_log2);
    row_l[hf] = alpha[hf] * row_l[hf] + sum;
  }
  return !kLazyOnePass || rescaled;
}

// online_softmax for FwdTraitsLazyRescale: both rows' new max first, then the warp's vote, then
// P~ and l against the max kept (alpha = 1) or the new one. Returns whether the warp rescaled.
template <int kBlockN, bool kFold, bool kMasked, bool kTreeMax>
__device__ __forceinline__ bool online_softmax_lazy(float (&acc_s)[kBlockN / 2], float (&row_m)[2],
                                                    float (&row_l)[2], float (&alpha)[2],
                                                    const int (&limit)[2], int n0, int t,
                                                    float scale_log2) {
  float m_new[2];
#pragma unroll
  for (int hf = 0; hf < 2; ++hf)
    m_new[hf] = half_row_max<kBlockN, kFold, kMasked, kTreeMax>(acc_s, hf, row_m[hf], limit[hf], n0,
                                                                t, scale_log2);
  // (-inf + 8 is -inf: a row's first visible key always rescales; +inf and NaN scores take the
  // path below as they would without the deferral.)
  const bool grows =
      m_new[0] > row_m[0] + kLazyRescaleLog2 || m_new[1] > row_m[1] + kLazyRescaleLog2;
  const bool rescale = __any_sync(0xffffffff, grows) != 0;
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    const float m = rescale ? m_new[hf] : row_m[hf];
    const float m_base = exp_base<kFold>(m);
    alpha[hf] = rescale ? fast_exp2(row_m[hf] - m_base) : 1.0f;
    row_m[hf] = m;
    const float sum = half_row_exp_sum<kBlockN, kFold, 0>(acc_s, hf, m_base, scale_log2);
    row_l[hf] = rescale ? alpha[hf] * row_l[hf] + sum : row_l[hf] + sum;
  }
  return rescale;
}

// A step's lines 10-12 on kN columns as traits T ask: the deferred rescale's two phases
// (FwdTraitsLazyRescale), or online_softmax with T's options. Returns whether the step rescaled.
template <typename T, int kN, bool kMasked>
__device__ __forceinline__ bool step_softmax(float (&acc_s)[kN / 2], float (&row_m)[2],
                                             float (&row_l)[2], float (&alpha)[2],
                                             const int (&limit)[2], int n0, int t,
                                             float scale_log2) {
  if constexpr (T::kLazyRescale && !T::kLazyOnePass)
    return online_softmax_lazy<kN, T::kFoldScale, kMasked, T::kTreeMax>(acc_s, row_m, row_l, alpha,
                                                                        limit, n0, t, scale_log2);
  else
    return online_softmax<kN, T::kFoldScale, kMasked, T::kTreeMax, T::kPolyExpEvery,
                          T::kLazyOnePass>(acc_s, row_m, row_l, alpha, limit, n0, t, scale_log2);
}

template <typename T>
__global__ void __launch_bounds__(T::kThreads, 1)
    fwd_wgmma_kernel(const __grid_constant__ CUtensorMap tmap_q,
                     const __grid_constant__ CUtensorMap tmap_k,
                     const __grid_constant__ CUtensorMap tmap_v,
                     const __grid_constant__ CUtensorMap tmap_o, const AttnArgs args) {
  using Element = typename T::Element;
  constexpr int kD = T::kD, kBlockM = T::kBlockM, kBlockN = T::kBlockN, kStages = T::kStages;
  using Schedule = QueryTileSchedule<kBlockM, kBlockN>;
  extern __shared__ unsigned char smem_raw[];
  const uint32_t base = (smem_addr(smem_raw) + kSwizzleAtom - 1) & ~uint32_t(kSwizzleAtom - 1);
  // Q buffer qb (kQBuffers: one, or two in turn by the count of Q loads).
  auto sQ = [&](int qb) { return base + qb * T::kQBytes; };
  auto sK = [&](int st) { return base + T::kQBuffers * T::kQBytes + st * 2 * T::kKVBytes; };
  auto sV = [&](int st) { return sK(st) + T::kKVBytes; };
  const uint32_t bar_q0 = base + T::kTileBytes;
  auto bar_q = [&](int qb) { return qb == 0 ? bar_q0 : bar_q0 + 8 * (2 + 3 * kStages); };
  auto bar_k = [&](int st) { return bar_q0 + 8 * (1 + st); };
  auto bar_v = [&](int st) { return bar_q0 + 8 * (1 + kStages + st); };
  auto bar_empty = [&](int st) { return bar_q0 + 8 * (1 + 2 * kStages + st); };
  auto bar_q_empty = [&](int qb) { return bar_q0 + 8 * (1 + 3 * kStages) + (qb == 0 ? 0 : 16); };
  // kHandTile: tile coordinates (batch, head, first row, key tiles) for Q buffer qb.
  auto tile_words = [&](int qb) { return bar_q0 + 8 * (2 * T::kQBuffers + 3 * kStages) + 16 * qb; };
  // kStoreWarp: stage st's "O staged" barrier, and the store warp's "all stored".
  const uint32_t bar_o0 =
      bar_q0 + 8 * (2 * T::kQBuffers + 3 * kStages) + (T::kHandTile ? 16 * T::kQBuffers : 0);
  auto bar_o = [&](int st) { return bar_o0 + 8 * st; };
  const uint32_t bar_o_done = bar_o0 + 8 * kStages;

  // The block's query tiles: blockIdx.x, then (a persistent grid, smaller than the tile count)
  // one per round of gridDim.x, every other round walked backwards. The tiles are numbered
  // longest first within sections of heads (Schedule), so the snake pairs a
  // block's long tile of one round with a short one of the next and the blocks' totals stay
  // level (the launcher picks sections and grid for it, kernels/common/tile_order.hpp). One
  // block per tile: one round.
  const int m_blocks = ceil_div(args.S_q, kBlockM);
  const int tiles = m_blocks * args.B * args.H;
  auto tile_of_round = [&](int r) {
    const int blocks = static_cast<int>(gridDim.x), x = static_cast<int>(blockIdx.x);
    return r * blocks + ((r & 1) ? blocks - 1 - x : x);
  };
  auto key_tiles_end = [&](const Schedule& tile) {
    const int n_blocks = ceil_div(args.S_k, kBlockN);
    return args.causal ? tile.causal_key_tiles_end(args, n_blocks) : n_blocks;
  };

  const int tid = threadIdx.x, wg = tid / 128;
  if (tid == 0) {
    mbar_init(bar_q(0), 1);
    for (int st = 0; st < kStages; ++st) {
      mbar_init(bar_k(st), 1);
      mbar_init(bar_v(st), 1);
      mbar_init(bar_empty(st), 128 * T::kConsumers);
    }
    mbar_init(bar_q_empty(0), 128 * T::kConsumers);
    if constexpr (T::kStoreWarp) {
      for (int st = 0; st < kStages; ++st) mbar_init(bar_o(st), 128 * T::kConsumers);
      mbar_init(bar_o_done, 1);
    }
    if constexpr (T::kQBuffers == 2) {
      mbar_init(bar_q(1), 1);
      mbar_init(bar_q_empty(1), 128 * T::kConsumers);
    }
    mbar_init_fence();
  }
  __syncthreads();

  if (wg == 0) {  // the producer
    setmaxnreg_dec<T::kProducerRegs>();
    if (tid == 0) {
      int it = 0, q_loads = 0;  // K/V stage uses and Q loads, over the block's tiles
      for (int r = 0;; ++r) {
        const int index = tile_of_round(r);
        if (index >= tiles) break;
        const Schedule tile(args, index, m_blocks);
        const int n_end = key_tiles_end(tile);
        const int qb = q_loads % T::kQBuffers;
        if constexpr (T::kHandTile) {
          // The tile's coordinates, with Q (a tile no row of which sees a key: alone), once
          // the consumers are done with the buffer's last tile.
          mbar_wait(bar_q_empty(qb), ((q_loads / T::kQBuffers) & 1) ^ 1);
          ++q_loads;
          st_shared_s32(tile_words(qb), tile.b);
          st_shared_s32(tile_words(qb) + 4, tile.h);
          st_shared_s32(tile_words(qb) + 8, tile.row0);
          st_shared_s32(tile_words(qb) + 12, n_end);
          if (n_end == 0) {
            mbar_arrive(bar_q(qb));
            continue;
          }
        } else {
          if (n_end == 0) continue;  // the consumers write it; nothing to load
          // Alg. 1 line 5: load Q_i, once the consumers are done with the previous tile's.
          mbar_wait(bar_q_empty(qb), (q_loads & 1) ^ 1);
          ++q_loads;
        }
        mbar_expect_tx(bar_q(qb), T::kQBytes);
#pragma unroll
        for (int cb = 0; cb < T::kColBlocks; ++cb) {
          if constexpr (T::kL2Hints)
            tma_load_4d_hinted(sQ(qb) + cb * (kBlockM * kSwizzleBytes), &tmap_q, bar_q(qb),
                               cb * kBlockCols, tile.row0, tile.h, tile.b, l2_policy_evict_first());
          else
            tma_load_4d(sQ(qb) + cb * (kBlockM * kSwizzleBytes), &tmap_q, bar_q(qb),
                        cb * kBlockCols, tile.row0, tile.h, tile.b);
        }
        // Line 8, for every key tile, into the next free stage.
        for (int n = n_end - 1; n >= 0; --n, ++it) {
          const int st = it % kStages;
          mbar_wait(bar_empty(st), ((it / kStages) & 1) ^ 1);
          auto load_kv = [&](uint32_t dst, const CUtensorMap* tmap, uint32_t bar) {
            mbar_expect_tx(bar, T::kKVBytes);
#pragma unroll
            for (int cb = 0; cb < T::kColBlocks; ++cb) {
              if constexpr (T::kL2Hints)
                tma_load_4d_hinted(dst + cb * (kBlockN * kSwizzleBytes), tmap, bar, cb * kBlockCols,
                                   n * kBlockN, tile.h_kv, tile.b, l2_policy_evict_last());
              else
                tma_load_4d(dst + cb * (kBlockN * kSwizzleBytes), tmap, bar, cb * kBlockCols,
                            n * kBlockN, tile.h_kv, tile.b);
            }
          };
          load_kv(sK(st), &tmap_k, bar_k(st));
          load_kv(sV(st), &tmap_v, bar_v(st));
        }
      }
    } else if (T::kStoreWarp && tid == 32) {  // the store warp (FwdTraitsStoreWarp)
      // Each tile's O sits in the K tile of its last stage, as the consumers count stages.
      int it = 0;
      uint32_t o_phase = 0;  // bit st: the parity of stage st's next "O staged" phase
      for (int r = 0;; ++r) {
        const int index = tile_of_round(r);
        if (index >= tiles) break;
        const Schedule tile(args, index, m_blocks);
        const int n_end = key_tiles_end(tile);
        if (n_end == 0) continue;  // the consumers write it
        it += n_end;
        const int st = (it - 1) % kStages;
        mbar_wait_sleeping(bar_o(st), (o_phase >> st) & 1);
        o_phase ^= 1u << st;
#pragma unroll
        for (int c = 0; c < T::kConsumers; ++c)
#pragma unroll
          for (int cb = 0; cb < T::kColBlocks; ++cb)
            tma_store_4d(&tmap_o,
                         sK(st) + cb * (kBlockM * kSwizzleBytes) + c * (64 * kSwizzleBytes),
                         cb * kBlockCols, tile.row0 + c * 64, tile.h, tile.b);
        bulk_wait_read();
        mbar_arrive_count(bar_empty(st), 128 * T::kConsumers);
      }
      bulk_wait_complete();
      mbar_arrive(bar_o_done);
    }
    return;
  }

  setmaxnreg_inc<T::kConsumerRegs>();
  const int c = T::kUniformConsumer ? __shfl_sync(0xffffffffu, wg - 1, 0) : wg - 1;
  const int lane = tid % 32, g = lane / 4, t = lane % 4;
  const int r_lo = c * 64 + ((tid % 128) / 32) * 16 + g;  // rows r_lo and r_lo + 8 of the tile

  uint32_t q_tile = sQ(0);                                  // the current tile's Q buffer
  static_assert(!(T::kNarrowSteps && T::kTileOverlap), "narrow steps run without the overlap");
  constexpr int kNarrowN = T::kNarrowN;
  using Yes = std::true_type;
  using No = std::false_type;
  // A step's products and P~ over its columns: B_k, or kNarrowN in a narrow step (the first
  // kNarrowN of acc_s, the first kNarrowN / 16 k-steps of P~ V; FwdTraitsNarrowSteps). Arrays
  // come in as auto&: an array parameter whose size depends on T crashes cudafe++ 13.0 in a
  // generic lambda.
  // kDescAdvance (FwdTraitsDescAdvance): each k-step's descriptor from the step's first by
  // smem_desc_advance, one add, where make_smem_desc takes four (the same descriptors).
  auto issue_s = [&](auto& acc_s, int st, auto narrow) {  // S = Q_i K_j^T
    constexpr int kN = decltype(narrow)::value ? kNarrowN : kBlockN;
    [[maybe_unused]] const uint64_t a0 =
        T::kDescAdvance ? make_smem_desc(q_tile + c * (64 * kSwizzleBytes), 16, kSwizzleAtom) : 0;
    [[maybe_unused]] const uint64_t b0 =
        T::kDescAdvance ? make_smem_desc(sK(st), 16, kSwizzleAtom) : 0;
#pragma unroll
    for (int ks = 0; ks < kD / 16; ++ks) {
      const uint32_t blk = ks / 4, k_bytes = (ks % 4) * 32;
      const uint64_t a = T::kDescAdvance
                             ? smem_desc_advance(a0, blk * (kBlockM * kSwizzleBytes) + k_bytes)
                             : make_smem_desc(q_tile + blk * (kBlockM * kSwizzleBytes) +
                                                  c * (64 * kSwizzleBytes) + k_bytes,
                                              16, kSwizzleAtom);
      const uint64_t bk = T::kDescAdvance
                              ? smem_desc_advance(b0, blk * (kBlockN * kSwizzleBytes) + k_bytes)
                              : make_smem_desc(sK(st) + blk * (kBlockN * kSwizzleBytes) + k_bytes,
                                               16, kSwizzleAtom);
      WgmmaSS<Element, kN>::run(*reinterpret_cast<float(*)[kN / 2]>(&acc_s[0]), a, bk,
                                ks > 0 ? 1 : 0);
    }
  };
  float acc_o[kD / 2];
  auto issue_pv = [&](const auto& p, int st, auto narrow) {  // O += P~ V_j
    constexpr int kN = decltype(narrow)::value ? kNarrowN : kBlockN;
    [[maybe_unused]] const uint64_t v0 =
        T::kDescAdvance ? make_smem_desc(sV(st), kBlockN * kSwizzleBytes, kSwizzleAtom) : 0;
#pragma unroll
    for (int kk = 0; kk < kN / 16; ++kk) {
      const uint64_t bv = T::kDescAdvance ? smem_desc_advance(v0, kk * (16 * kSwizzleBytes))
                                          : make_smem_desc(sV(st) + kk * (16 * kSwizzleBytes),
                                                           kBlockN * kSwizzleBytes, kSwizzleAtom);
      WgmmaRS<Element, kD>::run(acc_o, p[kk], bv, 1);
    }
  };
  // P~ rounded to the input type, as the A fragments of the P~ V product.
  auto pack_p = [&](auto& p, const auto& acc_s, auto narrow) {
    constexpr int kN = decltype(narrow)::value ? kNarrowN : kBlockN;
#pragma unroll
    for (int kk = 0; kk < kN / 16; ++kk)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        p[kk][e] = pack_pair<Element>(acc_s[8 * kk + 2 * e], acc_s[8 * kk + 2 * e + 1]);
  };
  // Ping-pong: consumer c issues its products after barrier 1 + c, then lets the next go. The
  // chain runs on across the block's tiles (every consumer takes the same turns), and the
  // last consumer's final signal is taken by consumer 0 after its last tile.
  auto take_turn = [&]() {
    if constexpr (T::kPingPong) named_bar_sync(1 + c, 256);
  };
  auto pass_turn = [&]() {
    if constexpr (T::kPingPong) named_bar_arrive(1 + (c + 1) % T::kConsumers, 256);
  };
  if constexpr (T::kPingPong) {
    if (c == T::kConsumers - 1) named_bar_arrive(1, 256);  // consumer 0 goes first
  }
  // kStoreOByTma: the stage whose K tile holds O on its way out (-1: none), released by the
  // warpgroup's first thread once the TMA has read it.
  int staged_stage = -1;
  const bool elected = tid % 128 == 0;
  auto release_staged_o = [&]() {
    if constexpr (T::kStoreOByTma && !T::kStoreWarp) {
      if (staged_stage >= 0) {
        if (elected) {
          bulk_wait_read();
          mbar_arrive_count(bar_empty(staged_stage), 128);
        }
        staged_stage = -1;
      }
    }
  };

  int it = 0, q_loads = 0;  // as the producer counts them
  // kTileOverlap: the next tile, read under the tail of the one before (its Q buffer and
  // coordinates), and whether its first step has run there (its m, l and P~ then carried over
  // in carried_m, carried_l and carried_p).
  int ahead_qb = 0, ahead_b = 0, ahead_h = 0, ahead_row0 = 0, ahead_n_end = 0;
  bool ahead_read = false, ahead_started = false;
  float carried_m[2], carried_l[2];
  uint32_t carried_p[kBlockN / 16][4];
  // Keys < limit are visible to the thread's two rows of the tile at `row0`.
  auto row_limits = [&](int row0, int(&limit)[2]) {
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const int64_t last = static_cast<int64_t>(row0 + r_lo + hf * 8) + args.causal_offset;
      limit[hf] = args.causal ? static_cast<int>(max64(0, min64(args.S_k, last + 1))) : args.S_k;
    }
  };
  // Only tiles that cross the diagonal or the end of the keys compare indices. Both
  // conditions grow with n0, so walked from the last key tile down the masked tiles come
  // first and the rest run a loop with no index math (Alg. 1's full tiles).
  auto needs_mask_at = [&](int row0, int n0) {
    return n0 + kBlockN > args.S_k ||
           (args.causal && n0 + kBlockN - 1 > static_cast<int64_t>(row0) + args.causal_offset);
  };
  // Whether this consumer's rows of the tile at row0 see kNarrowN keys or fewer past n0 (keys
  // below S_k and, causal, below its last row's limit): a narrow step (FwdTraitsNarrowSteps).
  // It implies needs_mask_at.
  auto narrow_at = [&](int row0, int n0) {
    if constexpr (!T::kNarrowSteps) return false;
    int64_t end = args.S_k;
    if (args.causal)
      end = min64(end, static_cast<int64_t>(row0) + c * 64 + 64 + args.causal_offset);
    // The same for every thread of the warp, and said so by the vote: a branch on a value the
    // compiler cannot prove warp-uniform took the descriptors' arithmetic off the uniform
    // datapath in every step of the kernel (R2UR before each wgmma; run 36a: 12% slower).
    return __all_sync(0xffffffff, end - n0 <= kNarrowN) != 0;
  };
  // Lines 10-12 on a narrow step's kNarrowN columns (the rest are masked: P~ = 0 there).
  // Returns whether the step rescaled (always, but with FwdTraitsLazyRescale).
  auto narrow_softmax = [&](float(&acc_s)[kBlockN / 2], float(&m)[2], float(&l)[2],
                            float(&alpha)[2], const int(&limit)[2], int n) {
    return step_softmax<T, kNarrowN, true>(*reinterpret_cast<float(*)[kNarrowN / 2]>(&acc_s), m, l,
                                           alpha, limit, n * kBlockN, t, args.scale_log2);
  };
  // Lines 10-12 on a tile's first key tile n, from m = -inf and l = 0.
  auto first_softmax = [&](float(&acc_s)[kBlockN / 2], float(&m)[2], float(&l)[2], float(&alpha)[2],
                           const int(&limit)[2], int row0, int n) {
    if (needs_mask_at(row0, n * kBlockN))
      online_softmax<kBlockN, T::kFoldScale, true, T::kTreeMax, T::kPolyExpEvery>(
          acc_s, m, l, alpha, limit, n * kBlockN, t, args.scale_log2);
    else
      online_softmax<kBlockN, T::kFoldScale, false, T::kTreeMax, T::kPolyExpEvery>(
          acc_s, m, l, alpha, limit, n * kBlockN, t, args.scale_log2);
  };
  // Whether this thread marked a row past the fold's range (fwd_rows_unfolded.cuh).
  [[maybe_unused]] bool refold = false;
  for (int r = 0;; ++r) {
    const int index = tile_of_round(r);
    if (index >= tiles) break;
    int qb, b, h, row0, rows_valid, n_end;
    bool started = false;  // kTileOverlap: the first step ran under the last tile's tail
    if (T::kTileOverlap && ahead_read) {
      qb = ahead_qb, b = ahead_b, h = ahead_h, row0 = ahead_row0, n_end = ahead_n_end;
      rows_valid = min(kBlockM, args.S_q - row0);
      started = ahead_started;
      ahead_read = false;
    } else {
      qb = q_loads % T::kQBuffers;
      if constexpr (T::kHandTile) {  // from the producer, with Q
        mbar_wait(bar_q(qb), (q_loads / T::kQBuffers) & 1);
        ++q_loads;
        b = ld_shared_s32(tile_words(qb));
        h = ld_shared_s32(tile_words(qb) + 4);
        row0 = ld_shared_s32(tile_words(qb) + 8);
        n_end = ld_shared_s32(tile_words(qb) + 12);
        rows_valid = min(kBlockM, args.S_q - row0);
      } else {
        const Schedule tile(args, index, m_blocks);
        b = tile.b, h = tile.h, row0 = tile.row0, rows_valid = tile.rows_valid;
        n_end = key_tiles_end(tile);
      }
    }
    q_tile = sQ(qb);
    Element* o_tile = row_ptr<Element>(args.o, b, row0, h);
    float* lse_rows = args.lse + (static_cast<int64_t>(b) * args.H + h) * args.S_q + row0;
    if (n_end == 0) {  // no row of the tile sees a key: O = 0, L = -inf
      write_fully_masked_tile<kBlockM, kD, 128 * T::kConsumers>(o_tile, args.o.row_stride, lse_rows,
                                                                rows_valid, args.d, tid - 128);
      if constexpr (T::kHandTile) mbar_arrive(bar_q_empty(qb));
      continue;
    }

    int limit[2];
    row_limits(row0, limit);
    auto needs_mask = [&](int n0) { return needs_mask_at(row0, n0); };

    float row_m[2] = {-INFINITY, -INFINITY}, row_l[2] = {0.0f, 0.0f}, alpha[2];
    uint32_t p_frag[kBlockN / 16][4];
    if (!T::kTileOverlap || !started) {
      // Alg. 1 line 6: O = 0, l = 0, m = -inf.
#pragma unroll
      for (int i = 0; i < kD / 2; ++i) acc_o[i] = 0.0f;
      if constexpr (!T::kHandTile) {
        mbar_wait(bar_q(qb), q_loads & 1);
        ++q_loads;
      }
    } else {  // m, l and P~ carried from the last tile's tail
#pragma unroll
      for (int i = 0; i < kD / 2; ++i) acc_o[i] = 0.0f;
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) row_m[hf] = carried_m[hf], row_l[hf] = carried_l[hf];
#pragma unroll
      for (int kk = 0; kk < kBlockN / 16; ++kk)
#pragma unroll
        for (int e = 0; e < 4; ++e) p_frag[kk][e] = carried_p[kk][e];
    }
    int n = n_end - 1;
    // Whether the step before (its P~ V still to issue) was narrow.
    bool prev_narrow = false;
    if (!T::kTileOverlap || !started) {
      // The first key tile visited: S, softmax and P~ (no P~ V yet).
      auto first_step = [&](auto narrow) {
        const int st = it % kStages;
        float acc_s[kBlockN / 2];
        mbar_wait(bar_k(st), (it / kStages) & 1);
        take_turn();
        wgmma_fence();
        issue_s(acc_s, st, narrow);
        wgmma_commit();
        pass_turn();
        release_staged_o();  // the last tile's O, under this product
        wgmma_wait<0>();
        fence_registers(acc_s);
        if constexpr (decltype(narrow)::value)
          narrow_softmax(acc_s, row_m, row_l, alpha, limit, n);
        else
          first_softmax(acc_s, row_m, row_l, alpha, limit, row0, n);
        pack_p(p_frag, acc_s, narrow);
      };
      if constexpr (T::kNarrowSteps) {
        prev_narrow = narrow_at(row0, n * kBlockN);
        if (prev_narrow)
          first_step(std::true_type{});
        else
          first_step(std::false_type{});
      } else {  // (written out: the lambda moved a register in the other kernels' SASS)
        const int st = it % kStages;
        float acc_s[kBlockN / 2];
        mbar_wait(bar_k(st), (it / kStages) & 1);
        take_turn();
        wgmma_fence();
        issue_s(acc_s, st, No{});
        wgmma_commit();
        pass_turn();
        release_staged_o();  // the last tile's O, under this product
        wgmma_wait<0>();
        fence_registers(acc_s);
        first_softmax(acc_s, row_m, row_l, alpha, limit, row0, n);
        pack_p(p_frag, acc_s, No{});
      }
    }
    // Key tile n (below the first), after the product of the one before it; `narrow` and
    // `narrow_prev`, the widths of this step and of the one before.
    auto visit = [&](int n, auto masked, auto narrow, auto narrow_prev) {
      const int st = it % kStages, st_prev = (it - 1) % kStages;
      float acc_s[kBlockN / 2];
      mbar_wait(bar_k(st), (it / kStages) & 1);
      mbar_wait(bar_v(st_prev), ((it - 1) / kStages) & 1);
      take_turn();
      wgmma_fence();
      issue_s(acc_s, st, narrow);
      wgmma_commit();
      issue_pv(p_frag, st_prev, narrow_prev);
      wgmma_commit();
      pass_turn();
      wgmma_wait<1>();  // S_j has landed; P~_{j-1} V_{j-1} may still run
      fence_registers(acc_s);
      bool rescaled = true;  // (the warp's vote with FwdTraitsLazyRescale: uniform)
      if constexpr (decltype(narrow)::value)
        rescaled = narrow_softmax(acc_s, row_m, row_l, alpha, limit, n);
      else
        rescaled = step_softmax<T, kBlockN, decltype(masked)::value>(
            acc_s, row_m, row_l, alpha, limit, n * kBlockN, t, args.scale_log2);
      wgmma_wait<0>();
      fence_registers(acc_o);
      mbar_arrive(bar_empty(st_prev));
      // Line 13's first term: O = diag(2^(m_{j-1} - m_j)) O.
      if (!T::kLazyRescale || rescaled) {
#pragma unroll
        for (int i = 0; i < kD / 8; ++i)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc_o[4 * i + e] *= alpha[e / 2];
      }
      pack_p(p_frag, acc_s, narrow);
    };
    // The narrow steps are a prefix of the walk: a narrow step follows a narrow one.
    for (--n, ++it; n >= 0 && needs_mask(n * kBlockN); --n, ++it) {
      if constexpr (T::kNarrowSteps) {
        if (prev_narrow) {
          prev_narrow = narrow_at(row0, n * kBlockN);
          if (prev_narrow)
            visit(n, Yes{}, Yes{}, Yes{});
          else
            visit(n, Yes{}, No{}, Yes{});
          continue;
        }
      }
      visit(n, Yes{}, No{}, No{});
    }
    if constexpr (T::kNarrowSteps) {
      if (prev_narrow && n >= 0) {  // a full tile after a narrow one
        visit(n, No{}, No{}, Yes{});
        --n, ++it;
        prev_narrow = false;
      }
    }
    for (; n >= 0; --n, ++it) visit(n, No{}, No{}, No{});
    // Every S of the tile has landed: the producer may load the next tile's Q under the last
    // P~ V and the epilogue.
    mbar_arrive(bar_q_empty(qb));
    const int st_last = (it - 1) % kStages;
    // kTileOverlap: the next tile's coordinates, and its first S issued with the last P~ V.
    bool next_started = false;
    float acc_s_next[kBlockN / 2];
    if constexpr (T::kTileOverlap) {
      if (tile_of_round(r + 1) < tiles) {
        ahead_qb = q_loads % T::kQBuffers;
        mbar_wait(bar_q(ahead_qb), (q_loads / T::kQBuffers) & 1);
        ++q_loads;
        ahead_b = ld_shared_s32(tile_words(ahead_qb));
        ahead_h = ld_shared_s32(tile_words(ahead_qb) + 4);
        ahead_row0 = ld_shared_s32(tile_words(ahead_qb) + 8);
        ahead_n_end = ld_shared_s32(tile_words(ahead_qb) + 12);
        ahead_read = true;
        next_started = ahead_n_end > 0;
      }
    }
    if (T::kTileOverlap && next_started) {
      const int st = it % kStages;
      int limit_next[2];
      row_limits(ahead_row0, limit_next);
      mbar_wait(bar_k(st), (it / kStages) & 1);
      mbar_wait(bar_v(st_last), ((it - 1) / kStages) & 1);
      take_turn();
      wgmma_fence();
      q_tile = sQ(ahead_qb);
      issue_s(acc_s_next, st, No{});
      wgmma_commit();
      issue_pv(p_frag, st_last, No{});
      wgmma_commit();
      pass_turn();
      wgmma_wait<1>();  // the next tile's first S has landed; the last P~ V may still run
      fence_registers(acc_s_next);
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) carried_m[hf] = -INFINITY, carried_l[hf] = 0.0f;
      first_softmax(acc_s_next, carried_m, carried_l, alpha, limit_next, ahead_row0,
                    ahead_n_end - 1);
      wgmma_wait<0>();
      fence_registers(acc_o);
      mbar_arrive(bar_empty(st_last));
      pack_p(carried_p, acc_s_next, No{});  // p_frag's last reader is done
    } else {                          // the last P~ V
      mbar_wait(bar_v(st_last), ((it - 1) / kStages) & 1);
      if constexpr (T::kNarrowSteps) {
        auto last_pv = [&](auto narrow) {
          wgmma_fence();
          issue_pv(p_frag, st_last, narrow);
          wgmma_commit();
          wgmma_wait<0>();
          fence_registers(acc_o);
        };
        if (prev_narrow)
          last_pv(Yes{});
        else
          last_pv(No{});
      } else {  // (written out, as the first step: the lambda reordered the overlap kernel's SASS)
        wgmma_fence();
        issue_pv(p_frag, st_last, No{});
        wgmma_commit();
        wgmma_wait<0>();
        fence_registers(acc_o);
      }
      if constexpr (!T::kStoreOByTma) mbar_arrive(bar_empty(st_last));
    }

    // Lines 15-16: O = O / l, L = ln 2 (m' + log2 l) (natural log); a row that saw no key gets
    // O = 0 and L = -inf.
    if constexpr (T::kStoreOByTma) {
      float inv[2];
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        float l = row_l[hf];
        l += __shfl_xor_sync(0xffffffff, l, 1);
        l += __shfl_xor_sync(0xffffffff, l, 2);
        inv[hf] = l > 0.0f ? 1.0f / l : 0.0f;
        const int r = r_lo + hf * 8;
        const bool past = T::kFoldScale && past_fold_range(row_m[hf]);
        refold |= past;
        if (t == 0 && r < rows_valid)
          lse_rows[r] = past       ? past_fold_range_marker()
                        : l > 0.0f ? (row_m[hf] + __log2f(l)) * 0.69314718055994531f
                                   : -INFINITY;
      }
      // O into the K tile of the last stage, laid out as the TMA loads tiles (64-column blocks
      // of 128-byte swizzled rows), once every consumer's last S has landed (the tile's "Q
      // empty" phase); then this consumer's 64 rows out by the TMA, which clips the rows past
      // S_q and the columns past d.
      mbar_wait(bar_q_empty(qb), ((q_loads - 1) / T::kQBuffers) & 1);
      const uint32_t sO = sK(st_last);
      stage_rows<Element, kD, kBlockM>(sO, acc_o, inv, c * 64, (tid % 128) / 32, lane);
      fence_proxy_async_shared();
      if constexpr (T::kStoreWarp) {
        mbar_arrive(bar_o(st_last));
      } else {
        named_bar_sync(3 + c, 128);
        if (elected) {
          [[maybe_unused]] uint64_t streamed_policy = 0;
          if constexpr (T::kL2Hints) streamed_policy = l2_policy_evict_first();
#pragma unroll
          for (int cb = 0; cb < T::kColBlocks; ++cb) {
            const uint32_t src = sO + cb * (kBlockM * kSwizzleBytes) + c * (64 * kSwizzleBytes);
            if constexpr (T::kL2Hints)
              tma_store_4d_hinted(&tmap_o, src, cb * kBlockCols, row0 + c * 64, h, b,
                                  streamed_policy);
            else
              tma_store_4d(&tmap_o, src, cb * kBlockCols, row0 + c * 64, h, b);
          }
        }
        staged_stage = st_last;
      }
    } else {  // written from registers
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        float l = row_l[hf];
        l += __shfl_xor_sync(0xffffffff, l, 1);
        l += __shfl_xor_sync(0xffffffff, l, 2);
        const int r = r_lo + hf * 8;
        if (r >= rows_valid) continue;
        const float inv = l > 0.0f ? 1.0f / l : 0.0f;
        Element* o_row = o_tile + static_cast<int64_t>(r) * args.o.row_stride;
#pragma unroll
        for (int i = 0; i < kD / 8; ++i)
          if (8 * i + 2 * t < args.d) {
            const uint32_t pair =
                pack_pair<Element>(acc_o[4 * i + 2 * hf] * inv, acc_o[4 * i + 2 * hf + 1] * inv);
            uint32_t* dst = reinterpret_cast<uint32_t*>(o_row + 8 * i + 2 * t);
            if constexpr (T::kL2Hints)
              __stcs(dst, pair);  // streamed (kL2Hints)
            else
              *dst = pair;
          }
        const bool past = T::kFoldScale && past_fold_range(row_m[hf]);
        refold |= past;
        if (t == 0)
          lse_rows[r] = past       ? past_fold_range_marker()
                        : l > 0.0f ? (row_m[hf] + __log2f(l)) * 0.69314718055994531f
                                   : -INFINITY;
      }
    }
    if constexpr (T::kTileOverlap) ahead_started = next_started;
  }
  if constexpr (T::kStoreOByTma && !T::kStoreWarp) {
    release_staged_o();
    if (elected) bulk_wait_complete();
  }
  if constexpr (T::kFoldScale && T::kRowsInKernel) {
    // Rows marked past the fold's range: walk this warp's tiles again and compute those rows
    // unfolded, over the main loop's O and L (with the TMA, once all of O's stores are done).
    bool any;
    if constexpr (T::kStoreOByTma)
      any = named_bar_sync_any(3 + c, 128, refold) && __any_sync(0xffffffff, refold);
    else
      any = __any_sync(0xffffffff, refold);
    if (any) {
      if constexpr (T::kStoreWarp) mbar_wait(bar_o_done, 0);  // every O stored
      __syncwarp();
      const int warp_row = r_lo - g;  // the warp's 16 rows of a tile
      for (int r = 0;; ++r) {
        const int index = tile_of_round(r);
        if (index >= tiles) break;
        const Schedule tile(args, index, m_blocks);
        const int row = warp_row + lane % 16;
        const float* lse =
            args.lse + (static_cast<int64_t>(tile.b) * args.H + tile.h) * args.S_q + tile.row0;
        const bool marked =
            lane < 16 && row < tile.rows_valid && __float_as_uint(lse[row]) == kPastFoldRange;
        for (uint32_t mask = __ballot_sync(0xffffffff, marked); mask != 0; mask &= mask - 1)
          rewrite_row_unfolded<Element, kD>(args, tile.b, tile.h,
                                            tile.row0 + warp_row + __ffs(mask) - 1, lane);
      }
    }
  }
  if constexpr (T::kPingPong) {
    if (c == 0) named_bar_sync(1, 256);  // the last consumer's final signal
  }
}

}  // namespace flashref::cuda::kernels::sm90

// The sm90 forward's softmax (Alg. 1 lines 10-12 on a consumer's 64 x B_k score tile, in the
// wgmma accumulator's layout: a thread holds rows r and r + 8, columns 8 i + 2 t + e): the row
// max with its causal mask, the exponentials and their sum, the online rescale and its
// deferral, each as the traits of kernels/sm90/fwd_traits.cuh ask.
#pragma once

#include "kernels/common/ptx.cuh"
#include "kernels/sm90/fwd_traits.cuh"
#include "kernels/sm90/hopper.cuh"
#include "kernels/sm90/score_mask.hpp"

namespace flashref::cuda::kernels::sm90 {

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

// Which of a thread's scores in a row are visible, as bits: the low visible_score_count(room)
// (score_mask.hpp: they are a prefix of the thread's scores in its order), so the row's mask is one
// shift, and each score's test a bit of it, which ptxas reads seven at a time into predicates
// (R2P) where a compare per score (ISETP, and an add for its column) stood.
__device__ __forceinline__ uint32_t visible_score_bits(int room) {
  return __funnelshift_lc(0xffffffffu, 0u, visible_score_count(room));  // 32 bits from 32 on
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

// A softmax's turn around its exponentials when the consumers take none there (the default of
// online_softmax_lazy's callers): taking it gives ticket 0, giving it does nothing.
struct NoTurn {
  __device__ __forceinline__ uint32_t take() const { return 0; }
  __device__ __forceinline__ void give(uint32_t) const {}
};
// FwdTraitsExpTurns' turn: a consumer waits on named barrier `mine` and reads the turn's ticket,
// then hands the turn on through barrier `next` once `made` (its sums) is computed. The ticket's
// value does not matter (after_ticket). The wait does not wait for the max: ptxas places it
// before the max in a tile's first step and after it in the main loop; made to wait for the max
// too (its bits in the barrier's id, as give does), the short tiles' wgmma were serialized for
// want of registers (C7511).
struct ExpTurn {
  int mine, next;
  __device__ __forceinline__ uint32_t take() const {
    named_bar_sync(mine, 256);
    return clock_ticket();
  }
  __device__ __forceinline__ void give(uint32_t made) const {
    named_bar_arrive_after(next, 256, made);
  }
};

// x, as a value that ptxas must compute after `ticket` (min(b, b + (ticket >> 31)) = b for
// x's bits b below 2^32 - 1, which it cannot prove). FwdTraitsExpTurns: a turn is a named
// barrier, and ptxas moves register-only work such as the exponentials across one; made from
// the scale that ticket (read after the barrier) passes through, they wait for the turn.
__device__ __forceinline__ float after_ticket(float x, uint32_t ticket) {
  const uint32_t bits = __float_as_uint(x);
  return __uint_as_float(min(bits, bits + (ticket >> 31)));
}

// online_softmax in two phases for FwdTraitsExpTurns (folded): both halves' max, then
// turn.take() (this consumer's turn; it returns the turn's ticket), the exponentials and sums of
// both halves from the scale passed through the ticket, then turn.give(l's bits) (the next
// consumer's turn, once the sums are made). The same operations on the same values as
// online_softmax: the same bits.
template <int kBlockN, bool kMasked, bool kTreeMax, int kPolyExpEvery, typename Turn>
__device__ __forceinline__ bool online_softmax_turns(float (&acc_s)[kBlockN / 2], float (&row_m)[2],
                                                     float (&row_l)[2], float (&alpha)[2],
                                                     const int (&limit)[2], int n0, int t,
                                                     float scale_log2, const Turn& turn) {
  float m[2];
#pragma unroll
  for (int hf = 0; hf < 2; ++hf)
    m[hf] = half_row_max<kBlockN, true, kMasked, kTreeMax>(acc_s, hf, row_m[hf], limit[hf], n0, t,
                                                           scale_log2);
  const float scale_in_turn = after_ticket(scale_log2, turn.take());
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    const float m_base = exp_base<true>(m[hf]);
    alpha[hf] = fast_exp2(row_m[hf] - m_base);
    row_m[hf] = m[hf];
    const float sum =
        half_row_exp_sum<kBlockN, true, kPolyExpEvery>(acc_s, hf, m_base, scale_in_turn);
    row_l[hf] = alpha[hf] * row_l[hf] + sum;
  }
  turn.give(__float_as_uint(row_l[0]) | __float_as_uint(row_l[1]));
  return true;
}

// online_softmax for FwdTraitsLazyRescale: both rows' new max first, then the warp's vote, then
// P~ and l against the max kept (alpha = 1) or the new one (with FwdTraitsExpTurns inside the
// consumer's turn, as online_softmax_turns). Returns whether the warp rescaled.
template <int kBlockN, bool kFold, bool kMasked, bool kTreeMax, typename Turn = NoTurn>
__device__ __forceinline__ bool online_softmax_lazy(float (&acc_s)[kBlockN / 2], float (&row_m)[2],
                                                    float (&row_l)[2], float (&alpha)[2],
                                                    const int (&limit)[2], int n0, int t,
                                                    float scale_log2, const Turn& turn = {}) {
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
  const float scale_in_turn = after_ticket(scale_log2, turn.take());
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    const float m = rescale ? m_new[hf] : row_m[hf];
    const float m_base = exp_base<kFold>(m);
    alpha[hf] = rescale ? fast_exp2(row_m[hf] - m_base) : 1.0f;
    row_m[hf] = m;
    const float sum = half_row_exp_sum<kBlockN, kFold, 0>(acc_s, hf, m_base, scale_in_turn);
    row_l[hf] = rescale ? alpha[hf] * row_l[hf] + sum : row_l[hf] + sum;
  }
  turn.give(__float_as_uint(row_l[0]) | __float_as_uint(row_l[1]));
  return rescale;
}

// A step's lines 10-12 on kN columns as traits T ask: the deferred rescale's two phases
// (FwdTraitsLazyRescale), online_softmax's two phases around the consumer's turn
// (FwdTraitsExpTurns: `turn`), or online_softmax with T's options. Returns whether the step
// rescaled.
template <typename T, int kN, bool kMasked, typename Turn = NoTurn>
__device__ __forceinline__ bool step_softmax(float (&acc_s)[kN / 2], float (&row_m)[2],
                                             float (&row_l)[2], float (&alpha)[2],
                                             const int (&limit)[2], int n0, int t, float scale_log2,
                                             const Turn& turn = {}) {
  if constexpr (T::kLazyRescale && !T::kLazyOnePass)
    return online_softmax_lazy<kN, T::kFoldScale, kMasked, T::kTreeMax>(
        acc_s, row_m, row_l, alpha, limit, n0, t, scale_log2, turn);
  else if constexpr (T::kExpTurns)
    return online_softmax_turns<kN, kMasked, T::kTreeMax, T::kPolyExpEvery>(
        acc_s, row_m, row_l, alpha, limit, n0, t, scale_log2, turn);
  else
    return online_softmax<kN, T::kFoldScale, kMasked, T::kTreeMax, T::kPolyExpEvery,
                          T::kLazyOnePass>(acc_s, row_m, row_l, alpha, limit, n0, t, scale_log2);
}

}  // namespace flashref::cuda::kernels::sm90

// The sm90 16-bit forward's rows past its fold's range, computed again. With a positive scale
// the forward folds the scale into the exponent (FwdTraitsFoldScale, fwd_softmax.cuh's
// online_softmax): P~ = 2^(fma(s, c, -m')), c = scale log2(e), m' = fl(c max s). The row's largest
// score then enters the exponent as c max s - m', m''s rounding error, up to half an ulp of m': a
// factor common to the row's P~, which O's division cancels, while it stays inside float32's range.
// From |m'| = 2^31 on it need not (an ulp of 256): P~ underflows to zero or overflows, and the
// row loses its keys (L = -inf and O = 0, docs/verification.md). No choice of m' avoids it: only
// a second operation per score does, the unfolded s' = fl(c s), then s' - m'.
//
// Inside the main loop that second operation cost the forward 5-13% (run 33a: a branch per warp
// and key tile), for rows that need scores above about 1.5e9; computed again in the epilogue of
// each tile, it cost the tightest kernels 8-44 bytes of spills. So the main loop and its
// epilogue stay as they were but for one select: a row whose final m' is past the range gets
// the marker kPastFoldRange for its L (its final m' is the largest its key tiles were folded
// with, as m' never decreases; and a tile folded at a smaller m' is scaled by 2^(m'_tile - m'),
// zero for any tile past the range when the final m' is not), and the warp remembers that it
// wrote one. After its last tile such a warp walks its tiles again, and each row whose L holds
// the marker gets O and L from Alg. 1 with the unfolded softmax: one warp per row, each lane a
// column, keys one at a time. Slow (milliseconds for a tile's rows against 16k keys), and taken
// only for such inputs. d = 64's 192-row tiles leave that walk to a kernel of their own,
// launched after them (fwd_rows_unfolded_kernel, FwdTraitsRowsAfter): its code in the forward's
// kernel cost them 1.5-2.3% (kernels/sm90/configs.hpp, run 34c).
#pragma once

#include <cstdint>

#include "kernels/common/args.hpp"
#include "kernels/common/ptx.cuh"
#include "kernels/common/tile_io.cuh"

namespace flashref::cuda::kernels::sm90 {

// Whether a row's final m' (the log2-domain running max; -inf for a row that saw no key) is past
// what the fold keeps: |m'| >= 2^30, a factor of two inside the range where it fails.
__device__ __forceinline__ bool past_fold_range(float m) {
  return m != -INFINITY && !(fabsf(m) < 0x1p30f);
}

// L's value for such a row until it is computed again: a NaN with a payload of its own (the
// GPU's arithmetic gives NaN as 0x7FFFFFFF).
inline constexpr uint32_t kPastFoldRange = 0x7FC0F01Du;
__device__ __forceinline__ float past_fold_range_marker() {
  return __uint_as_float(kPastFoldRange);
}

// Row `row` of head h in batch b: O and L from Alg. 1 with the unfolded softmax. Called by a
// whole warp. One pass over the keys per column of the lane's (lane + 32 u): the score is formed
// again each pass, so that only one value of O, m and l are live.
template <typename Element, int kD>
__device__ __forceinline__ void rewrite_row_unfolded(const AttnArgs& args, int b, int h, int row,
                                                     int lane) {
  constexpr int kPerLane = kD / 32;
  const int h_kv = h / args.group;
  const Element* q_row = row_ptr<const Element>(args.q, b, row, h);
  Element* o_row = row_ptr<Element>(args.o, b, row, h);
  // Keys < limit are visible (the main loop's row_limits).
  const int64_t last = static_cast<int64_t>(row) + args.causal_offset;
  const int limit = args.causal ? static_cast<int>(max64(0, min64(args.S_k, last + 1))) : args.S_k;
#pragma unroll 1
  for (int u = 0; u < kPerLane; ++u) {
    const int col = lane + 32 * u;
    float m = -INFINITY, l = 0.0f, o = 0.0f;
    const Element* k_row = row_ptr<const Element>(args.k, b, 0, h_kv);
    const Element* v_row = row_ptr<const Element>(args.v, b, 0, h_kv);
#pragma unroll 1
    for (int j = 0; j < limit; ++j, k_row += args.k.row_stride, v_row += args.v.row_stride) {
      float s = 0.0f;
#pragma unroll
      for (int w = 0; w < kPerLane; ++w) {
        const int i = lane + 32 * w;
        if (i < args.d) s = fmaf(to_float(q_row[i]), to_float(k_row[i]), s);
      }
#pragma unroll
      for (int x = 16; x >= 1; x /= 2) s += __shfl_xor_sync(0xffffffff, s, x);
      // Unfolded: the score to the log2 domain in its own rounding (never contracted with the
      // subtraction below), so that the largest one's exponent is exactly 0.
      s = __fmul_rn(s, args.scale_log2);
      const float m_new = fmaxf(m, s);
      // A max past float32 makes the row NaN, as the main loop does (rather than zero P~).
      const float m_base = m_new == INFINITY ? NAN : m_new;
      const float alpha = fast_exp2(m - m_base);  // m = -inf at the first key: 0
      const float p = fast_exp2(s - m_base);
      l = alpha * l + p;
      o = alpha * o + (col < args.d ? p * to_float(v_row[col]) : 0.0f);
      m = m_new;
    }
    if (col < args.d) o_row[col] = static_cast<Element>(l > 0.0f ? o / l : 0.0f);
    if (u == 0 && lane == 0)
      args.lse[(static_cast<int64_t>(b) * args.H + h) * args.S_q + row] =
          l > 0.0f ? (m + __log2f(l)) * 0.69314718055994531f : -INFINITY;
  }
}

// The marked rows of every query tile computed again, by a kernel of their own launched after
// the forward (FwdTraitsRowsAfter): each warp reads the L of 32 rows and rewrites the marked
// ones. A 1-D grid of ceil(S_q / 256) * H * B blocks of 256 threads (launch_fwd), numbered over
// (batch, head, row block) as the other kernels' grids are: a grid's y and z stop at 65,535,
// which B can pass.
template <typename Element, int kD>
__global__ void __launch_bounds__(256) fwd_rows_unfolded_kernel(const AttnArgs args) {
  const int row_blocks = ceil_div(args.S_q, 256);
  const int bh = static_cast<int>(blockIdx.x / row_blocks);
  const int b = bh / args.H, h = bh % args.H, lane = threadIdx.x % 32;
  const int warp_row = static_cast<int>(blockIdx.x % row_blocks) * 256 + (threadIdx.x / 32) * 32;
  const int row = warp_row + lane;
  const float* lse = args.lse + static_cast<int64_t>(bh) * args.S_q;
  const bool marked = row < args.S_q && __float_as_uint(lse[row]) == kPastFoldRange;
  for (uint32_t mask = __ballot_sync(0xffffffff, marked); mask != 0; mask &= mask - 1)
    rewrite_row_unfolded<Element, kD>(args, b, h, warp_row + __ffs(mask) - 1, lane);
}

}  // namespace flashref::cuda::kernels::sm90

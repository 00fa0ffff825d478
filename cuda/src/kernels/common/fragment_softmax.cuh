// Work on mma accumulator tiles shared by the bf16/f16 kernels (ptx.cuh) and the TF32 kernels
// (tf32.cuh), whose C tiles have one layout: lane 4 g + t holds rows g and g + 8 (hf = 0, 1)
// and columns 2 t, 2 t + 1 (c = 0, 1) of each 16 x 8 tile, as element hf * 2 + c; the four
// lanes of a quad hold the same two rows. Zeroing, and the softmax's row steps.
//
// Scores are in the log2 domain: s' = S * scale * log2(e), so exp(scale S - m) = 2^(s' - m')
// with m' = m log2(e), on ex2.approx (fast_exp2).
//
// Only steps that leave each kernel's code as it was are here: written as helpers, the score
// masking of the forward and of the dQ pass, the loads, and the dQ pass's row statistics made
// the compiler allocate registers differently (more spills in some kernels), so they stay in
// the kernels.
#pragma once

#include <cstdint>

#include "kernels/common/args.hpp"
#include "kernels/common/causal.cuh"
#include "kernels/common/epilogue.cuh"
#include "kernels/common/ptx.cuh"

namespace flashref::cuda::kernels {

// Accumulator tiles set to 0 (Alg. 1 line 6, Alg. 2 line 7, and each product's C).
template <int kN, int kE>
__device__ __forceinline__ void zero_tiles(float (&acc)[kN][kE]) {
#pragma unroll
  for (int n = 0; n < kN; ++n)
#pragma unroll
    for (int e = 0; e < kE; ++e) acc[n][e] = 0.0f;
}

template <int kM, int kN, int kE>
__device__ __forceinline__ void zero_tiles(float (&acc)[kM][kN][kE]) {
#pragma unroll
  for (int m = 0; m < kM; ++m) zero_tiles(acc[m]);
}

// Max and sum of one row over the four lanes of its quad.
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
  return x;
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  x += __shfl_xor_sync(0xffffffffu, x, 2);
  return x;
}

// Alg. 1 line 6's m = -inf, l = 0 for the rows of kMT 16-row tiles.
template <int kMT>
__device__ __forceinline__ void init_softmax_rows(float (&row_m)[kMT][2], float (&row_l)[kMT][2]) {
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      row_m[mt][hf] = -INFINITY;
      row_l[mt][hf] = 0.0f;
    }
}

// Alg. 1 lines 10-12: m' = max(m'_old, rowmax(s')), P~ = 2^(s' - m') in place of the scores,
// l = 2^(m'_old - m') l + rowsum(P~); and line 13's first term, O = 2^(m'_old - m') O.
template <int kMT, int kNT, int kDT>
__device__ __forceinline__ void online_softmax_rows(float (&acc_s)[kMT][kNT][4],
                                                    float (&row_m)[kMT][2], float (&row_l)[kMT][2],
                                                    float (&acc_o)[kMT][kDT][4]) {
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      float mx = row_m[mt][hf];
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
        mx = fmaxf(mx, fmaxf(acc_s[mt][nt][hf * 2], acc_s[mt][nt][hf * 2 + 1]));
      mx = quad_max(mx);
      // A row with no visible key yet keeps m = -inf; subtracting 0 instead of -inf keeps
      // 2^(-inf - m) = 0 rather than NaN.
      const float m_use = mx == -INFINITY ? 0.0f : mx;
      const float corr = fast_exp2(row_m[mt][hf] - m_use);
      row_m[mt][hf] = mx;
      float sum = 0.0f;
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          float& s = acc_s[mt][nt][hf * 2 + c];
          s = fast_exp2(s - m_use);
          sum += s;
        }
      // Each lane keeps a partial row sum; the quad is summed once at the end.
      row_l[mt][hf] = row_l[mt][hf] * corr + sum;
#pragma unroll
      for (int dt = 0; dt < kDT; ++dt) {
        acc_o[mt][dt][hf * 2] *= corr;
        acc_o[mt][dt][hf * 2 + 1] *= corr;
      }
    }
}

// Alg. 1 lines 15-16 for a warp's rows (warp_row0 + 16 mt + ..): O / l into the staging tile
// sO (row stride kStride, in the tile's element type), and L = m + ln(l) = ln(2) (m' + log2 l)
// into lse_rows for the rows below rows_valid.
template <int kMT, int kDT, int kStride, typename E>
__device__ __forceinline__ void normalize_rows(E* sO, float* lse_rows, const float (&row_m)[kMT][2],
                                               const float (&row_l)[kMT][2],
                                               const float (&acc_o)[kMT][kDT][4], int warp_row0,
                                               int rows_valid, int g, int t) {
  constexpr float kLn2 = 0.6931471805599453f;
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const float l = quad_sum(row_l[mt][hf]);
      // l = 0 only for a row that sees no key: O = 0 and L = -inf, never NaN.
      const float inv_l = l > 0.0f ? 1.0f / l : 0.0f;
      const int r = warp_row0 + mt * 16 + g + hf * 8;
#pragma unroll
      for (int dt = 0; dt < kDT; ++dt)
        *reinterpret_cast<StagedPair<E>*>(sO + r * kStride + dt * 8 + 2 * t) =
            staged_pair<E>(acc_o[mt][dt][hf * 2] * inv_l, acc_o[mt][dt][hf * 2 + 1] * inv_l);
      if (t == 0 && r < rows_valid)
        lse_rows[r] = l > 0.0f ? (row_m[mt][hf] + log2f(l)) * kLn2 : -INFINITY;
    }
}

// Alg. 2 line 12 in the dK/dV pass, on transposed tiles (keys n0 + key_row (+ 8) as this
// thread's rows, queries m0.. as columns): P^T = 2^(s'^T - L') in place of S^T, L' read from
// sL2 (this step's rows); 0 above the diagonal of a tile that needs the mask. A visible key of
// a single-key query has P = 1 exactly, a masked one 0 (checked only in a tile that holds such
// a query).
template <int kNT>
__device__ __forceinline__ void p_transposed_from_scores(float (&acc_s)[kNT][4], const float* sL2,
                                                         const AttnArgs& args, bool needs_mask,
                                                         bool has_single, int n0, int key_row,
                                                         int m0, int t) {
  // Key k is visible to query q iff q >= k - offset, so the thread's column 8 nt + c (query
  // m0 + 8 nt + 2 t + c) of row hf is masked iff 8 nt + c < first_seeing_query(n0 + key_row +
  // 8 hf) - m0 - 2 t. Its block-uniform part (64-bit) is clamped to a range where the 32-bit
  // sum cannot overflow and every compare keeps its outcome, leaving one register and one
  // compare per element on the thread's side (a 64-bit compare per element, with its operands
  // live across the steps, cost the fused backward spills).
  constexpr int64_t kReach = int64_t{1} << 20;
  const int64_t diagonal = first_seeing_query(args, n0) - m0;
  const int diagonal32 =
      static_cast<int>(diagonal < -kReach ? -kReach : diagonal > kReach ? kReach : diagonal);
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    const int hidden = diagonal32 + key_row + 8 * hf - 2 * t;
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
      const float2 l2 = *reinterpret_cast<const float2*>(sL2 + nt * 8 + 2 * t);
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        float x = acc_s[nt][hf * 2 + c] * args.scale_log2 - (c == 0 ? l2.x : l2.y);
        if (needs_mask && nt * 8 + c < hidden) x = -INFINITY;
        acc_s[nt][hf * 2 + c] = fast_exp2(x);
      }
    }
  }
  // Kept out of the loop above (rarely taken; inside it cost registers and spills).
  if (has_single) {
    const SingleKeyColumns single = single_key_columns(args, m0, t);
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int c = 0; c < 2; ++c)
        if (single.holds(nt * 8 + c)) {
#pragma unroll
          for (int hf = 0; hf < 2; ++hf) {
            float& p = acc_s[nt][hf * 2 + c];
            p = p != 0.0f ? 1.0f : 0.0f;
          }
        }
  }
}

// Alg. 2 line 15 in the dK/dV pass: dS^T = P^T * (dP^T - D) into ds (which may be P^T or dP^T
// itself), D read from sD (this step's rows); exactly 0 for a single-key query.
template <int kNT>
__device__ __forceinline__ void ds_transposed(float (&ds)[kNT][4], const float (&p)[kNT][4],
                                              const float (&dp)[kNT][4], const float* sD,
                                              const AttnArgs& args, bool has_single, int m0,
                                              int t) {
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt) {
    const float2 dv = *reinterpret_cast<const float2*>(sD + nt * 8 + 2 * t);
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      ds[nt][hf * 2] = p[nt][hf * 2] * (dp[nt][hf * 2] - dv.x);
      ds[nt][hf * 2 + 1] = p[nt][hf * 2 + 1] * (dp[nt][hf * 2 + 1] - dv.y);
    }
  }
  if (has_single) {
    const SingleKeyColumns single = single_key_columns(args, m0, t);
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int c = 0; c < 2; ++c)
        if (single.holds(nt * 8 + c)) {
          ds[nt][c] = 0.0f;
          ds[nt][2 + c] = 0.0f;
        }
  }
}
// ... in place of P^T.
template <int kNT>
__device__ __forceinline__ void ds_transposed(float (&acc_s)[kNT][4], const float (&acc_dp)[kNT][4],
                                              const float* sD, const AttnArgs& args,
                                              bool has_single, int m0, int t) {
  ds_transposed(acc_s, acc_s, acc_dp, sD, args, has_single, m0, t);
}

}  // namespace flashref::cuda::kernels

// Forward pass, exact float32 (FFMA, no TF32): Algorithm 1 for one query tile per block, with
// the same grid order, key-tile loop and load pipeline as the tensor-core kernel
// (fwd_mma.cuh). The products are FFMA register tiles (S = Q K^T from registers, P~ through
// shared memory for P~ V; f32_tile.cuh says who owns what), and the softmax runs in natural
// units with accurate expf/logf: this path is judged against a float32 baseline.
#pragma once

#include "kernels/common/args.hpp"
#include "kernels/common/ptx.cuh"
#include "kernels/common/schedule.cuh"
#include "kernels/common/tile_io.cuh"
#include "kernels/ffma/tile.cuh"

namespace flashref::cuda::kernels {

template <int kD, int kBlockM, int kBlockN>
struct FwdF32Traits : F32Shape<kD, kBlockM, kBlockN> {
  static constexpr int kThreads = kF32Threads;
  static constexpr int kTM = kBlockM / 8, kTN = kBlockN / 16;
  static constexpr int kPStride = kBlockN + 4;
  static constexpr int kSmemBytes =
      ((kBlockM + 2 * kBlockN) * F32Shape<kD, kBlockM, kBlockN>::kStride + kBlockM * kPStride) * 4;
};

template <typename T>
__global__ void __launch_bounds__(kF32Threads) fwd_f32_kernel(const AttnArgs args) {
  constexpr int kD = T::kD, kBlockM = T::kBlockM, kBlockN = T::kBlockN;
  constexpr int kTM = T::kTM, kTN = T::kTN, kOC = T::kOC, kVW = T::kVW;
  constexpr int kStride = T::kStride, kPStride = T::kPStride, kThreads = T::kThreads;

  extern __shared__ __align__(16) unsigned char smem_raw[];
  float* sQ = reinterpret_cast<float*>(smem_raw);
  float* sK = sQ + kBlockM * kStride;
  float* sV = sK + kBlockN * kStride;
  float* sP = sV + kBlockN * kStride;

  const int tid = threadIdx.x, ty = tid / 16, tx = tid % 16;
  const QueryTileSchedule<kBlockM, kBlockN> tile(args);
  const int b = tile.b, h = tile.h, row0 = tile.row0, rows_valid = tile.rows_valid;
  const int d = args.d;

  int n_end = ceil_div(args.S_k, kBlockN);
  if (args.causal) n_end = tile.causal_key_tiles_end(args, n_end);
  float* o_tile = row_ptr<float>(args.o, b, row0, h);
  float* lse_rows = args.lse + (static_cast<int64_t>(b) * args.H + h) * args.S_q + row0;

  float acc_o[kTM][kOC], row_m[kTM], row_l[kTM];
#pragma unroll
  for (int i = 0; i < kTM; ++i) {
    row_m[i] = -INFINITY;
    row_l[i] = 0.0f;
#pragma unroll
    for (int c = 0; c < kOC; ++c) acc_o[i][c] = 0.0f;
  }

  if (n_end > 0) {
    const float* k_head = row_ptr<const float>(args.k, b, 0, tile.h_kv);
    const float* v_head = row_ptr<const float>(args.v, b, 0, tile.h_kv);
    // Alg. 1 line 5: Q_i, and the first key tile.
    load_tile_async<kBlockM, kD, kStride, kThreads>(sQ, row_ptr<const float>(args.q, b, row0, h),
                                                    args.q.row_stride, rows_valid, d, tid);
    {
      const int n0 = (n_end - 1) * kBlockN;
      load_tile_async<kBlockN, kD, kStride, kThreads>(
          sK, k_head + static_cast<int64_t>(n0) * args.k.row_stride, args.k.row_stride,
          args.S_k - n0, d, tid);
    }
    cp_async_commit();

    for (int n = n_end - 1; n >= 0; --n) {
      const int n0 = n * kBlockN;
      cp_async_wait<0>();
      __syncthreads();  // K_j has landed; every thread is done reading V_{j+1} and P~
      load_tile_async<kBlockN, kD, kStride, kThreads>(
          sV, v_head + static_cast<int64_t>(n0) * args.v.row_stride, args.v.row_stride,
          args.S_k - n0, d, tid);
      cp_async_commit();

      // Line 9: S = Q_i K_j^T.
      float s[kTM][kTN];
#pragma unroll
      for (int i = 0; i < kTM; ++i)
#pragma unroll
        for (int j = 0; j < kTN; ++j) s[i][j] = 0.0f;
      f32_gemm_rows<kTM, kTN, kD, kStride, kStride>(s, sQ, sK, ty, tx);

      const bool needs_mask =
          n0 + kBlockN > args.S_k ||
          (args.causal && n0 + kBlockN - 1 > static_cast<int64_t>(row0) + args.causal_offset);
      // Lines 10-12 in natural units, as the cpu backend does: S = scale * (Q K^T) rounded once
      // (bit for bit what the backward recomputes), P~ = exp(S - m), L = m + log(l). A row
      // dominated by one score then gets P~ = 1 and L = m exactly, and the backward's
      // exp(S - L) is 1 exactly too, whatever the magnitude of the scores.
#pragma unroll
      for (int i = 0; i < kTM; ++i) {
        int limit = args.S_k;
        if (needs_mask && args.causal) {
          const int64_t last = static_cast<int64_t>(row0 + f32_row(ty, i)) + args.causal_offset;
          limit = static_cast<int>(max64(0, min64(limit, last + 1)));
        }
        float mx = row_m[i];
#pragma unroll
        for (int j = 0; j < kTN; ++j) {
          s[i][j] = __fmul_rn(s[i][j], args.scale);  // never fused: the backward rounds it too
          if (needs_mask && n0 + tx + 16 * j >= limit) s[i][j] = -INFINITY;
          mx = fmaxf(mx, s[i][j]);
        }
        mx = row_max16(mx);
        const float m_use = mx == -INFINITY ? 0.0f : mx;
        const float corr = expf(row_m[i] - m_use);
        row_m[i] = mx;
        float sum = 0.0f;
#pragma unroll
        for (int j = 0; j < kTN; ++j) {
          const float p = expf(s[i][j] - m_use);
          sum += p;
          sP[f32_row(ty, i) * kPStride + tx + 16 * j] = p;
        }
        row_l[i] = row_l[i] * corr + sum;
#pragma unroll
        for (int c = 0; c < kOC; ++c) acc_o[i][c] *= corr;
      }

      cp_async_wait<0>();
      __syncthreads();  // V_j has landed, P~ is visible, every thread is done reading K_j
      if (n > 0) {
        const int n0_next = n0 - kBlockN;
        load_tile_async<kBlockN, kD, kStride, kThreads>(
            sK, k_head + static_cast<int64_t>(n0_next) * args.k.row_stride, args.k.row_stride,
            args.S_k - n0_next, d, tid);
        cp_async_commit();
      }
      // Line 13: O += P~ V_j.
      f32_gemm_out<kTM, kOC, kVW, kBlockN, kPStride, kStride>(acc_o, sP, sV, ty, tx);
    }
  }

  // Lines 15-18: O / l and L, written once; a row with no visible key gets O = 0, L = -inf.
#pragma unroll
  for (int i = 0; i < kTM; ++i) {
    const float l = row_sum16(row_l[i]);
    const float inv_l = l > 0.0f ? 1.0f / l : 0.0f;
    const int r = f32_row(ty, i);
    if (r < rows_valid) {
      float* o_row = o_tile + static_cast<int64_t>(r) * args.o.row_stride;
#pragma unroll
      for (int c = 0; c < kOC; ++c) {
        const int col = f32_out_col<kVW>(c, tx);
        if (col < d) o_row[col] = acc_o[i][c] * inv_l;
      }
      if (tx == 0) lse_rows[r] = l > 0.0f ? row_m[i] + logf(l) : -INFINITY;
    }
  }
}

}  // namespace flashref::cuda::kernels

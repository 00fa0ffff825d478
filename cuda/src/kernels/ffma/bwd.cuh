// Backward, exact float32 (FFMA, no TF32): the dQ pass and the dK/dV pass, with the same
// ownership, loop order, masking and workspace as the tensor-core kernels (bwd_dq_mma.cuh,
// bwd_dkdv_mma.cuh). P and dS go through shared memory between the two products that use them
// (f32_tile.cuh says who owns what).
//
// Two versions, selected by kPairedLanes (FLASHREF_CUDA_TUNE f32bwd=1 picks the plain one on
// every tile; docs/perf-notes.md, runs 6 and 7, has their timings):
// - plain (run 6's order): lanes as tid / 16, tid % 16; the dK/dV pass loads Q_i, dO_i, L'_i,
//   D_i into shared memory and waits for all of them at the start of each step; the dQ pass
//   issues K_{j-1} at the end of a step and waits for it at the start of the next.
// - paired lanes (run 7, the default): the lane order of f32_bwd_ty/f32_bwd_tx (half the
//   shared-memory wavefronts of the B operands); the dK/dV pass keeps L'_i and D_i in
//   registers (at d = 128 that is what lets 3 blocks share an SM instead of 2) and issues dO_i
//   and Q_i as two cp.async groups, starting the step with dP^T = V_j dO_i^T, which covers
//   Q_i's load; the dQ pass likewise starts with dP = dO_i V_j^T, which covers K_{j-1}'s load.
//   (Prefetching the next step's Q and dO during this one took ptxas from 168 to 228 registers
//   at d = 128.)
// Both compute every element with the same FFMA chain and sum dQ, dK, dV in the same order
// (dQ: key tiles last to first, keys ascending within a tile; dK, dV: query heads, then query
// tiles, then queries ascending), so their results are bitwise identical.
#pragma once

#include "kernels/common/args.hpp"
#include "kernels/common/causal.cuh"
#include "kernels/common/ptx.cuh"
#include "kernels/common/schedule.cuh"
#include "kernels/common/tile_io.cuh"
#include "kernels/ffma/tile.cuh"

namespace flashref::cuda::kernels {

template <int kD, int kBlockM, int kBlockN, bool kPairedLanes_ = true>
struct BwdF32Traits : F32Shape<kD, kBlockM, kBlockN> {
  static constexpr bool kPairedLanes = kPairedLanes_;
  using Plain = BwdF32Traits<kD, kBlockM, kBlockN, false>;  // for measurement (f32bwd=1)
  static constexpr int kThreads = kF32Threads;

  static constexpr int kStride = F32Shape<kD, kBlockM, kBlockN>::kStride;
  // dQ pass: Q, dO (B_q rows), K, V (B_k rows), dS (B_q x B_k).
  static constexpr int kDqSStride = kBlockN + 4;
  static constexpr int kDqSmemBytes =
      ((2 * kBlockM + 2 * kBlockN) * kStride + kBlockM * kDqSStride) * 4;
  // dK/dV pass: K, V (B_k rows), Q, dO (B_q rows), P^T and dS^T (B_k x B_q), and in the plain
  // version L' and D (paired lanes keep them in registers).
  static constexpr int kDkvSStride = kBlockM + 4;
  static constexpr int kDkvSmemBytes =
      ((2 * kBlockN + 2 * kBlockM) * kStride + 2 * kBlockN * kDkvSStride +
       (kPairedLanes ? 0 : 2 * kBlockM)) *
      4;
  // Paired lanes compile the dK/dV kernel for 3 blocks per SM (at most 168 registers) at d = 128,
  // where its 32 x 32 block's 76,800 bytes let exactly 3 share an H200 SM (228 KB, 1 KB reserved
  // per block). d = 32 (64 x 64) would fit 3 too, but spilled 8 bytes at 168 registers.
  static constexpr int kDkvMinBlocks = kPairedLanes && kD == 128 ? 3 : 0;
  static_assert(kWorkspaceRowPad % kBlockM == 0, "workspace padding must cover a query tile");
};

// The float32 backward recomputes P = exp(S - L) exactly as the float32 forward formed its
// exponents: S = scale * (Q K^T) rounded once (the same FFMA chain, bit for bit), L in natural
// log from the workspace, accurate expf. And D comes from the preprocess as the same
// sequential FFMA chain as dP = dO V^T, so where O = V_j exactly (a one-hot row) dP_ij - D_i
// cancels to 0 as it does in exact arithmetic.
// Alg. 2 lines 11 and 14 of one step, either pass: S = A_s B_s^T and dP = A_dp B_dp^T. With
// paired lanes, S's second operand is the last cp.async group in flight, so dP runs while it
// lands; the plain version waits for everything first.
template <typename T, int kTM, int kTN>
__device__ __forceinline__ void scores_and_dp(float (&s)[kTM][kTN], float (&dp)[kTM][kTN],
                                              const float* s_a, const float* s_b, const float* dp_a,
                                              const float* dp_b, int ty, int tx) {
  constexpr int kD = T::kD, kStride = T::kStride;
#pragma unroll
  for (int i = 0; i < kTM; ++i)
#pragma unroll
    for (int j = 0; j < kTN; ++j) s[i][j] = dp[i][j] = 0.0f;
  if constexpr (T::kPairedLanes) {
    cp_async_wait<1>();
    __syncthreads();  // everything but S's second operand has landed
    f32_gemm_rows<kTM, kTN, kD, kStride, kStride>(dp, dp_a, dp_b, ty, tx);
    cp_async_wait<0>();
    __syncthreads();
    f32_gemm_rows<kTM, kTN, kD, kStride, kStride>(s, s_a, s_b, ty, tx);
  } else {
    cp_async_wait<0>();
    __syncthreads();
    f32_gemm_rows<kTM, kTN, kD, kStride, kStride>(s, s_a, s_b, ty, tx);
    f32_gemm_rows<kTM, kTN, kD, kStride, kStride>(dp, dp_a, dp_b, ty, tx);
  }
}

template <typename T>
__global__ void __launch_bounds__(kF32Threads) bwd_dq_f32_kernel(const AttnArgs args) {
  constexpr int kD = T::kD, kBlockM = T::kBlockM, kBlockN = T::kBlockN;
  constexpr int kTM = kBlockM / 8, kTN = kBlockN / 16, kOC = T::kOC, kVW = T::kVW;
  constexpr int kStride = T::kStride, kSStride = T::kDqSStride, kThreads = T::kThreads;

  extern __shared__ __align__(16) unsigned char smem_raw[];
  float* sQ = reinterpret_cast<float*>(smem_raw);
  float* sdO = sQ + kBlockM * kStride;
  float* sK = sdO + kBlockM * kStride;
  float* sV = sK + kBlockN * kStride;
  float* sdS = sV + kBlockN * kStride;

  const int tid = threadIdx.x;
  const int ty = T::kPairedLanes ? f32_bwd_ty(tid) : tid / 16,
            tx = T::kPairedLanes ? f32_bwd_tx(tid) : tid % 16;
  const QueryTileSchedule<kBlockM, kBlockN> tile(args);
  const int b = tile.b, h = tile.h, row0 = tile.row0, rows_valid = tile.rows_valid;
  const int d = args.d;

  int n_end = ceil_div(args.S_k, kBlockN);
  if (args.causal) n_end = tile.causal_key_tiles_end(args, n_end);

  float acc_dq[kTM][kOC];
#pragma unroll
  for (int i = 0; i < kTM; ++i)
#pragma unroll
    for (int c = 0; c < kOC; ++c) acc_dq[i][c] = 0.0f;

  if (n_end > 0) {
    const float* k_head = row_ptr<const float>(args.k, b, 0, tile.h_kv);
    const float* v_head = row_ptr<const float>(args.v, b, 0, tile.h_kv);
    auto load_k = [&](int n) {
      const int n0 = n * kBlockN;
      load_tile_async<kBlockN, kD, kStride, kThreads>(
          sK, k_head + static_cast<int64_t>(n0) * args.k.row_stride, args.k.row_stride,
          args.S_k - n0, d, tid);
    };
    auto load_v = [&](int n) {
      const int n0 = n * kBlockN;
      load_tile_async<kBlockN, kD, kStride, kThreads>(
          sV, v_head + static_cast<int64_t>(n0) * args.v.row_stride, args.v.row_stride,
          args.S_k - n0, d, tid);
    };
    load_tile_async<kBlockM, kD, kStride, kThreads>(sQ, row_ptr<const float>(args.q, b, row0, h),
                                                    args.q.row_stride, rows_valid, d, tid);
    load_tile_async<kBlockM, kD, kStride, kThreads>(sdO, row_ptr<const float>(args.dO, b, row0, h),
                                                    args.dO.row_stride, rows_valid, d, tid);
    load_v(n_end - 1);
    if constexpr (T::kPairedLanes)
      cp_async_commit();  // paired: Q_i, dO_i, V_j, then K_j on its own
    load_k(n_end - 1);
    cp_async_commit();

    const int64_t ws_row = (static_cast<int64_t>(b) * args.H + h) * args.S_q_pad + row0;
    float lse2[kTM], dsum[kTM];
    bool single[kTM];
#pragma unroll
    for (int i = 0; i < kTM; ++i) {
      lse2[i] = args.lse2[ws_row + f32_row(ty, i)];
      dsum[i] = args.dsum[ws_row + f32_row(ty, i)];
      single[i] = sees_one_key(args, row0 + f32_row(ty, i));
    }

    for (int n = n_end - 1; n >= 0; --n) {
      const int n0 = n * kBlockN;
      // Alg. 2 lines 11 and 14: S = Q_i K_j^T, dP = dO_i V_j^T (paired lanes: V_j and then K_j
      // are the last two groups in flight).
      float s[kTM][kTN], dp[kTM][kTN];
      scores_and_dp<T>(s, dp, sQ, sK, sdO, sV, ty, tx);

      // Lines 12 and 15: P = 2^(s' - L'), dS = P * (dP - D).
      const bool needs_mask =
          n0 + kBlockN > args.S_k ||
          (args.causal && n0 + kBlockN - 1 > static_cast<int64_t>(row0) + args.causal_offset);
#pragma unroll
      for (int i = 0; i < kTM; ++i) {
        int limit = args.S_k;
        if (needs_mask && args.causal) {
          const int64_t last = static_cast<int64_t>(row0 + f32_row(ty, i)) + args.causal_offset;
          limit = static_cast<int>(max64(0, min64(limit, last + 1)));
        }
#pragma unroll
        for (int j = 0; j < kTN; ++j) {
          float x = __fmul_rn(s[i][j], args.scale) - lse2[i];  // S as the forward rounded it
          if (needs_mask && n0 + tx + 16 * j >= limit) x = -INFINITY;
          sdS[f32_row(ty, i) * kSStride + tx + 16 * j] =
              single[i] ? 0.0f : expf(x) * (dp[i][j] - dsum[i]);
        }
      }
      __syncthreads();  // dS is visible; every thread is done reading V_j
      if (n > 0) {
        load_v(n - 1);
        cp_async_commit();
      }
      // Line 16: dQ_i += dS K_j.
      f32_gemm_out<kTM, kOC, kVW, kBlockN, kSStride, kStride>(acc_dq, sdS, sK, ty, tx);
      __syncthreads();  // every thread is done reading K_j and dS
      if (n > 0) {
        load_k(n - 1);
        cp_async_commit();
      }
    }
  }

  const int64_t off = row_offset(args.dq, b, row0, h);
#pragma unroll
  for (int i = 0; i < kTM; ++i) {
    const int r = f32_row(ty, i);
    if (r < rows_valid)
#pragma unroll
      for (int c = 0; c < kOC; ++c) {
        const int col = f32_out_col<kVW>(c, tx);
        if (col < d)
          store1(args.dq.ptr, args.grad_code,
                 off + static_cast<int64_t>(r) * args.dq.row_stride + col,
                 acc_dq[i][c] * args.scale);
      }
  }
}

template <typename T>
__global__ void __launch_bounds__(kF32Threads, T::kDkvMinBlocks)
    bwd_dkdv_f32_kernel(const AttnArgs args) {
  constexpr int kD = T::kD, kBlockM = T::kBlockM, kBlockN = T::kBlockN;
  constexpr int kTM = kBlockN / 8, kTN = kBlockM / 16, kOC = T::kOC, kVW = T::kVW;
  constexpr int kStride = T::kStride, kSStride = T::kDkvSStride, kThreads = T::kThreads;

  extern __shared__ __align__(16) unsigned char smem_raw[];
  float* sK = reinterpret_cast<float*>(smem_raw);
  float* sV = sK + kBlockN * kStride;
  float* sQ = sV + kBlockN * kStride;
  float* sdO = sQ + kBlockM * kStride;
  float* sP = sdO + kBlockM * kStride;
  float* sdS = sP + kBlockN * kSStride;
  float* sL2 = sdS + kBlockN * kSStride;  // plain version only: L'_i and D_i
  float* sD = sL2 + kBlockM;

  const int tid = threadIdx.x;
  const int ty = T::kPairedLanes ? f32_bwd_ty(tid) : tid / 16,
            tx = T::kPairedLanes ? f32_bwd_tx(tid) : tid % 16;
  const KeyTileSchedule<kBlockM, kBlockN> tile(args);
  const int b = tile.b, h_kv = tile.h_kv, n0 = tile.n0, keys_valid = tile.keys_valid;
  const int d = args.d;

  const int m_tiles = ceil_div(args.S_q, kBlockM);
  int m_begin = 0;
  if (args.causal) m_begin = tile.causal_query_tiles_begin(args, m_tiles);
  const int per_head = m_tiles - m_begin;
  const int total = per_head * args.group;

  float acc_dk[kTM][kOC], acc_dv[kTM][kOC];
#pragma unroll
  for (int i = 0; i < kTM; ++i)
#pragma unroll
    for (int c = 0; c < kOC; ++c) acc_dk[i][c] = acc_dv[i][c] = 0.0f;

  if (total > 0) {
    load_tile_async<kBlockN, kD, kStride, kThreads>(sK, row_ptr<const float>(args.k, b, n0, h_kv),
                                                    args.k.row_stride, keys_valid, d, tid);
    load_tile_async<kBlockN, kD, kStride, kThreads>(sV, row_ptr<const float>(args.v, b, n0, h_kv),
                                                    args.v.row_stride, keys_valid, d, tid);
    for (int it = 0; it < total; ++it) {
      const int hq = h_kv * args.group + it / per_head;
      const int m0 = (m_begin + it % per_head) * kBlockM;
      const int64_t ws = (static_cast<int64_t>(b) * args.H + hq) * args.S_q_pad + m0;
      // Alg. 2 line 10: Q_i, dO_i, L'_i, D_i. Paired lanes: dO_i and Q_i in their own cp.async
      // groups, dO_i first, and the thread's own L'_i, D_i (queries tx + 16 j) straight into
      // registers. Plain: one group with L'_i and D_i staged in shared memory.
      float l2[kTN], dsum[kTN];
      if constexpr (T::kPairedLanes) {
        load_tile_async<kBlockM, kD, kStride, kThreads>(sdO,
                                                        row_ptr<const float>(args.dO, b, m0, hq),
                                                        args.dO.row_stride, args.S_q - m0, d, tid);
        cp_async_commit();
        load_tile_async<kBlockM, kD, kStride, kThreads>(sQ, row_ptr<const float>(args.q, b, m0, hq),
                                                        args.q.row_stride, args.S_q - m0, d, tid);
        cp_async_commit();
#pragma unroll
        for (int j = 0; j < kTN; ++j) {
          l2[j] = args.lse2[ws + tx + 16 * j];
          dsum[j] = args.dsum[ws + tx + 16 * j];
        }
      } else {
        load_tile_async<kBlockM, kD, kStride, kThreads>(sQ, row_ptr<const float>(args.q, b, m0, hq),
                                                        args.q.row_stride, args.S_q - m0, d, tid);
        load_tile_async<kBlockM, kD, kStride, kThreads>(sdO,
                                                        row_ptr<const float>(args.dO, b, m0, hq),
                                                        args.dO.row_stride, args.S_q - m0, d, tid);
        for (int c = tid; c < kBlockM / 2; c += kThreads) {
          const bool is_d = c >= kBlockM / 4;
          const int i = (is_d ? c - kBlockM / 4 : c) * 4;
          cp_async_16(smem_addr((is_d ? sD : sL2) + i), (is_d ? args.dsum : args.lse2) + ws + i,
                      true);
        }
        cp_async_commit();
      }

      // Lines 11 and 14, transposed: S^T = K_j Q_i^T, dP^T = V_j dO_i^T (paired lanes: dP^T
      // first, while Q_i lands).
      float s[kTM][kTN], dp[kTM][kTN];
      scores_and_dp<T>(s, dp, sK, sQ, sV, sdO, ty, tx);
      if constexpr (!T::kPairedLanes) {
#pragma unroll
        for (int j = 0; j < kTN; ++j) {
          l2[j] = sL2[tx + 16 * j];
          dsum[j] = sD[tx + 16 * j];
        }
      }

      // Lines 12 and 15: P^T and dS^T (queries past S_q have L' = +inf, so P = 0).
      const bool needs_mask =
          args.causal && n0 + kBlockN - 1 > static_cast<int64_t>(m0) + args.causal_offset;
      bool single[kTN];  // a query that sees one key has P = 1, dS = 0 (sees_one_key)
#pragma unroll
      for (int j = 0; j < kTN; ++j) single[j] = sees_one_key(args, m0 + tx + 16 * j);
#pragma unroll
      for (int i = 0; i < kTM; ++i) {
        const int64_t first_q = static_cast<int64_t>(n0 + f32_row(ty, i)) - args.causal_offset;
#pragma unroll
        for (int j = 0; j < kTN; ++j) {
          const int q = tx + 16 * j;
          float x = __fmul_rn(s[i][j], args.scale) - l2[j];
          if (needs_mask && m0 + q < first_q) x = -INFINITY;
          const float p = single[j] ? (x == -INFINITY ? 0.0f : 1.0f) : expf(x);
          sP[f32_row(ty, i) * kSStride + q] = p;
          sdS[f32_row(ty, i) * kSStride + q] = single[j] ? 0.0f : p * (dp[i][j] - dsum[j]);
        }
      }
      __syncthreads();  // P^T and dS^T are visible
      // Line 13: dV_j += P^T dO_i; line 17: dK_j += dS^T Q_i.
      f32_gemm_out<kTM, kOC, kVW, kBlockM, kSStride, kStride>(acc_dv, sP, sdO, ty, tx);
      f32_gemm_out<kTM, kOC, kVW, kBlockM, kSStride, kStride>(acc_dk, sdS, sQ, ty, tx);
      __syncthreads();  // every thread is done with this step's tiles before the next load
    }
  }

  // Line 19: dK_j (times the scale) and dV_j; zeros for a key tile no query sees.
  const int64_t off_k = row_offset(args.dk, b, n0, h_kv), off_v = row_offset(args.dv, b, n0, h_kv);
#pragma unroll
  for (int i = 0; i < kTM; ++i) {
    const int r = f32_row(ty, i);
    if (r < keys_valid)
#pragma unroll
      for (int c = 0; c < kOC; ++c) {
        const int col = f32_out_col<kVW>(c, tx);
        if (col < d) {
          store1(args.dk.ptr, args.grad_code,
                 off_k + static_cast<int64_t>(r) * args.dk.row_stride + col,
                 acc_dk[i][c] * args.scale);
          store1(args.dv.ptr, args.grad_code,
                 off_v + static_cast<int64_t>(r) * args.dv.row_stride + col, acc_dv[i][c]);
        }
      }
  }
}

}  // namespace flashref::cuda::kernels

// Backward, the pass that owns dK and dV, on TF32 tensor cores (float32 inputs with
// allow_tf32): one block per (key tile, key/value head, batch), looping over the query heads
// of its group and their query tiles in a fixed order (no atomics, bitwise reproducible, the
// GQA sum part of the loop), built like the bf16/f16 kernel (bwd_dkdv_mma.cuh).
//
// Each warp owns 16 keys and works on transposed tiles, so P^T and dS^T come out of one mma
// as C tiles that a_from_c turns into the A operand of the next (tf32.cuh):
//   S^T = K_j Q_i^T, P^T = 2^(s'^T - L'_i)     (lines 11-12; 0 above the causal diagonal)
//   dV_j += P^T dO_i                           (line 13, P^T rounded to TF32)
//   dP^T = V_j dO_i^T                          (line 14)
//   dS^T = P^T * (dP^T - D_i)                  (line 15, from the float32 P^T)
//   dK_j += dS^T Q_i                           (line 17, dS^T rounded), dK *= scale at the end
// K_j, V_j and each stage of Q_i, dO_i are rounded to TF32 in shared memory once they land;
// L'_i and D_i are not matmul operands and stay float32. For d = 256 the dV and dK halves
// run as two launches (kDoDV / kDoDK) so each fits in registers.
#pragma once

#include "kernels/args.hpp"
#include "kernels/causal.cuh"
#include "kernels/epilogue.cuh"
#include "kernels/fragment_softmax.cuh"
#include "kernels/ptx.cuh"
#include "kernels/schedule.cuh"
#include "kernels/tf32.cuh"
#include "kernels/tile_io.cuh"

namespace flashref::cuda::kernels {

template <int kD_, int kBlockM_, int kNWarps_, bool kKVInRegs_, bool kDoDV_, bool kDoDK_>
struct BwdDkvTf32Traits {
  static constexpr int kD = kD_;
  static constexpr int kNWarps = kNWarps_;
  static constexpr int kBlockN = 16 * kNWarps;  // keys: one 16-row mma tile per warp
  static constexpr int kBlockM = kBlockM_;      // queries per step of the loop
  static constexpr bool kKVInRegs = kKVInRegs_;
  static constexpr bool kDoDV = kDoDV_, kDoDK = kDoDK_;
  static constexpr int kThreads = kNWarps * 32;
  static constexpr int kStride = kD + 4;                     // floats; tf32.cuh says why
  static constexpr int kStageElems = 2 * kBlockM * kStride;  // Q_i and dO_i
  static constexpr int kTileBytes = (2 * kBlockN * kStride + 2 * kStageElems) * 4;
  static constexpr int kMainBytes = kTileBytes + 2 * 2 * kBlockM * 4;  // + L'_i, D_i, 2 stages
  static constexpr int kOutStride = kD + 4;
  static constexpr int kOutBytes = kBlockN * kOutStride * 4;
  static constexpr int kSmemBytes = kMainBytes > kOutBytes ? kMainBytes : kOutBytes;
  static_assert(kWorkspaceRowPad % kBlockM == 0, "workspace padding must cover a query tile");
  static_assert(kBlockM % 8 == 0 && kBlockM >= 8 && kD % 32 == 0,
                "B_q in 8s; the head dim in 32s (bank padding)");
  static_assert(kTileBytes % 16 == 0, "float vectors after the tiles must stay 16-byte aligned");
  static_assert(kDoDV || kDoDK, "a pass must compute something");
};

template <typename T>
__global__ void __launch_bounds__(T::kThreads) bwd_dkdv_tf32_kernel(const AttnArgs args) {
  constexpr int kD = T::kD, kBlockM = T::kBlockM, kBlockN = T::kBlockN;
  constexpr int kStride = T::kStride, kThreads = T::kThreads;
  constexpr int kNT = kBlockM / 8, kDT = kD / 8, kKS = kD / 8;

  extern __shared__ __align__(16) unsigned char smem_raw[];
  float* sK = reinterpret_cast<float*>(smem_raw);
  float* sV = sK + kBlockN * kStride;
  float* sQdO = sV + kBlockN * kStride;  // stage s: Q_i at sQdO + s * kStageElems, dO_i after
  float* sVec = reinterpret_cast<float*>(smem_raw + T::kTileBytes);  // stage s: L' then D

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;
  const KeyTileSchedule<kBlockM, kBlockN> tile(args);
  const int b = tile.b, h_kv = tile.h_kv, n0 = tile.n0, keys_valid = tile.keys_valid;
  const int d = args.d;

  // Query tiles that see at least one key of this tile (all, or with a causal mask those from
  // the diagonal on).
  const int m_tiles = ceil_div(args.S_q, kBlockM);
  int m_begin = 0;
  if (args.causal) m_begin = tile.causal_query_tiles_begin(args, m_tiles);
  const int per_head = m_tiles - m_begin;
  const int total = per_head * args.group;

  const int warp_row0 = warp * 16;

  float acc_dk[T::kDoDK ? kDT : 1][4], acc_dv[T::kDoDV ? kDT : 1][4];
  zero_tiles(acc_dk);
  zero_tiles(acc_dv);

  if (total > 0) {
    // Alg. 2 line 7: K_j (and V_j, which only dK needs), kept for the whole block.
    load_tile_async<kBlockN, kD, kStride, kThreads>(sK, row_ptr<const float>(args.k, b, n0, h_kv),
                                                    args.k.row_stride, keys_valid, d, tid);
    if constexpr (T::kDoDK)
      load_tile_async<kBlockN, kD, kStride, kThreads>(sV, row_ptr<const float>(args.v, b, n0, h_kv),
                                                      args.v.row_stride, keys_valid, d, tid);
    cp_async_commit();

    // Line 10: Q_i, dO_i, L'_i, D_i of step `it` (query head, then query tile) into `stage`.
    auto load_q = [&](int it, int stage) {
      const int hq = h_kv * args.group + it / per_head;
      const int m0 = (m_begin + it % per_head) * kBlockM;
      float* sQ = sQdO + stage * T::kStageElems;
      load_tile_async<kBlockM, kD, kStride, kThreads>(sQ, row_ptr<const float>(args.q, b, m0, hq),
                                                      args.q.row_stride, args.S_q - m0, d, tid);
      load_tile_async<kBlockM, kD, kStride, kThreads>(sQ + kBlockM * kStride,
                                                      row_ptr<const float>(args.dO, b, m0, hq),
                                                      args.dO.row_stride, args.S_q - m0, d, tid);
      const int64_t ws = (static_cast<int64_t>(b) * args.H + hq) * args.S_q_pad + m0;
      float* vec = sVec + stage * 2 * kBlockM;
      for (int c = tid; c < kBlockM / 2; c += kThreads) {  // kBlockM/4 chunks of each vector
        const bool is_d = c >= kBlockM / 4;
        const int i = (is_d ? c - kBlockM / 4 : c) * 4;
        cp_async_16(smem_addr(vec + (is_d ? kBlockM : 0) + i),
                    (is_d ? args.dsum : args.lse2) + ws + i, true);
      }
    };
    load_q(0, 0);
    cp_async_commit();

    // K_j (and V_j) have landed: round this thread's chunks; a barrier publishes them.
    cp_async_wait<1>();
    round_own_chunks_tf32<kBlockN, kD, kStride, kThreads>(sK, tid);
    if constexpr (T::kDoDK) round_own_chunks_tf32<kBlockN, kD, kStride, kThreads>(sV, tid);
    uint32_t k_frag[T::kKVInRegs ? kKS : 1][4], v_frag[T::kKVInRegs && T::kDoDK ? kKS : 1][4];
    if constexpr (T::kKVInRegs) {
      __syncthreads();
#pragma unroll
      for (int ks = 0; ks < kKS; ++ks) {
        load_a(k_frag[ks], sK, kStride, warp_row0, ks * 8, g, t);
        if constexpr (T::kDoDK) load_a(v_frag[ks], sV, kStride, warp_row0, ks * 8, g, t);
      }
    }

    for (int it = 0; it < total; ++it) {
      const int stage = it & 1;
      if (it + 1 < total) {
        load_q(it + 1, stage ^ 1);
        cp_async_commit();
        cp_async_wait<1>();
      } else {
        cp_async_wait<0>();
      }
      const int m0 = (m_begin + it % per_head) * kBlockM;
      float* sQ = sQdO + stage * T::kStageElems;
      float* sdO = sQ + kBlockM * kStride;
      round_own_chunks_tf32<kBlockM, kD, kStride, kThreads>(sQ, tid);
      round_own_chunks_tf32<kBlockM, kD, kStride, kThreads>(sdO, tid);
      __syncthreads();  // Q_i, dO_i (rounded), L'_i and D_i are visible to every warp
      const float* sL2 = sVec + stage * 2 * kBlockM;
      const float* sD = sL2 + kBlockM;

      // Line 11: S^T = K_j Q_i^T; line 14: dP^T = V_j dO_i^T. With K and V read from shared
      // memory nothing indexes registers by ks, so that loop may stay rolled (unrolled, every
      // load of the tile would be hoisted into registers).
      float acc_s[kNT][4], acc_dp[T::kDoDK ? kNT : 1][4];
      zero_tiles(acc_s);
      if constexpr (T::kDoDK) zero_tiles(acc_dp);
#pragma unroll(T::kKVInRegs ? kKS : 1)
      for (int ks = 0; ks < kKS; ++ks) {
        uint32_t ak[4], av[4];
        if constexpr (T::kKVInRegs) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            ak[e] = k_frag[ks][e];
            if constexpr (T::kDoDK) av[e] = v_frag[ks][e];
          }
        } else {
          load_a(ak, sK, kStride, warp_row0, ks * 8, g, t);
          if constexpr (T::kDoDK) load_a(av, sV, kStride, warp_row0, ks * 8, g, t);
        }
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) {
          uint32_t bq0, bq1;
          load_b_rows(bq0, bq1, sQ, kStride, nt * 8, ks * 8, g, t);
          mma_tf32(acc_s[nt], ak, bq0, bq1);
          if constexpr (T::kDoDK) {
            uint32_t bdo0, bdo1;
            load_b_rows(bdo0, bdo1, sdO, kStride, nt * 8, ks * 8, g, t);
            mma_tf32(acc_dp[nt], av, bdo0, bdo1);
          }
        }
      }

      // Line 12: P^T = 2^(s'^T - L'); keys above the diagonal of a crossing tile get 0.
      // Queries past S_q have L' = +inf in the workspace, so their P is 0 with no compare;
      // keys past S_k only feed rows of dK/dV that are never written.
      const bool needs_mask =
          args.causal && n0 + kBlockN - 1 > static_cast<int64_t>(m0) + args.causal_offset;
      // A query that sees a single key has P = 1 there and dS = 0, exactly (sees_one_key);
      // only the tile holding such a query checks.
      const bool has_single = args.S_k == 1 || (args.causal && -args.causal_offset >= m0 &&
                                                -args.causal_offset < m0 + kBlockM);
      p_transposed_from_scores(acc_s, sL2, args, needs_mask, has_single, n0 + warp_row0 + g, m0, t);

      if constexpr (T::kDoDV) {
        // Line 13: dV_j += P^T dO_i, P^T rounded to TF32.
        uint32_t p_frag[kNT][4];
        a_frags_from_c(p_frag, acc_s);
        mma_tf32_a_frags_times_tile(acc_dv, p_frag, sdO, kStride, g, t);
      }

      if constexpr (T::kDoDK) {
        // Line 15: dS^T = P^T * (dP^T - D_i); line 17: dK_j += dS^T Q_i.
        ds_transposed(acc_s, acc_dp, sD, args, has_single, m0, t);
        uint32_t ds_frag[kNT][4];
        a_frags_from_c(ds_frag, acc_s);
        mma_tf32_a_frags_times_tile(acc_dk, ds_frag, sQ, kStride, g, t);
      }
      __syncthreads();  // every warp is done with this stage before it is refilled
    }
  }

  // Line 19: write dK_j (times the scale) and dV_j, staged as float, in the gradient dtype.
  // A key tile no query sees gets zeros.
  float* sOut = reinterpret_cast<float*>(smem_raw);
  auto write = [&](const float(&acc)[kDT][4], float mul, const TensorArg& out) {
    write_acc_tile<kBlockN, kD, T::kOutStride, kThreads>(sOut, acc, mul, out, args, b, n0, h_kv,
                                                         keys_valid, d, warp_row0 + g, t, tid);
    __syncthreads();
  };
  if constexpr (T::kDoDK) write(acc_dk, args.scale, args.dk);
  if constexpr (T::kDoDV) write(acc_dv, 1.0f, args.dv);
}

}  // namespace flashref::cuda::kernels

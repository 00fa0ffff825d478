// Backward, the pass that owns dK and dV (bf16 / f16, tensor cores): one block per (key tile,
// key/value head, batch), looping over the query heads of its group and, for each, over the
// query tiles that can see the key tile. Each dK/dV row is summed by one thread block in a
// fixed order (heads ascending, then query tiles ascending): no atomics, bitwise reproducible,
// and GQA/MQA's sum over the group is part of the same loop.
//
// Each warp owns 16 keys and works on transposed tiles, so that P^T and dS^T come out of one
// mma in exactly the register layout the next mma needs as its A operand (Alg. 2, key side):
//   S^T = K_j Q_i^T, P^T = 2^(s'^T - L'_i)     (line 11-12; -inf above the causal diagonal)
//   dV_j += P^T dO_i                           (line 13)
//   dP^T = V_j dO_i^T                          (line 14)
//   dS^T = P^T * (dP^T - D_i)                  (line 15)
//   dK_j += dS^T Q_i                           (line 17), and dK *= scale once at the end
// Q_i, dO_i, L'_i and D_i are double-buffered with cp.async. For large head dims the dV and dK
// halves run as two launches (kDoDV / kDoDK) so each fits in registers.
#pragma once

#include "kernels/args.hpp"
#include "kernels/causal.cuh"
#include "kernels/epilogue.cuh"
#include "kernels/fragment_softmax.cuh"
#include "kernels/mma_fragments.cuh"
#include "kernels/ptx.cuh"
#include "kernels/schedule.cuh"
#include "kernels/tile_io.cuh"

namespace flashref::cuda::kernels {

template <typename Element_, int kD_, int kBlockM_, int kNWarps_, bool kKVInRegs_, bool kDoDV_,
          bool kDoDK_>
struct BwdDkvMmaTraits {
  using Element = Element_;
  static constexpr int kD = kD_;
  static constexpr int kNWarps = kNWarps_;
  static constexpr int kBlockN = 16 * kNWarps;  // keys: one 16-row mma tile per warp
  static constexpr int kBlockM = kBlockM_;      // queries per step of the loop
  static constexpr bool kKVInRegs = kKVInRegs_;
  static constexpr bool kDoDV = kDoDV_, kDoDK = kDoDK_;
  static constexpr int kThreads = kNWarps * 32;
  static constexpr int kStride = kD + 8;
  static constexpr int kStageElems = 2 * kBlockM * kStride;  // Q_i and dO_i
  static constexpr int kElemBytes = (2 * kBlockN * kStride + 2 * kStageElems) * 2;
  static constexpr int kMainBytes = kElemBytes + 2 * 2 * kBlockM * 4;  // + L'_i and D_i, 2 stages
  static constexpr int kOutStride = kD + 4;
  static constexpr int kOutBytes = kBlockN * kOutStride * 4;
  static constexpr int kSmemBytes = kMainBytes > kOutBytes ? kMainBytes : kOutBytes;
  static_assert(kWorkspaceRowPad % kBlockM == 0, "workspace padding must cover a query tile");
  static_assert(kBlockM % 16 == 0 && kD % 16 == 0, "B_q and the head dim must be multiples of 16");
  static_assert(kElemBytes % 16 == 0, "float vectors after the tiles must stay 16-byte aligned");
  static_assert(kDoDV || kDoDK, "a pass must compute something");
};

template <typename T>
__global__ void __launch_bounds__(T::kThreads) bwd_dkdv_mma_kernel(const AttnArgs args) {
  using Element = typename T::Element;
  using M = Mma<Element>;
  constexpr int kD = T::kD, kBlockM = T::kBlockM, kBlockN = T::kBlockN;
  constexpr int kStride = T::kStride, kThreads = T::kThreads;
  constexpr int kNT = kBlockM / 8, kDT = kD / 8, kKS = kD / 16;

  extern __shared__ __align__(16) unsigned char smem_raw[];
  Element* sK = reinterpret_cast<Element*>(smem_raw);
  Element* sV = sK + kBlockN * kStride;
  Element* sQdO = sV + kBlockN * kStride;  // stage s: Q_i at sQdO + s * kStageElems, dO_i after
  float* sVec = reinterpret_cast<float*>(smem_raw + T::kElemBytes);  // stage s: L' then D

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
  const int a_row = (lane % 8) + ((lane / 8) % 2) * 8, a_col = (lane / 16) * 8;
  const int bn_row = (lane % 8) + (lane / 16) * 8, bn_col = ((lane / 8) % 2) * 8;
  const int bt_row = (lane % 8) + ((lane / 8) % 2) * 8, bt_col = (lane / 16) * 8;

  float acc_dk[T::kDoDK ? kDT : 1][4], acc_dv[T::kDoDV ? kDT : 1][4];
  zero_tiles(acc_dk);
  zero_tiles(acc_dv);

  if (total > 0) {
    // Alg. 2 line 7: K_j and V_j, kept for the whole block.
    load_tile_async<kBlockN, kD, kStride, kThreads>(sK, row_ptr<const Element>(args.k, b, n0, h_kv),
                                                    args.k.row_stride, keys_valid, d, tid);
    load_tile_async<kBlockN, kD, kStride, kThreads>(sV, row_ptr<const Element>(args.v, b, n0, h_kv),
                                                    args.v.row_stride, keys_valid, d, tid);
    cp_async_commit();

    // Line 10: Q_i, dO_i, L'_i, D_i of step `it` (query head, then query tile) into `stage`.
    auto load_q = [&](int it, int stage) {
      const int hq = h_kv * args.group + it / per_head;
      const int m0 = (m_begin + it % per_head) * kBlockM;
      Element* sQ = sQdO + stage * T::kStageElems;
      load_tile_async<kBlockM, kD, kStride, kThreads>(sQ, row_ptr<const Element>(args.q, b, m0, hq),
                                                      args.q.row_stride, args.S_q - m0, d, tid);
      load_tile_async<kBlockM, kD, kStride, kThreads>(sQ + kBlockM * kStride,
                                                      row_ptr<const Element>(args.dO, b, m0, hq),
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

    uint32_t k_frag[T::kKVInRegs ? kKS : 1][4], v_frag[T::kKVInRegs ? kKS : 1][4];
    if constexpr (T::kKVInRegs) {
      cp_async_wait<1>();
      __syncthreads();
#pragma unroll
      for (int ks = 0; ks < kKS; ++ks) {
        ldmatrix_x4(k_frag[ks], smem_addr(sK + (warp_row0 + a_row) * kStride + ks * 16 + a_col));
        ldmatrix_x4(v_frag[ks], smem_addr(sV + (warp_row0 + a_row) * kStride + ks * 16 + a_col));
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
      __syncthreads();
      const int m0 = (m_begin + it % per_head) * kBlockM;
      const Element* sQ = sQdO + stage * T::kStageElems;
      const Element* sdO = sQ + kBlockM * kStride;
      const float* sL2 = sVec + stage * 2 * kBlockM;
      const float* sD = sL2 + kBlockM;

      // Line 11: S^T = K_j Q_i^T; line 14: dP^T = V_j dO_i^T.
      float acc_s[kNT][4], acc_dp[T::kDoDK ? kNT : 1][4];
      zero_tiles(acc_s);
      if constexpr (T::kDoDK) zero_tiles(acc_dp);
#pragma unroll
      for (int ks = 0; ks < kKS; ++ks) {
        uint32_t ak[4], av[4];
        if constexpr (T::kKVInRegs) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            ak[e] = k_frag[ks][e];
            av[e] = v_frag[ks][e];
          }
        } else {
          ldmatrix_x4(ak, smem_addr(sK + (warp_row0 + a_row) * kStride + ks * 16 + a_col));
          if constexpr (T::kDoDK)
            ldmatrix_x4(av, smem_addr(sV + (warp_row0 + a_row) * kStride + ks * 16 + a_col));
        }
#pragma unroll
        for (int np = 0; np < kNT / 2; ++np) {
          uint32_t bq[4];
          ldmatrix_x4(bq, smem_addr(sQ + (np * 16 + bn_row) * kStride + ks * 16 + bn_col));
          M::run(acc_s[2 * np], ak, bq[0], bq[1]);
          M::run(acc_s[2 * np + 1], ak, bq[2], bq[3]);
          if constexpr (T::kDoDK) {
            uint32_t bdo[4];
            ldmatrix_x4(bdo, smem_addr(sdO + (np * 16 + bn_row) * kStride + ks * 16 + bn_col));
            M::run(acc_dp[2 * np], av, bdo[0], bdo[1]);
            M::run(acc_dp[2 * np + 1], av, bdo[2], bdo[3]);
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
        // Line 13: dV_j += P^T dO_i.
        uint32_t p_frag[kBlockM / 16][4];
        pack_a_frags<Element>(p_frag, acc_s);
        mma_a_frags_times_tile<Element, kBlockM / 16, kDT, kStride>(acc_dv, p_frag, sdO, bt_row,
                                                                    bt_col);
      }

      if constexpr (T::kDoDK) {
        // Line 15: dS^T = P^T * (dP^T - D_i); line 17: dK_j += dS^T Q_i.
        ds_transposed(acc_s, acc_dp, sD, args, has_single, m0, t);
        uint32_t ds_frag[kBlockM / 16][4];
        pack_a_frags<Element>(ds_frag, acc_s);
        mma_a_frags_times_tile<Element, kBlockM / 16, kDT, kStride>(acc_dk, ds_frag, sQ, bt_row,
                                                                    bt_col);
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

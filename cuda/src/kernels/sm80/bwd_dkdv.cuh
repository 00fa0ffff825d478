// Backward, the pass that owns dK and dV, on sm80 tensor cores (mma.sync; T::Ops is the
// operand policy: Sm80Fp16Ops<E> for bf16/f16, Sm80Tf32Ops for float32 with allow_tf32): one
// block per (key tile,
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
// P^T and dS^T are rounded to the operand type as they become A operands (dS^T from the
// float32 P^T). Q_i, dO_i, L'_i and D_i are double-buffered with cp.async. With Sm80Tf32Ops
// (kRoundsTiles) K_j, V_j and each stage of Q_i, dO_i are rounded to TF32 in shared memory once
// they land; L'_i and D_i are not matmul operands and stay float32. For large head dims the dV
// and dK halves run as two launches (kDoDV / kDoDK) so each fits in registers.
#pragma once

#include "kernels/common/args.hpp"
#include "kernels/common/causal.cuh"
#include "kernels/common/epilogue.cuh"
#include "kernels/common/fragment_softmax.cuh"
#include "kernels/common/ptx.cuh"
#include "kernels/common/schedule.cuh"
#include "kernels/common/tile_io.cuh"
#include "kernels/sm80/lane_at.cuh"

namespace flashref::cuda::kernels {

template <typename Ops_, int kD_, int kBlockM_, int kNWarps_, bool kKVInRegs_, bool kDoDV_,
          bool kDoDK_>
struct BwdDkvMmaTraits {
  using Ops = Ops_;  // operand policy: Sm80Fp16Ops<E> or Sm80Tf32Ops
  using Element = typename Ops::Element;
  static constexpr int kD = kD_;
  static constexpr int kNWarps = kNWarps_;
  static constexpr int kBlockN = 16 * kNWarps;  // keys: one 16-row mma tile per warp
  static constexpr int kBlockM = kBlockM_;      // queries per step of the loop
  static constexpr bool kKVInRegs = kKVInRegs_;
  static constexpr bool kDoDV = kDoDV_, kDoDK = kDoDK_;
  static constexpr int kThreads = kNWarps * 32;
  static constexpr int kStride = kD + Ops::kPad;
  static constexpr int kStageElems = 2 * kBlockM * kStride;  // Q_i and dO_i
  static constexpr int kElemBytes =
      (2 * kBlockN * kStride + 2 * kStageElems) * static_cast<int>(sizeof(Element));
  static constexpr int kMainBytes = kElemBytes + 2 * 2 * kBlockM * 4;  // + L'_i and D_i, 2 stages
  static constexpr int kOutStride = kD + 4;
  static constexpr int kOutBytes = kBlockN * kOutStride * 4;
  static constexpr int kSmemBytes = kMainBytes > kOutBytes ? kMainBytes : kOutBytes;
  static_assert(kWorkspaceRowPad % kBlockM == 0, "workspace padding must cover a query tile");
  static_assert(kBlockM % Ops::kK == 0 && kBlockM % Ops::kBN == 0 &&
                    kD % Ops::kHeadDimMultiple == 0,
                "B_q in whole mma steps; the head dim a multiple the operand policy can pad");
  static_assert(kElemBytes % 16 == 0, "float vectors after the tiles must stay 16-byte aligned");
  static_assert(kDoDV || kDoDK, "a pass must compute something");
};

template <typename T>
__global__ void __launch_bounds__(T::kThreads) bwd_dkdv_mma_kernel(const AttnArgs args) {
  using Ops = typename T::Ops;
  using Element = typename T::Element;
  constexpr int kD = T::kD, kBlockM = T::kBlockM, kBlockN = T::kBlockN;
  constexpr int kStride = T::kStride, kThreads = T::kThreads;
  constexpr int kNT = kBlockM / 8, kDT = kD / 8, kKS = kD / Ops::kK;
  constexpr int kKP = kBlockM / Ops::kK;  // A fragments of P^T and dS^T
  constexpr int kNB = Ops::kBN / 8;       // mma tiles one B load feeds

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
  const typename Ops::Lane lane_at(lane);  // the lane's fragment addresses

  float acc_dk[T::kDoDK ? kDT : 1][4], acc_dv[T::kDoDV ? kDT : 1][4];
  zero_tiles(acc_dk);
  zero_tiles(acc_dv);

  if (total > 0) {
    // Alg. 2 line 7: K_j and V_j, kept for the whole block. Only dK needs V_j; the bf16/f16
    // dV-only pass (d = 256) loads it anyway, as it always has (kept so that this kernel's
    // machine code did not move when the operand policies were merged; dropping the load is a
    // change to measure on its own).
    constexpr bool kLoadV = T::kDoDK || !Ops::kRoundsTiles;
    load_tile_async<kBlockN, kD, kStride, kThreads>(sK, row_ptr<const Element>(args.k, b, n0, h_kv),
                                                    args.k.row_stride, keys_valid, d, tid);
    if constexpr (kLoadV)
      load_tile_async<kBlockN, kD, kStride, kThreads>(
          sV, row_ptr<const Element>(args.v, b, n0, h_kv), args.v.row_stride, keys_valid, d, tid);
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

    if constexpr (Ops::kRoundsTiles) {
      // K_j (and V_j) have landed: round this thread's chunks; a barrier publishes them.
      cp_async_wait<1>();
      Ops::template round_tile<kBlockN, kD, kStride, kThreads>(sK, tid);
      if constexpr (T::kDoDK) Ops::template round_tile<kBlockN, kD, kStride, kThreads>(sV, tid);
    }
    uint32_t k_frag[T::kKVInRegs ? kKS : 1][4], v_frag[T::kKVInRegs && T::kDoDK ? kKS : 1][4];
    if constexpr (T::kKVInRegs) {
      if constexpr (!Ops::kRoundsTiles) cp_async_wait<1>();
      __syncthreads();
#pragma unroll
      for (int ks = 0; ks < kKS; ++ks) {
        Ops::load_a(k_frag[ks], FLASHREF_LANE_AT(sK, warp_row0, ks * Ops::kK, a));
        if constexpr (T::kDoDK)
          Ops::load_a(v_frag[ks], FLASHREF_LANE_AT(sV, warp_row0, ks * Ops::kK, a));
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
      Element* sQ = sQdO + stage * T::kStageElems;
      Element* sdO = sQ + kBlockM * kStride;
      Ops::template round_tile<kBlockM, kD, kStride, kThreads>(sQ, tid);
      Ops::template round_tile<kBlockM, kD, kStride, kThreads>(sdO, tid);
      __syncthreads();  // Q_i, dO_i (rounded), L'_i and D_i are visible to every warp
      const float* sL2 = sVec + stage * 2 * kBlockM;
      const float* sD = sL2 + kBlockM;

      // Line 11: S^T = K_j Q_i^T; line 14: dP^T = V_j dO_i^T. A policy whose fragment loads are
      // plain loads (kHoistsLoads) keeps the loop rolled when K and V are read from shared
      // memory: unrolled, every load of the tile would be hoisted into registers.
      float acc_s[kNT][4], acc_dp[T::kDoDK ? kNT : 1][4];
      zero_tiles(acc_s);
      if constexpr (T::kDoDK) zero_tiles(acc_dp);
#pragma unroll(T::kKVInRegs || !Ops::kHoistsLoads ? kKS : 1)
      for (int ks = 0; ks < kKS; ++ks) {
        uint32_t ak[4], av[4];
        if constexpr (T::kKVInRegs) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            ak[e] = k_frag[ks][e];
            if constexpr (T::kDoDK) av[e] = v_frag[ks][e];
          }
        } else {
          Ops::load_a(ak, FLASHREF_LANE_AT(sK, warp_row0, ks * Ops::kK, a));
          if constexpr (T::kDoDK) Ops::load_a(av, FLASHREF_LANE_AT(sV, warp_row0, ks * Ops::kK, a));
        }
#pragma unroll
        for (int nb = 0; nb < kNT / kNB; ++nb) {
          typename Ops::BFrag bq;
          Ops::load_b_rows(bq, FLASHREF_LANE_AT(sQ, nb * Ops::kBN, ks * Ops::kK, b));
          Ops::mma_group(acc_s, nb, ak, bq);
          if constexpr (T::kDoDK) {
            typename Ops::BFrag bdo;
            Ops::load_b_rows(bdo, FLASHREF_LANE_AT(sdO, nb * Ops::kBN, ks * Ops::kK, b));
            Ops::mma_group(acc_dp, nb, av, bdo);
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
      const bool has_single = tile_has_single_key_row(args, m0, kBlockM);
      p_transposed_from_scores(acc_s, sL2, args, needs_mask, has_single, n0, warp_row0 + g, m0, t);

      if constexpr (T::kDoDV) {
        // Line 13: dV_j += P^T dO_i, P^T rounded to the operand type.
        uint32_t p_frag[kKP][4];
        Ops::a_frags_from_c(p_frag, acc_s);
        Ops::template a_frags_times_tile<kKP, kDT, kStride>(acc_dv, p_frag, sdO, lane_at);
      }

      if constexpr (T::kDoDK) {
        // Line 15: dS^T = P^T * (dP^T - D_i); line 17: dK_j += dS^T Q_i.
        ds_transposed(acc_s, acc_dp, sD, args, has_single, m0, t);
        uint32_t ds_frag[kKP][4];
        Ops::a_frags_from_c(ds_frag, acc_s);
        Ops::template a_frags_times_tile<kKP, kDT, kStride>(acc_dk, ds_frag, sQ, lane_at);
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

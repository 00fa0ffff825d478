// Backward, the pass that owns dQ, on sm80 tensor cores (mma.sync; T::Ops is the operand
// policy: Sm80Fp16Ops<E> for bf16/f16, Sm80Tf32Ops for float32 with allow_tf32): one block per
// (query tile, head, batch), one loop over key tiles; every dQ row is summed by one thread
// block in a fixed order, so no atomics and bitwise reproducible results.
//
// Per key tile j (Alg. 2 lines 11-16 seen from the query side), each warp owning 16 rows:
//   S = Q_i K_j^T, s' = S * scale * log2(e)   (-inf where masked)
//   P = 2^(s' - L' )                           L' = L * log2(e) from the preprocess kernel
//   dP = dO_i V_j^T
//   dS = P * (dP - D_i)                        from the float32 P, rounded to the operand
//                                              type, kept in registers
//   dQ += dS K_j                               and dQ *= scale once at the end
// K_j and V_j are double-buffered with cp.async. With Sm80Tf32Ops (kRoundsTiles) Q_i, dO_i, K_j
// and V_j are rounded to TF32 in shared memory once they land; D comes from the preprocess in
// float32 from the unrounded O and dO, as the TF32 baseline forms it.
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

template <typename Ops_, int kD_, int kBlockN_, int kNWarps_, bool kQInRegs_>
struct BwdDqMmaTraits {
  using Ops = Ops_;  // operand policy: Sm80Fp16Ops<E> or Sm80Tf32Ops
  using Element = typename Ops::Element;
  static constexpr int kD = kD_;
  static constexpr int kNWarps = kNWarps_;
  static constexpr int kBlockM = 16 * kNWarps;  // one 16-row mma tile per warp
  static constexpr int kBlockN = kBlockN_;
  static constexpr bool kQInRegs = kQInRegs_;  // Q_i and dO_i fragments held in registers
  static constexpr int kThreads = kNWarps * 32;
  static constexpr int kStride = kD + Ops::kPad;
  static constexpr int kStageElems = 2 * kBlockN * kStride;  // K_j and V_j
  static constexpr int kMainBytes =
      (2 * kBlockM * kStride + 2 * kStageElems) * static_cast<int>(sizeof(Element));
  static constexpr int kOutStride = kD + 4;  // float staging of dQ
  static constexpr int kOutBytes = kBlockM * kOutStride * 4;
  static constexpr int kSmemBytes = kMainBytes > kOutBytes ? kMainBytes : kOutBytes;
  static_assert(kWorkspaceRowPad % kBlockM == 0, "workspace padding must cover a query tile");
  static_assert(kBlockN % Ops::kK == 0 && kBlockN % Ops::kBN == 0 &&
                    kD % Ops::kHeadDimMultiple == 0,
                "B_k in whole mma steps; the head dim a multiple the operand policy can pad");
};

template <typename T>
__global__ void __launch_bounds__(T::kThreads) bwd_dq_mma_kernel(const AttnArgs args) {
  using Ops = typename T::Ops;
  using Element = typename T::Element;
  constexpr int kD = T::kD, kBlockM = T::kBlockM, kBlockN = T::kBlockN;
  constexpr int kStride = T::kStride, kThreads = T::kThreads;
  constexpr int kNT = kBlockN / 8, kDT = kD / 8, kKS = kD / Ops::kK;
  constexpr int kKP = kBlockN / Ops::kK;  // A fragments of dS
  constexpr int kNB = Ops::kBN / 8;       // mma tiles one B load feeds

  extern __shared__ __align__(16) unsigned char smem_raw[];
  Element* sQ = reinterpret_cast<Element*>(smem_raw);
  Element* sdO = sQ + kBlockM * kStride;
  Element* sKV = sdO + kBlockM * kStride;  // stage s: K at sKV + s * kStageElems, V after it

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;
  const QueryTileSchedule<kBlockM, kBlockN> tile(args);
  const int b = tile.b, h = tile.h, row0 = tile.row0, rows_valid = tile.rows_valid;
  const int d = args.d;

  int n_end = ceil_div(args.S_k, kBlockN);
  if (args.causal) n_end = tile.causal_key_tiles_end(args, n_end);

  float acc_dq[kDT][4];
  zero_tiles(acc_dq);

  const int warp_row0 = warp * 16;
  const typename Ops::Lane lane_at(lane);  // the lane's fragment addresses

  if (n_end > 0) {
    const Element* k_head = row_ptr<const Element>(args.k, b, 0, tile.h_kv);
    const Element* v_head = row_ptr<const Element>(args.v, b, 0, tile.h_kv);
    auto load_kv = [&](int n, int stage) {
      const int n0 = n * kBlockN;
      Element* sK = sKV + stage * T::kStageElems;
      load_tile_async<kBlockN, kD, kStride, kThreads>(
          sK, k_head + static_cast<int64_t>(n0) * args.k.row_stride, args.k.row_stride,
          args.S_k - n0, d, tid);
      load_tile_async<kBlockN, kD, kStride, kThreads>(
          sK + kBlockN * kStride, v_head + static_cast<int64_t>(n0) * args.v.row_stride,
          args.v.row_stride, args.S_k - n0, d, tid);
    };
    // Alg. 2 line 10: Q_i, dO_i, and this tile's rows of L and D.
    load_tile_async<kBlockM, kD, kStride, kThreads>(sQ, row_ptr<const Element>(args.q, b, row0, h),
                                                    args.q.row_stride, rows_valid, d, tid);
    load_tile_async<kBlockM, kD, kStride, kThreads>(
        sdO, row_ptr<const Element>(args.dO, b, row0, h), args.dO.row_stride, rows_valid, d, tid);
    cp_async_commit();
    load_kv(n_end - 1, 0);
    cp_async_commit();

    const int64_t ws_row =
        (static_cast<int64_t>(b) * args.H + h) * args.S_q_pad + row0 + warp_row0 + g;
    float lse2[2], dsum[2];
    bool single[2];
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      lse2[hf] = args.lse2[ws_row + hf * 8];
      dsum[hf] = args.dsum[ws_row + hf * 8];
      single[hf] = sees_one_key(args, row0 + warp_row0 + g + hf * 8);
    }

    if constexpr (Ops::kRoundsTiles) {
      // Q_i and dO_i have landed (the K/V group may still be in flight): round this thread's
      // chunks; the first barrier of the loop (or the one below) publishes them.
      cp_async_wait<1>();
      Ops::template round_tile<kBlockM, kD, kStride, kThreads>(sQ, tid);
      Ops::template round_tile<kBlockM, kD, kStride, kThreads>(sdO, tid);
    }
    uint32_t q_frag[T::kQInRegs ? kKS : 1][4], do_frag[T::kQInRegs ? kKS : 1][4];
    if constexpr (T::kQInRegs) {
      if constexpr (!Ops::kRoundsTiles) cp_async_wait<1>();
      __syncthreads();
#pragma unroll
      for (int ks = 0; ks < kKS; ++ks) {
        Ops::load_a(q_frag[ks], FLASHREF_LANE_AT(sQ, warp_row0, ks * Ops::kK, a));
        Ops::load_a(do_frag[ks], FLASHREF_LANE_AT(sdO, warp_row0, ks * Ops::kK, a));
      }
    }

    int stage = 0;
    for (int n = n_end - 1; n >= 0; --n, stage ^= 1) {
      const int n0 = n * kBlockN;
      if (n > 0) {
        load_kv(n - 1, stage ^ 1);  // the next tile streams in while this one is computed
        cp_async_commit();
        cp_async_wait<1>();
      } else {
        cp_async_wait<0>();
      }
      if constexpr (Ops::kRoundsTiles) {
        Ops::template round_tile<kBlockN, kD, kStride, kThreads>(sKV + stage * T::kStageElems, tid);
        Ops::template round_tile<kBlockN, kD, kStride, kThreads>(
            sKV + stage * T::kStageElems + kBlockN * kStride, tid);
      }
      __syncthreads();  // K_j and V_j have landed (rounded) and are visible to every warp
      const Element* sK = sKV + stage * T::kStageElems;
      const Element* sV = sK + kBlockN * kStride;

      // Line 11: S = Q_i K_j^T; line 14: dP = dO_i V_j^T. A policy whose fragment loads are
      // plain loads (kHoistsLoads) keeps the loop rolled when Q and dO are read from shared
      // memory: unrolled, every load of the tile would be hoisted into registers.
      float acc_s[kNT][4], acc_dp[kNT][4];
      zero_tiles(acc_s);
      zero_tiles(acc_dp);
#pragma unroll(T::kQInRegs || !Ops::kHoistsLoads ? kKS : 1)
      for (int ks = 0; ks < kKS; ++ks) {
        uint32_t aq[4], ado[4];
        if constexpr (T::kQInRegs) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            aq[e] = q_frag[ks][e];
            ado[e] = do_frag[ks][e];
          }
        } else {
          Ops::load_a(aq, FLASHREF_LANE_AT(sQ, warp_row0, ks * Ops::kK, a));
          Ops::load_a(ado, FLASHREF_LANE_AT(sdO, warp_row0, ks * Ops::kK, a));
        }
#pragma unroll
        for (int nb = 0; nb < kNT / kNB; ++nb) {
          typename Ops::BFrag bk, bv;
          Ops::load_b_rows(bk, FLASHREF_LANE_AT(sK, nb * Ops::kBN, ks * Ops::kK, b));
          Ops::load_b_rows(bv, FLASHREF_LANE_AT(sV, nb * Ops::kBN, ks * Ops::kK, b));
          Ops::mma_group(acc_s, nb, aq, bk);
          Ops::mma_group(acc_dp, nb, ado, bv);
        }
      }

      // Line 12: P = exp(scale S - L) = 2^(s' - L'); line 15: dS = P * (dP - D).
      const bool needs_mask =
          n0 + kBlockN > args.S_k ||
          (args.causal && n0 + kBlockN - 1 > static_cast<int64_t>(row0) + args.causal_offset);
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        int limit = args.S_k;
        if (needs_mask && args.causal) {
          const int64_t last =
              static_cast<int64_t>(row0 + warp_row0 + g + hf * 8) + args.causal_offset;
          limit = static_cast<int>(max64(0, min64(limit, last + 1)));
        }
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            const int e = hf * 2 + c;
            float x = acc_s[nt][e] * args.scale_log2 - lse2[hf];
            if (needs_mask && n0 + nt * 8 + 2 * t + c >= limit) x = -INFINITY;
            acc_s[nt][e] = single[hf] ? 0.0f : fast_exp2(x) * (acc_dp[nt][e] - dsum[hf]);
          }
      }
      // Line 16: dQ_i += dS K_j, dS rounded to the operand type (K_j read transposed: keys are
      // the reduction dim).
      uint32_t ds_frag[kKP][4];
      Ops::a_frags_from_c(ds_frag, acc_s);
      Ops::template a_frags_times_tile<kKP, kDT, kStride>(acc_dq, ds_frag, sK, lane_at);
      __syncthreads();  // every warp is done with this stage before it is refilled
    }
  }

  // dQ = scale * dS K, staged as float and written in the gradient dtype.
  write_dq_tile<kBlockM, kD, T::kOutStride, kThreads>(reinterpret_cast<float*>(smem_raw), acc_dq,
                                                      args, b, row0, h, rows_valid, d,
                                                      warp_row0 + g, t, tid);
}

}  // namespace flashref::cuda::kernels

// Backward on Hopper (sm_90a), the pass that owns dQ: Alg. 2 from the query side on wgmma (the
// two-pass backward: this pass and bwd_dkdv.cuh read the same inputs and write disjoint
// outputs, so neither needs atomics and both are deterministic).
//
// Grid and order as the forward (QueryTileSchedule's sectioned order): one block per (query
// tile, head, batch).
// Warpgroup 0 is the producer: one thread loads Q_i and dO_i, then K_j and V_j of every key
// tile the block sees into the next free stage. Warpgroups 1 and 2 are the consumers, 64 query
// rows each, holding L'_i and D_i of their rows in registers:
//   S = Q_i K_j^T, dP = dO_i V_j^T     wgmma m64n{B_k}k16, both from shared memory (lines 11, 14)
//   P = 2^(s' - L'_i)                  line 12; 0 above the causal diagonal and past S_k
//   dS = P * (dP - D_i)                line 15
//   dQ_i += dS K_j                     line 16; dS from registers, K MN-major; dQ *= scale at the end
#pragma once

#include <cuda.h>

#include "kernels/common/args.hpp"
#include "kernels/common/causal.cuh"
#include "kernels/common/ptx.cuh"
#include "kernels/common/schedule.cuh"
#include "kernels/common/tile_io.cuh"
#include "kernels/sm90/bwd_common.cuh"
#include "kernels/sm90/hopper.cuh"
#include "kernels/sm90/wgmma.cuh"

namespace flashref::cuda::kernels::sm90 {

template <typename Element_, int kD_, int kStages_, int kBlockN_>
struct BwdDqTraits {
  using Element = Element_;
  static constexpr int kD = kD_;
  static constexpr int kStages = kStages_;  // (K_j, V_j) stages
  static constexpr int kConsumers = 2;      // warpgroups of 64 query rows
  static constexpr int kBlockM = 64 * kConsumers;  // B_q
  static constexpr int kBlockN = kBlockN_;         // B_k
  static constexpr int kThreads = 128 * (1 + kConsumers);
  static constexpr int kColBlocks = kD / kBlockCols;
  static constexpr int kQBytes = kBlockM * kD * 2, kKVBytes = kBlockN * kD * 2;
  static constexpr int kTileBytes = 2 * kQBytes + 2 * kStages * kKVBytes;
  static constexpr int kOutBytes = kBlockM * (kD + 4) * 4;
  static constexpr int kBodyBytes = kTileBytes > kOutBytes ? kTileBytes : kOutBytes;
  static constexpr int kSmemBytes = kBodyBytes + kSwizzleAtom + 8 * (1 + 3 * kStages);
  static constexpr int kProducerRegs = 40, kConsumerRegs = 232;
  static_assert(setmaxnreg_fits(kProducerRegs, kConsumerRegs, kConsumers),
                "setmaxnreg: the consumers' registers come from those the producer gives back");
  static_assert(kD % kBlockCols == 0, "the sm90 backward is compiled for d = 64 and 128");
  static_assert(kWorkspaceRowPad % kBlockM == 0, "workspace padding must cover a query tile");
};

template <typename T>
__global__ void __launch_bounds__(T::kThreads, 1)
    bwd_dq_wgmma_kernel(const __grid_constant__ CUtensorMap tmap_q,
                        const __grid_constant__ CUtensorMap tmap_k,
                        const __grid_constant__ CUtensorMap tmap_v,
                        const __grid_constant__ CUtensorMap tmap_do, const AttnArgs args) {
  using Element = typename T::Element;
  constexpr int kD = T::kD, kBlockM = T::kBlockM, kBlockN = T::kBlockN, kStages = T::kStages;
  extern __shared__ unsigned char smem_raw[];
  const uint32_t base = (smem_addr(smem_raw) + kSwizzleAtom - 1) & ~uint32_t(kSwizzleAtom - 1);
  unsigned char* base_ptr = smem_raw + (base - smem_addr(smem_raw));
  const uint32_t sQ = base, sdO = base + T::kQBytes;
  auto sK = [&](int st) { return base + 2 * T::kQBytes + st * 2 * T::kKVBytes; };
  auto sV = [&](int st) { return sK(st) + T::kKVBytes; };
  const uint32_t bar_q = base + T::kBodyBytes;
  auto bar_k = [&](int st) { return bar_q + 8 * (1 + st); };
  auto bar_v = [&](int st) { return bar_q + 8 * (1 + kStages + st); };
  auto bar_empty = [&](int st) { return bar_q + 8 * (1 + 2 * kStages + st); };

  const int tid = threadIdx.x, wg = tid / 128;
  const QueryTileSchedule<kBlockM, kBlockN> tile(args, static_cast<int>(blockIdx.x),
                                                  ceil_div(args.S_q, kBlockM));
  const int b = tile.b, h = tile.h, row0 = tile.row0, rows_valid = tile.rows_valid;
  int n_end = ceil_div(args.S_k, kBlockN);
  if (args.causal) n_end = tile.causal_key_tiles_end(args, n_end);

  if (tid == 0) {
    mbar_init(bar_q, 1);
    for (int st = 0; st < kStages; ++st) {
      mbar_init(bar_k(st), 1);
      mbar_init(bar_v(st), 1);
      mbar_init(bar_empty(st), 128 * T::kConsumers);
    }
    mbar_init_fence();
  }
  __syncthreads();

  if (wg == 0) {  // the producer
    setmaxnreg_dec<T::kProducerRegs>();
    if (tid == 0 && n_end > 0) {
      mbar_expect_tx(bar_q, 2 * T::kQBytes);  // Alg. 2 line 10: Q_i and dO_i
#pragma unroll
      for (int cb = 0; cb < T::kColBlocks; ++cb) {
        tma_load_4d(sQ + cb * (kBlockM * kSwizzleBytes), &tmap_q, bar_q, cb * kBlockCols, row0, h,
                    b);
        tma_load_4d(sdO + cb * (kBlockM * kSwizzleBytes), &tmap_do, bar_q, cb * kBlockCols, row0,
                    h, b);
      }
      for (int n = 0; n < n_end; ++n) {  // line 7, for every key tile, into the next free stage
        const int st = n % kStages;
        mbar_wait(bar_empty(st), ((n / kStages) & 1) ^ 1);
        mbar_expect_tx(bar_k(st), T::kKVBytes);
#pragma unroll
        for (int cb = 0; cb < T::kColBlocks; ++cb)
          tma_load_4d(sK(st) + cb * (kBlockN * kSwizzleBytes), &tmap_k, bar_k(st),
                      cb * kBlockCols, n * kBlockN, tile.h_kv, b);
        mbar_expect_tx(bar_v(st), T::kKVBytes);
#pragma unroll
        for (int cb = 0; cb < T::kColBlocks; ++cb)
          tma_load_4d(sV(st) + cb * (kBlockN * kSwizzleBytes), &tmap_v, bar_v(st),
                      cb * kBlockCols, n * kBlockN, tile.h_kv, b);
      }
    }
    return;
  }

  setmaxnreg_inc<T::kConsumerRegs>();
  const int c = wg - 1, ctid = tid - 128, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int lane_row = c * 64 + ((tid % 128) / 32) * 16 + g;  // rows lane_row (+ 8) of the tile
  constexpr int kNT = kBlockN / 8;

  // Per row: L' (+inf in the workspace's padding, so P = 0 there), D, the keys it sees (keys <
  // limit), and whether it sees a single key (P = 1 and dS = 0 exactly there).
  float row_l2[2], row_d[2];
  int limit[2];
  bool single[2];
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    const int r = row0 + lane_row + hf * 8;
    const int64_t ws = (static_cast<int64_t>(b) * args.H + h) * args.S_q_pad + r;
    row_l2[hf] = args.lse2[ws];
    row_d[hf] = args.dsum[ws];
    limit[hf] = args.causal
                    ? static_cast<int>(max64(0, min64(args.S_k, last_visible_key(args, r) + 1)))
                    : args.S_k;
    single[hf] = sees_one_key(args, r);
  }

  float acc_dq[kD / 2];
#pragma unroll
  for (int i = 0; i < kD / 2; ++i) acc_dq[i] = 0.0f;

  auto issue_scores = [&](float (&acc)[kBlockN / 2], uint32_t rows, uint32_t cols) {
#pragma unroll
    for (int ks = 0; ks < kD / 16; ++ks) {
      const uint32_t blk = ks / 4, k_bytes = (ks % 4) * 32;
      const uint64_t a = make_smem_desc(
          rows + blk * (kBlockM * kSwizzleBytes) + c * (64 * kSwizzleBytes) + k_bytes, 16,
          kSwizzleAtom);
      const uint64_t bk =
          make_smem_desc(cols + blk * (kBlockN * kSwizzleBytes) + k_bytes, 16, kSwizzleAtom);
      WgmmaSS<Element, kBlockN>::run(acc, a, bk, ks > 0 ? 1 : 0);
    }
  };

  if (n_end > 0) {
    mbar_wait(bar_q, 0);
    for (int n = 0; n < n_end; ++n) {
      const int st = n % kStages, n0 = n * kBlockN;
      float acc_s[kBlockN / 2], acc_dp[kBlockN / 2];
      mbar_wait(bar_k(st), (n / kStages) & 1);
      mbar_wait(bar_v(st), (n / kStages) & 1);
      wgmma_fence();
      issue_scores(acc_s, sQ, sK(st));
      issue_scores(acc_dp, sdO, sV(st));
      wgmma_commit();
      wgmma_wait<0>();
      fence_registers(acc_s);
      fence_registers(acc_dp);

      // Lines 12 and 15: P = 2^(s' - L'), dS = P * (dP - D), with keys past S_k and above the
      // diagonal at P = 0. Only tiles that cross either compare indices.
      const bool needs_mask =
          n0 + kBlockN > args.S_k ||
          (args.causal && n0 + kBlockN - 1 > static_cast<int64_t>(row0) + args.causal_offset);
#pragma unroll
      for (int i = 0; i < kNT; ++i)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int idx = 4 * i + 2 * hf + e;
            float p = fast_exp2(acc_s[idx] * args.scale_log2 - row_l2[hf]);
            if (needs_mask && n0 + 8 * i + 2 * t + e >= limit[hf]) p = 0.0f;
            acc_s[idx] = single[hf] ? 0.0f : p * (acc_dp[idx] - row_d[hf]);
          }
      uint32_t ds_frag[kBlockN / 16][4];
#pragma unroll
      for (int kk = 0; kk < kBlockN / 16; ++kk)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          ds_frag[kk][e] = pack_pair<Element>(acc_s[8 * kk + 2 * e], acc_s[8 * kk + 2 * e + 1]);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kBlockN / 16; ++kk) {  // line 16: dQ_i += dS K_j
        const uint64_t bk = make_smem_desc(sK(st) + kk * (16 * kSwizzleBytes),
                                           kBlockN * kSwizzleBytes, kSwizzleAtom);
        WgmmaRS<Element, kD>::run(acc_dq, ds_frag[kk], bk, 1);
      }
      wgmma_commit();
      wgmma_wait<0>();
      fence_registers(acc_dq);
      mbar_arrive(bar_empty(st));
    }
  }

  // dQ_i = scale * (dS K), in the gradient dtype (zeros for a tile that sees no key).
  named_bar_sync(1, 128 * T::kConsumers);
  float* sOut = reinterpret_cast<float*>(base_ptr);
  store_consumer_tile<kBlockM, kD, 128 * T::kConsumers>(
      sOut, acc_dq, args.scale, args.dq, args.grad_code, row_offset(args.dq, b, row0, h),
      rows_valid, args.d, lane_row, t, ctid, 1);
}

}  // namespace flashref::cuda::kernels::sm90

// The dQ pass of exact float32's backward on Hopper (the sm90_3xtf32 family): Algorithm 2's
// lines 11, 12, 14, 15 and 16 for one query tile, as 3xTF32 on TF32 wgmma, judged by the exact
// float32 rule as the FFMA kernels are. The mirror of bwd_dkdv_3xtf32.cuh: the block keeps its
// query tile's halves still and streams the key tiles raw (bwd_3xtf32_steps.cuh):
//   S^T = K_j Q_i^T       A = K_j's rows;           B = Q_i's halves (made once per block)
//   dP^T = V_j dO_i^T     A = V_j's rows;           B = dO_i's halves, laid out as Q_i's
//   dQ_i^T += K_j^T dS^T  A = K_j read transposed;  B = dS's halves, written by the consumers
// Shared memory at d = 128 (B_q = 32 queries, B_k = 64 keys): Q_i's and dO_i's halves 64 KB,
// two stages of raw K_j and V_j 128 KB, dS's halves 16 KB: one consumer warpgroup. The key
// tiles are walked from the last (the masked ones first), as the ffma dQ pass walks them.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <type_traits>

#include "kernels/common/args.hpp"
#include "kernels/common/causal.cuh"
#include "kernels/common/ptx.cuh"
#include "kernels/common/schedule.cuh"
#include "kernels/common/tile_io.cuh"
#include "kernels/sm90/bwd_3xtf32_steps.cuh"
#include "kernels/sm90/bwd_common.cuh"
#include "kernels/sm90/hopper.cuh"
#include "kernels/sm90/tf32_tiles.cuh"

namespace flashref::cuda::kernels::sm90 {

template <int kD_>
struct BwdDq3xTf32Traits {
  using Element = float;
  static constexpr int kD = kD_;
  static constexpr int kBlockM = 32;  // B_q: the still tile, the products' N
  static constexpr int kBlockN = 64;  // B_k: a step's keys, S^T's wgmma rows
  static constexpr int kStages = 2;
  static constexpr int kThreads = 256;     // the loading warpgroup and the consumer warpgroup
  static constexpr int kMTiles = kD / 64;  // dQ^T's 64-row wgmma tiles
  static constexpr int kHalfBytes = kBlockM * kD * 4;           // a half of Q_i or dO_i
  static constexpr int kRawBytes = kBlockN * kD * 4;            // K_j or V_j
  static constexpr int kGradHalfBytes = kBlockM * kBlockN * 4;  // a half of dS
  // Q big, Q small, dO big, dO small; per stage K_j, V_j; dS big, small.
  static constexpr int kTileBytes = 4 * kHalfBytes + kStages * 2 * kRawBytes + 2 * kGradHalfBytes;
  // Barriers: Q_i's and dO_i's raw tiles; per stage full and empty.
  static constexpr int kSmemBytes = kTileBytes + kSwizzleAtom + 8 * (1 + 2 * kStages);
  static constexpr Tf32Split kSplit = Tf32Split::rounded_finite;
  // The k-steps of a group summed from zero, in S^T and dP^T (of the head dim) and in dQ^T (of
  // the keys). Two groups are in flight, each with its A fragments live: at d = 128 ptxas fits
  // 1 and 4 in 254 registers with no spill, and spilled 32 bytes at 2 and 2.
  static constexpr int kScoreGroupSteps = kD == 128 ? 1 : 4;
  static constexpr int kGradGroupSteps = kD == 128 ? 4 : 4;
  static_assert(kD == 64 || kD == 128, "compiled for d = 64 and 128");
  static_assert(kHalfBytes <= kRawBytes, "Q_i and dO_i land raw in a stage's K_j and V_j");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory past the H100/H200 block limit");
};

template <typename T>
__global__ void __launch_bounds__(T::kThreads, 1)
    bwd_dq_3xtf32_kernel(const __grid_constant__ CUtensorMap tmap_q,
                         const __grid_constant__ CUtensorMap tmap_k,
                         const __grid_constant__ CUtensorMap tmap_v,
                         const __grid_constant__ CUtensorMap tmap_do, const AttnArgs args) {
  constexpr int kD = T::kD, kBlockM = T::kBlockM, kBlockN = T::kBlockN, kStages = T::kStages;
  constexpr int kMTiles = T::kMTiles, kHalf = T::kHalfBytes, kRaw = T::kRawBytes;
  constexpr int kGrad = T::kGradHalfBytes;
  constexpr int kN = kBlockM / 2;  // a thread's accumulator registers of a 64 x B_q product
  extern __shared__ unsigned char smem_raw[];
  const uint32_t base = (smem_addr(smem_raw) + kSwizzleAtom - 1) & ~uint32_t(kSwizzleAtom - 1);
  const uint32_t sQBig = base, sQSmall = base + kHalf, sdOBig = base + 2 * kHalf,
                 sdOSmall = base + 3 * kHalf;
  auto sK = [&](int st) { return base + 4 * kHalf + st * 2 * kRaw; };
  auto sV = [&](int st) { return sK(st) + kRaw; };
  const uint32_t sdSBig = base + 4 * kHalf + kStages * 2 * kRaw, sdSSmall = sdSBig + kGrad;
  const uint32_t bar_q = base + T::kTileBytes;
  auto bar_full = [&](int st) { return bar_full_of(bar_q, st); };

  const QueryTileSchedule<kBlockM, kBlockN> tile(args);
  const int n_blocks = ceil_div(args.S_k, kBlockN);
  const int n_end = args.causal ? tile.causal_key_tiles_end(args, n_blocks) : n_blocks;

  const int tid = threadIdx.x, wg = tid / 128;
  if (tid == 0) init_pass_barriers<kStages>(bar_q);
  __syncthreads();

  // Alg. 2 line 8 (the order of the dQ pass): K_j and V_j of step `it`, key tile n_end - 1 - it.
  auto load_step = [&](int it) {
    const int st = it % kStages, n0 = (n_end - 1 - it) * kBlockN;
    mbar_expect_tx(bar_full(st), 2 * kRaw);
    tma_load_f32_pair<kBlockN, kD>(sK(st), &tmap_k, sV(st), &tmap_v, bar_full(st), n0, tile.h_kv,
                                   tile.b);
  };

  // Q_i and dO_i, landed raw in stage 1's tiles and split by every thread into their halves,
  // while stage 0 loads.
  if (n_end > 0) {
    if (tid == 0) {
      mbar_expect_tx(bar_q, 2 * kHalf);
      tma_load_f32_pair<kBlockM, kD>(sK(1), &tmap_q, sV(1), &tmap_do, bar_q, tile.row0, tile.h,
                                     tile.b);
      load_step(0);
    }
    split_still_tiles<kBlockM, kD, T::kSplit, T::kThreads>(bar_q, sK(1), sQBig, sQSmall, sV(1),
                                                           sdOBig, sdOSmall, tid);
  }
  __syncthreads();  // the halves are written; stage 1 is free

  if (wg == 0) {
    if (tid == 0) load_steps<kStages>(bar_q, n_end, load_step);
    return;
  }

  const int ctid = tid - 128, w = ctid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int r_lo = 16 * w + g;      // S^T's rows (keys) r_lo and r_lo + 8
  const int col0 = 16 * w + 2 * g;  // dQ^T's rows: head-dim col0 and col0 + 1
  float acc_dq[kMTiles][kN];
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int i = 0; i < kN; ++i) acc_dq[mt][i] = 0.0f;

  // The thread's queries (S^T's columns 8i + 2t + e, element 4i + 2hf + e): their L (natural
  // log, +inf past S_q), D, and whether they see one key (sees_one_key: P = 1, dS = 0).
  const int64_t ws = (static_cast<int64_t>(tile.b) * args.H + tile.h) * args.S_q_pad + tile.row0;
  float lse[kBlockM / 4], dsum[kBlockM / 4];
#pragma unroll
  for (int i = 0; i < kBlockM / 8; ++i)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      lse[2 * i + e] = args.lse2[ws + 8 * i + 2 * t + e];
      dsum[2 * i + e] = args.dsum[ws + 8 * i + 2 * t + e];
    }
  const bool tile_single = tile_has_single_key_row(args, tile.row0, kBlockM);

  const uint64_t desc_q_big = make_smem_desc(sQBig, 16, kSwizzleAtom),
                 desc_q_small = make_smem_desc(sQSmall, 16, kSwizzleAtom),
                 desc_do_big = make_smem_desc(sdOBig, 16, kSwizzleAtom),
                 desc_do_small = make_smem_desc(sdOSmall, 16, kSwizzleAtom),
                 desc_ds_big = make_smem_desc(sdSBig, 16, kSwizzleAtom),
                 desc_ds_small = make_smem_desc(sdSSmall, 16, kSwizzleAtom);

  // One step, `special` when its key tile passes S_k or crosses the causal diagonal, or the
  // query tile holds a query that sees one key: the other steps run no index math.
  auto step = [&](int it, auto special) {
    const int st = it % kStages, n0 = (n_end - 1 - it) * kBlockN;
    mbar_wait(bar_full(st), (it / kStages) & 1);

    // Lines 11 and 14, transposed: S^T = K_j Q_i^T, dP^T = V_j dO_i^T.
    constexpr int kGs = T::kScoreGroupSteps, kDGroups = kD / (8 * kGs);
    float acc_s[kN], acc_dp[kN];
    run_product_groups<2 * kDGroups, kN>(
        [&](float(&part)[kN], int grp) {
          const bool is_s = grp < kDGroups;
          issue_split_group<kGs, kBlockN, kBlockM, false, T::kSplit>(
              part, is_s ? sK(st) : sV(st), r_lo, kGs * (is_s ? grp : grp - kDGroups), t,
              is_s ? desc_q_big : desc_do_big, is_s ? desc_q_small : desc_do_small);
        },
        [&](float(&part)[kN], int grp) {
          float* acc = grp < kDGroups ? acc_s : acc_dp;
          const bool first = grp == 0 || grp == kDGroups;
#pragma unroll
          for (int i = 0; i < kN; ++i) acc[i] = first ? part[i] : acc[i] + part[i];
        });

    // Lines 12 and 15: P^T = exp(scale S^T - L), dS^T = P^T (dP^T - D), written split as dS's
    // halves (queries x keys, K-major). Keys past S_k and above the diagonal get P = 0.
#pragma unroll
    for (int i = 0; i < kBlockM / 8; ++i)
#pragma unroll
      for (int hf = 0; hf < 2; ++hf)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int idx = 4 * i + 2 * hf + e, c = 8 * i + 2 * t + e, r = r_lo + 8 * hf;
          float x = __fmul_rn(acc_s[idx], args.scale) - lse[2 * i + e];  // as the forward
          float ds;
          if constexpr (decltype(special)::value) {
            const int key = n0 + r;
            if (key >= args.S_k ||
                (args.causal && key > static_cast<int64_t>(tile.row0 + c) + args.causal_offset))
              x = -INFINITY;
            ds = tile_single && sees_one_key(args, tile.row0 + c)
                     ? 0.0f
                     : expf(x) * (acc_dp[idx] - dsum[2 * i + e]);
          } else {
            ds = expf(x) * (acc_dp[idx] - dsum[2 * i + e]);
          }
          store_split_transposed<kBlockM, T::kSplit>(sdSBig, sdSSmall, r, c, ds);
        }
    fence_proxy_async_shared();
    named_bar_sync(1, 128);  // dS's halves are written

    // Line 16: dQ_i^T += K_j^T dS^T, per 64 head-dim rows, in groups of keys.
    constexpr int kGg = T::kGradGroupSteps, kKGroups = kBlockN / (8 * kGg);
    run_product_groups<kMTiles * kKGroups, kN>(
        [&](float(&part)[kN], int grp) {
          issue_split_group<kGg, kBlockN, kBlockM, true, T::kSplit>(
              part, sK(st), 64 * (grp / kKGroups) + col0, kGg * (grp % kKGroups), t, desc_ds_big,
              desc_ds_small);
        },
        [&](float(&part)[kN], int grp) {
#pragma unroll
          for (int i = 0; i < kN; ++i) acc_dq[grp / kKGroups][i] += part[i];
        });
    mbar_arrive(bar_empty_of<kStages>(bar_q, st));  // K_j and V_j are read
  };

  // The special steps come first: the last key tile is the partial one and the one that
  // crosses the diagonal.
  auto needs_mask = [&](int it) {
    const int n0 = (n_end - 1 - it) * kBlockN;
    return n0 + kBlockN > args.S_k ||
           (args.causal && n0 + kBlockN - 1 > static_cast<int64_t>(tile.row0) + args.causal_offset);
  };
  int it = 0;
  for (; it < n_end && (tile_single || needs_mask(it)); ++it) step(it, std::true_type{});
  for (; it < n_end; ++it) step(it, std::false_type{});

  // dQ_i (times the scale): queries < S_q, head-dim columns < d; zeros for a tile that sees no
  // key.
  store_transposed_gradient<kMTiles, kBlockM>(acc_dq, args.scale, args.dq, args.grad_code,
                                              row_offset(args.dq, tile.b, tile.row0, tile.h),
                                              tile.rows_valid, args.d, col0, t);
}

}  // namespace flashref::cuda::kernels::sm90

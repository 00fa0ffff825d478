// The dK/dV pass of exact float32's backward on Hopper (the sm90_3xtf32 family): Algorithm 2's
// lines 10-17 but dQ's, for one key tile, as 3xTF32 on TF32 wgmma, judged by the exact float32
// rule as the FFMA kernels are. Its mirror, the dQ pass, is bwd_dq_3xtf32.cuh (or the ffma
// family's, kernels/ffma/bwd.cuh; kernels/sm90/launch.cuh chooses).
//
// TF32 wgmma reads its shared-memory operands K-major only, so a product that reduces over the
// queries (dV_j += P^T dO_i, dK_j += dS^T Q_i) would need dO_i and Q_i transposed and split in
// shared memory: twice the room of the raw tiles. Instead the block keeps its key tile's halves
// still, computes the gradients transposed, and takes the query tiles as A operands from
// registers, read from the raw tiles and split there (bwd_3xtf32_steps.cuh):
//   S = Q_i K_j^T          A = Q_i's rows;           B = K_j's halves (made once per block)
//   dP = dO_i V_j^T        A = dO_i's rows;          B = V_j's halves, laid out as K_j's
//   dV_j^T += dO_i^T P     A = dO_i read transposed; B = P^T's halves, written by the consumers
//   dK_j^T += Q_i^T dS     A = Q_i read transposed;  B = dS^T's halves, likewise
// A thread's rows g and g + 8 of a transposed A are head-dim columns 2g and 2g + 1 of its warp's
// 16, so that its two values of a query are one 8-byte load; the epilogue writes them back so.
// Every product sums its three terms per k-step (small ones first) in an accumulator started
// from zero, in groups of the traits' sizes, and adds each group to its float32 result with an
// FADD, as fwd_3xtf32.cuh does and for its reason (the tensor cores' sums truncate).
//
// Block: warpgroup 0 loads (one thread: Q_i, dO_i by the TMA, L_i and D_i by bulk copies, two
// stages); warpgroup 1 computes. At d = 128 shared memory holds K_j's and V_j's halves (64 KB),
// two stages of Q_i and dO_i (128 KB) and P^T's and dS^T's halves (32 KB): no room for a second
// consumer warpgroup. The block walks the query heads of its key/value head, then the query
// tiles that see its keys, ascending (the ffma kernel's order).
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
#include "kernels/sm90/wgmma.cuh"

namespace flashref::cuda::kernels::sm90 {

// kScoreSteps_, kGradSteps_: the k-steps (of 8 reduction indices) of a group summed from zero in
// S's and dP's products, and in dV's and dK's (0: the head dim's default, below).
template <int kD_, int kScoreSteps_ = 0, int kGradSteps_ = 0>
struct BwdDkv3xTf32Traits {
  using Element = float;
  static constexpr int kD = kD_;
  static constexpr int kBlockM = 64;  // B_q: a step's queries, S's wgmma rows
  static constexpr int kBlockN = 32;  // B_k
  static constexpr int kStages = 2;
  static constexpr int kThreads = 256;     // the loading warpgroup and the consumer warpgroup
  static constexpr int kMTiles = kD / 64;  // the transposed gradients' 64-row wgmma tiles
  static constexpr int kHalfBytes = kBlockN * kD * 4;           // a half of K_j or V_j
  static constexpr int kRawBytes = kBlockM * kD * 4;            // Q_i or dO_i
  static constexpr int kGradHalfBytes = kBlockN * kBlockM * 4;  // a half of P^T or dS^T
  static constexpr int kVecBytes = kBlockM * 4;                 // L_i or D_i
  // K big, K small, V big, V small; per stage Q_i, dO_i; P^T big, small, dS^T big, small; per
  // stage L_i, D_i (last, so that every tile starts on a swizzle atom).
  static constexpr int kTileBytes =
      4 * kHalfBytes + kStages * 2 * kRawBytes + 4 * kGradHalfBytes + kStages * 2 * kVecBytes;
  // Barriers: K_j's and V_j's raw tiles; per stage full and empty.
  static constexpr int kSmemBytes = kTileBytes + kSwizzleAtom + 8 * (1 + 2 * kStages);
  static constexpr Tf32Split kSplit = Tf32Split::rounded_finite;
  // Two groups of each product are in flight, each with its A fragments live: at d = 128,
  // groups of 4 k-steps spilled 104 bytes (ptxas, 255 registers); 2 in S and dP and 2 in dV and
  // dK spilled 8 until the epilogue formed its indices late (below), and are d = 128's default
  // since run 35b: its backward 4.25-4.26 ms against 4.49-4.51 for (1, 2), -5% (H100, S = 16k,
  // causal; run 34a -5% on the H200 with the spill).
  static constexpr int kScoreGroupSteps = kScoreSteps_ > 0 ? kScoreSteps_ : (kD == 128 ? 2 : 4);
  static constexpr int kGradGroupSteps = kGradSteps_ > 0 ? kGradSteps_ : (kD == 128 ? 2 : 4);
  // Whether the epilogue forms its indices again (opaque) rather than keep them from before the
  // main loop: at d = 128 with score groups of 2 k-steps or more, ptxas spilled them at 255
  // registers ((2, 2): 8 bytes, the whole of its spill). d = 64 keeps its code as it was.
  static constexpr bool kLateStoreIndices = kD == 128 && kScoreGroupSteps > 1;
  static_assert(kD == 64 || kD == 128, "compiled for d = 64 and 128");
  static_assert(kHalfBytes <= kRawBytes, "K_j and V_j land raw in a stage's Q_i and dO_i");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory past the H100/H200 block limit");
};

template <typename T>
__global__ void __launch_bounds__(T::kThreads, 1)
    bwd_dkdv_3xtf32_kernel(const __grid_constant__ CUtensorMap tmap_q,
                           const __grid_constant__ CUtensorMap tmap_k,
                           const __grid_constant__ CUtensorMap tmap_v,
                           const __grid_constant__ CUtensorMap tmap_do, const AttnArgs args) {
  constexpr int kD = T::kD, kBlockM = T::kBlockM, kBlockN = T::kBlockN, kStages = T::kStages;
  constexpr int kMTiles = T::kMTiles, kHalf = T::kHalfBytes, kRaw = T::kRawBytes;
  constexpr int kGrad = T::kGradHalfBytes, kVec = T::kVecBytes;
  constexpr int kN = kBlockN / 2;  // a thread's accumulator registers of a 64 x B_k product
  extern __shared__ unsigned char smem_raw[];
  const uint32_t base = (smem_addr(smem_raw) + kSwizzleAtom - 1) & ~uint32_t(kSwizzleAtom - 1);
  const uint32_t sKBig = base, sKSmall = base + kHalf, sVBig = base + 2 * kHalf,
                 sVSmall = base + 3 * kHalf;
  auto sQ = [&](int st) { return base + 4 * kHalf + st * 2 * kRaw; };
  auto sdO = [&](int st) { return sQ(st) + kRaw; };
  const uint32_t sPBig = base + 4 * kHalf + kStages * 2 * kRaw, sPSmall = sPBig + kGrad,
                 sdSBig = sPBig + 2 * kGrad, sdSSmall = sPBig + 3 * kGrad;
  auto sL = [&](int st) { return sPBig + 4 * kGrad + st * 2 * kVec; };
  auto sDsum = [&](int st) { return sL(st) + kVec; };
  const uint32_t bar_kv = base + T::kTileBytes;
  auto bar_full = [&](int st) { return bar_full_of(bar_kv, st); };

  const KeyTileSchedule<kBlockM, kBlockN> tile(args);
  const int m_tiles = ceil_div(args.S_q, kBlockM);
  const int m_begin = args.causal ? tile.causal_query_tiles_begin(args, m_tiles) : 0;
  const int per_head = m_tiles - m_begin;
  const int total = per_head * args.group;
  auto head_of = [&](int it) { return tile.h_kv * args.group + it / per_head; };
  auto row0_of = [&](int it) { return (m_begin + it % per_head) * kBlockM; };

  const int tid = threadIdx.x, wg = tid / 128;
  if (tid == 0) init_pass_barriers<kStages>(bar_kv);
  __syncthreads();

  // Alg. 2 line 10: Q_i, dO_i, L_i (the natural-log L, +inf past S_q), D_i of step `it`.
  auto load_step = [&](int it) {
    const int st = it % kStages, h = head_of(it), m0 = row0_of(it);
    const int64_t ws = (static_cast<int64_t>(tile.b) * args.H + h) * args.S_q_pad + m0;
    mbar_expect_tx(bar_full(st), 2 * kRaw + 2 * kVec);
    tma_load_f32_pair<kBlockM, kD>(sQ(st), &tmap_q, sdO(st), &tmap_do, bar_full(st), m0, h, tile.b);
    bulk_load(sL(st), args.lse2 + ws, kVec, bar_full(st));
    bulk_load(sDsum(st), args.dsum + ws, kVec, bar_full(st));
  };

  // Alg. 2 line 6: K_j and V_j, landed raw in stage 1's tiles and split by every thread into
  // their halves, while stage 0 loads.
  if (total > 0) {
    if (tid == 0) {
      mbar_expect_tx(bar_kv, 2 * kHalf);
      tma_load_f32_pair<kBlockN, kD>(sQ(1), &tmap_k, sdO(1), &tmap_v, bar_kv, tile.n0, tile.h_kv,
                                     tile.b);
      load_step(0);
    }
    split_still_tiles<kBlockN, kD, T::kSplit, T::kThreads>(bar_kv, sQ(1), sKBig, sKSmall, sdO(1),
                                                           sVBig, sVSmall, tid);
  }
  __syncthreads();  // the halves are written; stage 1 is free

  if (wg == 0) {
    if (tid == 0) load_steps<kStages>(bar_kv, total, load_step);
    return;
  }

  const int ctid = tid - 128, w = ctid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int r_lo = 16 * w + g;      // S's rows (queries) r_lo and r_lo + 8
  const int col0 = 16 * w + 2 * g;  // the transposed gradients' rows: head-dim col0 and col0 + 1
  float acc_dv[kMTiles][kN], acc_dk[kMTiles][kN];
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int i = 0; i < kN; ++i) acc_dv[mt][i] = acc_dk[mt][i] = 0.0f;

  // The B operands' descriptors, advanced to each k-step's columns (smem_desc_advance).
  const uint64_t desc_k_big = make_smem_desc(sKBig, 16, kSwizzleAtom),
                 desc_k_small = make_smem_desc(sKSmall, 16, kSwizzleAtom),
                 desc_v_big = make_smem_desc(sVBig, 16, kSwizzleAtom),
                 desc_v_small = make_smem_desc(sVSmall, 16, kSwizzleAtom),
                 desc_p_big = make_smem_desc(sPBig, 16, kSwizzleAtom),
                 desc_p_small = make_smem_desc(sPSmall, 16, kSwizzleAtom),
                 desc_ds_big = make_smem_desc(sdSBig, 16, kSwizzleAtom),
                 desc_ds_small = make_smem_desc(sdSSmall, 16, kSwizzleAtom);

  // One step, `special` when its tile crosses the causal diagonal or holds a query that sees
  // one key (sees_one_key): the other steps run no index math.
  auto step = [&](int it, auto special) {
    const int st = it % kStages, m0 = row0_of(it);
    mbar_wait(bar_full(st), (it / kStages) & 1);
    // Lines 11 and 14: S = Q_i K_j^T, dP = dO_i V_j^T, each in groups of T::kScoreGroupSteps
    // k-steps (8 head-dim columns each).
    constexpr int kGs = T::kScoreGroupSteps, kDGroups = kD / (8 * kGs);
    float acc_s[kN], acc_dp[kN];
    run_product_groups<2 * kDGroups, kN>(
        [&](float(&part)[kN], int grp) {
          const bool is_s = grp < kDGroups;
          issue_split_group<kGs, kBlockM, kBlockN, false, T::kSplit>(
              part, is_s ? sQ(st) : sdO(st), r_lo, kGs * (is_s ? grp : grp - kDGroups), t,
              is_s ? desc_k_big : desc_v_big, is_s ? desc_k_small : desc_v_small);
        },
        [&](float(&part)[kN], int grp) {
          float* acc = grp < kDGroups ? acc_s : acc_dp;
          const bool first = grp == 0 || grp == kDGroups;
#pragma unroll
          for (int i = 0; i < kN; ++i) acc[i] = first ? part[i] : acc[i] + part[i];
        });

    // Lines 12 and 15: P = exp(scale S - L), dS = P (dP - D), written split as P^T's and
    // dS^T's halves (keys x queries, K-major).
    float lse[2], dsum[2];
    bool single[2] = {false, false};
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const int r = r_lo + 8 * hf;
      lse[hf] = __int_as_float(ld_shared_s32(sL(st) + 4 * r));
      dsum[hf] = __int_as_float(ld_shared_s32(sDsum(st) + 4 * r));
      if constexpr (decltype(special)::value) single[hf] = sees_one_key(args, m0 + r);
    }
#pragma unroll
    for (int i = 0; i < kBlockN / 8; ++i)
#pragma unroll
      for (int hf = 0; hf < 2; ++hf)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int idx = 4 * i + 2 * hf + e, c = 8 * i + 2 * t + e, r = r_lo + 8 * hf;
          float x = __fmul_rn(acc_s[idx], args.scale) - lse[hf];  // S as the forward rounded it
          float p, ds;
          if constexpr (decltype(special)::value) {
            if (args.causal && static_cast<int64_t>(m0 + r) + args.causal_offset < tile.n0 + c)
              x = -INFINITY;
            p = single[hf] ? (x == -INFINITY ? 0.0f : 1.0f) : expf(x);
            ds = single[hf] ? 0.0f : p * (acc_dp[idx] - dsum[hf]);
          } else {
            p = expf(x);
            ds = p * (acc_dp[idx] - dsum[hf]);
          }
          store_split_transposed<kBlockN, Tf32Split::rounded>(sPBig, sPSmall, r, c, p);  // P <= 1
          store_split_transposed<kBlockN, T::kSplit>(sdSBig, sdSSmall, r, c, ds);
        }
    fence_proxy_async_shared();
    named_bar_sync(1, 128);  // P^T's and dS^T's halves are written

    // Lines 13 and 17: dV_j^T += dO_i^T P, dK_j^T += Q_i^T dS, per 64 head-dim rows, in
    // groups of T::kGradGroupSteps k-steps (8 queries each).
    constexpr int kGg = T::kGradGroupSteps, kQGroups = kBlockM / (8 * kGg);
    constexpr int kPerGrad = kMTiles * kQGroups;
    run_product_groups<2 * kPerGrad, kN>(
        [&](float(&part)[kN], int grp) {
          const bool is_dv = grp < kPerGrad;
          const int gg = is_dv ? grp : grp - kPerGrad, mt = gg / kQGroups, qg = gg % kQGroups;
          issue_split_group<kGg, kBlockM, kBlockN, true, T::kSplit>(
              part, is_dv ? sdO(st) : sQ(st), 64 * mt + col0, kGg * qg, t,
              is_dv ? desc_p_big : desc_ds_big, is_dv ? desc_p_small : desc_ds_small);
        },
        [&](float(&part)[kN], int grp) {
          const bool is_dv = grp < kPerGrad;
          const int mt = (is_dv ? grp : grp - kPerGrad) / kQGroups;
          float* acc = is_dv ? acc_dv[mt] : acc_dk[mt];
#pragma unroll
          for (int i = 0; i < kN; ++i) acc[i] += part[i];
        });
    mbar_arrive(bar_empty_of<kStages>(bar_kv, st));  // Q_i and dO_i are read
  };

  // Each head's walk starts with its special steps (the single-key row's tile crosses the
  // diagonal; with S_k = 1 every step is special): two loops, one per copy of the step.
  auto is_special = [&](int it) {
    const int m0 = row0_of(it);
    return (args.causal && tile.n0 + kBlockN - 1 > static_cast<int64_t>(m0) + args.causal_offset) ||
           tile_has_single_key_row(args, m0, kBlockM);
  };
  for (int it = 0; it < total;) {
    const int head_end = (it / per_head + 1) * per_head;
    for (; it < head_end && is_special(it); ++it) step(it, std::true_type{});
    for (; it < head_end; ++it) step(it, std::false_type{});
  }

  // Line 19: dK_j (times the scale) and dV_j, keys < S_k and head-dim columns < d; zeros for a
  // key tile no query sees. With kLateStoreIndices the tile's valid keys and this thread's
  // columns are formed again here, from values the compiler cannot trace back (opaque).
  int keys_valid = tile.keys_valid, out_col0 = col0;
  if constexpr (T::kLateStoreIndices) {
    const int late_tid = opaque(tid);
    keys_valid = min(kBlockN, args.S_k - opaque(tile.n0));
    out_col0 = 16 * ((late_tid - 128) / 32) + (late_tid % 32) / 4 * 2;
  }
  store_transposed_gradient<kMTiles, kBlockN>(acc_dk, args.scale, args.dk, args.grad_code,
                                              row_offset(args.dk, tile.b, tile.n0, tile.h_kv),
                                              keys_valid, args.d, out_col0, t);
  store_transposed_gradient<kMTiles, kBlockN>(acc_dv, 1.0f, args.dv, args.grad_code,
                                              row_offset(args.dv, tile.b, tile.n0, tile.h_kv),
                                              keys_valid, args.d, out_col0, t);
}

}  // namespace flashref::cuda::kernels::sm90

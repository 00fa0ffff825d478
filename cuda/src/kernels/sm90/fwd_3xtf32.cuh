// Forward pass on Hopper for exact float32 (the sm90_3xtf32 family): Algorithm 1 on TF32 wgmma,
// each of its two products as three (3xTF32, kernels/common/tf32.cuh's split), judged by the
// exact float32 rule as the FFMA kernels are.
//
// What TF32 wgmma asks of the tiles: both shared-memory operands K-major (the transposed
// layouts are the 16-bit types'), and three products per product. So:
//   S = Q K^T    A = Q_i from registers: each k-step's fragment read from Q_i's tile (as the
//                TMA loaded it) and split there; B = K_j, K-major: the producer writes its big
//                and small halves from the raw tile, its columns in the fragment's order.
//   O += P~ V    A = P~ from registers, split; B must be V_j^T (keys contiguous): the producer
//                writes V_j^T's big and small from V_j as loaded.
// Each product sums its three terms per k-step (small ones first) in a tensor-core accumulator
// started from zero and adds it to the float32 result with round to nearest: S in four groups of
// 32 head-dim columns, P~ V once per key tile (O = alpha O + the tile's P~ V). The tensor cores'
// float32 sums truncate, and added straight into a long reduction the truncations pile up (run
// 25a); dev/f32/three_tf32.py's sm90-fwd-s32-pv32-rnat model of this order passes the exact
// rule with plain float32's margins (docs/perf-notes.md, run 32). The softmax is the unfolded
// one (the fold's exponent leaves float32's range for large scores; docs/verification.md).
//
// Block: one query tile of 64 rows per consumer warpgroup (two), one block per tile. Warpgroup
// 0 is the producer: per key tile its threads wait for a free stage and the raw K_j and V_j,
// write K's halves and V^T's into the stage, and once all have read the raw tiles one thread
// loads the next key tile's into them (the TMA) before the stage is marked ready. The
// consumers walk the key tiles from the last (the masked ones first), per tile: S (its groups' sums
// added under the next group's products), the online softmax, P~ V under the rescale of O, and free
// the stage.
#pragma once

#include <cuda.h>

#include <type_traits>

#include "kernels/common/args.hpp"
#include "kernels/common/epilogue.cuh"
#include "kernels/common/ptx.cuh"
#include "kernels/common/schedule.cuh"
#include "kernels/common/tf32.cuh"
#include "kernels/common/tile_io.cuh"
#include "kernels/sm90/fwd.cuh"
#include "kernels/sm90/hopper.cuh"
#include "kernels/sm90/tf32_tiles.cuh"
#include "kernels/sm90/wgmma.cuh"

namespace flashref::cuda::kernels::sm90 {

template <int kD_>
struct Fwd3xTf32Traits {
  using Element = float;
  static constexpr int kD = kD_;
  static constexpr int kConsumers = 2;
  static constexpr int kBlockM = 64 * kConsumers;  // B_q
  // B_k: V^T's tile is one 128-byte column block of keys, and two stages of K's and V^T's
  // halves with the raw K and V fill shared memory beside Q_i at d = 128.
  static constexpr int kBlockN = 32;
  static constexpr int kStages = 2;
  static constexpr int kThreads = 128 * (1 + kConsumers);
  static constexpr int kColBlocks = kD / kF32BlockCols;
  static constexpr int kQBytes = kBlockM * kD * 4;
  static constexpr int kKVBytes = kBlockN * kD * 4;  // one K, V or V^T tile (or half)
  // Per stage: K big, K small, V^T big, V^T small; and one raw K and V, as the TMA loaded them,
  // which the producer turns into the next free stage (so that the loads of a key tile run
  // ahead, under the consumers' use of both stages).
  static constexpr int kStageBytes = 4 * kKVBytes;
  static constexpr int kRawBytes = 2 * kKVBytes;
  static constexpr int kTileBytes = kQBytes + kStages * kStageBytes + kRawBytes;
  // Q's barrier; raw K and raw V; per stage ready and empty.
  static constexpr int kSmemBytes = kTileBytes + kSwizzleAtom + 8 * (3 + 2 * kStages);
  static constexpr int kProducerRegs = 56;
  static constexpr int kConsumerRegs = 224;
  static_assert(setmaxnreg_fits(kProducerRegs, kConsumerRegs, kConsumers),
                "setmaxnreg: the consumers' registers come from those the producer gives back");
  static constexpr int kTransformThreads = 128;  // the producer warpgroup
  // How Q's halves (kSplitQ), K's (kSplitK) and V's (kSplitV) are made; P~'s, in [0, 1], are
  // rounded to nearest unclamped (split_tf32_raw_small). FLASHREF_CUDA_TUNE fwd90=13, 14 and
  // 16-19 pick the others (Fwd3xTf32TraitsSplit; docs/perf-notes.md, runs 32g and 33).
  static constexpr Tf32Split kSplitQ = Tf32Split::rounded_finite;
  static constexpr Tf32Split kSplitK = Tf32Split::rounded_finite;
  static constexpr Tf32Split kSplitV = Tf32Split::rounded_finite;
  static_assert(kD % kF32BlockCols == 0 && kD <= 128, "compiled for d = 64 and 128");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory past the H100/H200 block limit");
};

template <typename Base, Tf32Split kSplitQ_, Tf32Split kSplitK_, Tf32Split kSplitV_>
struct Fwd3xTf32TraitsSplit : Base {
  static constexpr Tf32Split kSplitQ = kSplitQ_, kSplitK = kSplitK_, kSplitV = kSplitV_;
};

template <typename T>
__global__ void __launch_bounds__(T::kThreads, 1)
    fwd_3xtf32_kernel(const __grid_constant__ CUtensorMap tmap_q,
                      const __grid_constant__ CUtensorMap tmap_k,
                      const __grid_constant__ CUtensorMap tmap_v, const AttnArgs args) {
  constexpr int kD = T::kD, kBlockM = T::kBlockM, kBlockN = T::kBlockN, kStages = T::kStages;
  constexpr int kKV = T::kKVBytes;
  using Schedule = QueryTileSchedule<kBlockM, kBlockN>;
  extern __shared__ unsigned char smem_raw[];
  const uint32_t base = (smem_addr(smem_raw) + kSwizzleAtom - 1) & ~uint32_t(kSwizzleAtom - 1);
  const uint32_t sQ = base;
  auto sKBig = [&](int st) { return base + T::kQBytes + st * T::kStageBytes; };
  auto sKSmall = [&](int st) { return sKBig(st) + kKV; };
  auto sVtBig = [&](int st) { return sKBig(st) + 2 * kKV; };
  auto sVtSmall = [&](int st) { return sKBig(st) + 3 * kKV; };
  const uint32_t sKRaw = base + T::kQBytes + kStages * T::kStageBytes, sVRaw = sKRaw + kKV;
  const uint32_t bar_q = base + T::kTileBytes, bar_k_raw = bar_q + 8, bar_v_raw = bar_q + 16;
  auto bar_ready = [&](int st) { return bar_q + 8 * (3 + st); };
  auto bar_empty = [&](int st) { return bar_q + 8 * (3 + kStages + st); };

  const int m_blocks = ceil_div(args.S_q, kBlockM);
  const Schedule tile(args, static_cast<int>(blockIdx.x), m_blocks);
  const int n_blocks = ceil_div(args.S_k, kBlockN);
  const int n_end = args.causal ? tile.causal_key_tiles_end(args, n_blocks) : n_blocks;

  const int tid = threadIdx.x, wg = tid / 128;
  if (tid == 0) {
    mbar_init(bar_q, 1);
    mbar_init(bar_k_raw, 1);
    mbar_init(bar_v_raw, 1);
    for (int st = 0; st < kStages; ++st) {
      mbar_init(bar_ready(st), T::kTransformThreads);
      mbar_init(bar_empty(st), 128 * T::kConsumers);
    }
    mbar_init_fence();
  }
  __syncthreads();

  if (wg == 0) {  // the producer
    setmaxnreg_dec<T::kProducerRegs>();
    if (n_end == 0) return;  // the consumers write the tile; nothing to load
    // Alg. 1 line 5: Q_i; line 8, per key tile (walked from the last), into the raw tiles, the
    // first here and each next one as soon as every producer thread has read the last.
    auto load_raw = [&](int n) {
      mbar_expect_tx(bar_k_raw, kKV);
#pragma unroll
      for (int cb = 0; cb < T::kColBlocks; ++cb)
        tma_load_4d(sKRaw + cb * (kBlockN * kSwizzleBytes), &tmap_k, bar_k_raw, cb * kF32BlockCols,
                    n * kBlockN, tile.h_kv, tile.b);
      mbar_expect_tx(bar_v_raw, kKV);
#pragma unroll
      for (int cb = 0; cb < T::kColBlocks; ++cb)
        tma_load_4d(sVRaw + cb * (kBlockN * kSwizzleBytes), &tmap_v, bar_v_raw, cb * kF32BlockCols,
                    n * kBlockN, tile.h_kv, tile.b);
    };
    if (tid == 0) {
      mbar_expect_tx(bar_q, T::kQBytes);
#pragma unroll
      for (int cb = 0; cb < T::kColBlocks; ++cb)
        tma_load_4d(sQ + cb * (kBlockM * kSwizzleBytes), &tmap_q, bar_q, cb * kF32BlockCols,
                    tile.row0, tile.h, tile.b);
      load_raw(n_end - 1);
    }
    {
      const int x = tid, lane = tid % 32, warp = tid / 32;
      // V^T: row c (a head-dim column) holds the tile's 32 keys as one 128-byte swizzled row.
      // Lane p writes position p, which holds key `key`: within each 8 keys the positions 0-3
      // take the even keys and 4-7 the odd ones, the order in which the consumers' P~ fragments
      // hold them (wgmma's accumulator gives a thread keys 2t and 2t + 1, its TF32 A fragment
      // positions t and t + 4). The lane reads four head-dim columns of its key at once; 8
      // lanes' keys are 8 rows apart in the swizzle, and the stores of one column fill 32 banks.
      const int key = 8 * (lane / 8) + ((lane % 8) < 4 ? 2 * (lane % 8) : 2 * (lane % 8) - 7);
      for (int it = 0; it < n_end; ++it) {
        const int st = it % kStages;
        const uint32_t parity = it & 1;
        mbar_wait(bar_empty(st), ((it / kStages) & 1) ^ 1);  // the consumers are done with st
        // K_j: each 8 head-dim columns' big and small halves at their offset in the stage's
        // tiles, in Q's fragment order (the even columns, then the odd ones; tf32_tiles.cuh says
        // why), the 16-byte chunks swizzled as the TMA lays them out.
        mbar_wait(bar_k_raw, parity);
        split_k_major_tile<kBlockN, kD, T::kSplitK>(sKRaw, sKBig(st), sKSmall(st), x,
                                                    T::kTransformThreads);
        mbar_wait(bar_v_raw, parity);
#pragma unroll 2
        for (int c4 = warp; c4 < kD / 4; c4 += T::kTransformThreads / 32) {
          const uint32_t from = sVRaw + (c4 / 8) * (kBlockN * kSwizzleBytes) + key * kSwizzleBytes +
                                (((c4 % 8) ^ (key % 8)) * 16);
          uint32_t v[4];
          asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
                       : "=r"(v[0]), "=r"(v[1]), "=r"(v[2]), "=r"(v[3])
                       : "r"(from));
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int col = 4 * c4 + e;
            const uint32_t to =
                col * kSwizzleBytes + ((((lane / 4) ^ (col % 8)) * 16) + (lane % 4) * 4);
            uint32_t big, small;
            split_operand<T::kSplitV>(big, small, v[e]);
            asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(sVtBig(st) + to), "r"(big));
            asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(sVtSmall(st) + to), "r"(small));
          }
        }
        // Every producer thread has read the raw tiles (named barrier 1): the next ones load
        // under this stage's use.
        named_bar_sync(1, 128);
        if (tid == 0 && it + 1 < n_end) load_raw(n_end - 2 - it);
        fence_proxy_async_shared();  // the halves are read by wgmma (the async proxy)
        mbar_arrive(bar_ready(st));
      }
    }
    return;
  }

  setmaxnreg_inc<T::kConsumerRegs>();
  const int c = wg - 1, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int r_lo = c * 64 + ((tid % 128) / 32) * 16 + g;  // rows r_lo and r_lo + 8 of the tile
  float* o_tile = row_ptr<float>(args.o, tile.b, tile.row0, tile.h);
  float* lse_rows =
      args.lse + (static_cast<int64_t>(tile.b) * args.H + tile.h) * args.S_q + tile.row0;
  if (n_end == 0) {  // no row of the tile sees a key: O = 0, L = -inf
    write_fully_masked_tile<kBlockM, kD, 128 * T::kConsumers>(o_tile, args.o.row_stride, lse_rows,
                                                              tile.rows_valid, args.d, tid - 128);
    return;
  }

  // Q_i's A fragment of k-step ks, split (tf32_tiles.cuh; the producer lays K's columns out
  // the same way).
  auto q_fragment = [&](uint32_t(&big)[4], uint32_t(&small)[4], int ks) {
    a_fragment_rows<kBlockM, T::kSplitQ>(big, small, sQ, r_lo, ks, t);
  };
  // One group of S = Q_i K_j^T: head-dim columns 32 grp .. 32 grp + 31, four k-steps of three
  // products each, summed from zero into `part`.
  auto issue_s_group = [&](float(&part)[kBlockN / 2], int grp, int st) {
    uint32_t big[4][4], small[4][4];
#pragma unroll
    for (int kq = 0; kq < 4; ++kq) q_fragment(big[kq], small[kq], 4 * grp + kq);
    wgmma_fence();
#pragma unroll
    for (int kq = 0; kq < 4; ++kq) {
      const uint32_t off = grp * (kBlockN * kSwizzleBytes) + kq * 32;
      const uint64_t k_big = make_smem_desc(sKBig(st) + off, 16, kSwizzleAtom);
      const uint64_t k_small = make_smem_desc(sKSmall(st) + off, 16, kSwizzleAtom);
      WgmmaRS<float, kBlockN>::run(part, small[kq], k_big, kq > 0 ? 1 : 0);
      WgmmaRS<float, kBlockN>::run(part, big[kq], k_small, 1);
      WgmmaRS<float, kBlockN>::run(part, big[kq], k_big, 1);
    }
    wgmma_commit();
  };
  static_assert(kD == 4 * 32 || kD == 2 * 32, "S's groups of 32 head-dim columns");
  constexpr int kGroups = kD / 32;
  // S = Q_i K_j^T into acc_s: the groups alternate between two partial sums, each added (FADD)
  // while the next group's products run.
  auto compute_s = [&](float(&acc_s)[kBlockN / 2], int st) {
    float part[2][kBlockN / 2];
    issue_s_group(part[0], 0, st);
    issue_s_group(part[1], 1, st);
#pragma unroll
    for (int grp = 0; grp < kGroups; ++grp) {
      if (grp + 1 < kGroups)
        wgmma_wait<1>();
      else
        wgmma_wait<0>();
      fence_registers(part[grp % 2]);
#pragma unroll
      for (int i = 0; i < kBlockN / 2; ++i)
        acc_s[i] = grp == 0 ? part[0][i] : acc_s[i] + part[grp % 2][i];
      if (grp + 2 < kGroups) issue_s_group(part[grp % 2], grp + 2, st);
    }
  };

  float acc_o[kD / 2];
#pragma unroll
  for (int i = 0; i < kD / 2; ++i) acc_o[i] = 0.0f;  // Alg. 1 line 6
  float row_m[2] = {-INFINITY, -INFINITY}, row_l[2] = {0.0f, 0.0f}, alpha[2];
  int limit[2];  // keys < limit are visible to rows r_lo and r_lo + 8
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    const int64_t last = static_cast<int64_t>(tile.row0 + r_lo + hf * 8) + args.causal_offset;
    limit[hf] = args.causal ? static_cast<int>(max64(0, min64(args.S_k, last + 1))) : args.S_k;
  }
  auto needs_mask = [&](int n0) {
    return n0 + kBlockN > args.S_k ||
           (args.causal && n0 + kBlockN - 1 > static_cast<int64_t>(tile.row0) + args.causal_offset);
  };
  mbar_wait(bar_q, 0);
  auto visit = [&](int n, int it, auto masked) {
    const int st = it % kStages;
    mbar_wait(bar_ready(st), (it / kStages) & 1);
    float acc_s[kBlockN / 2];
    compute_s(acc_s, st);
    // Lines 10-12, the scores scaled before the row max (not folded into the exponent: the
    // fold's exponent for the row's largest score is the rounding error of m' = c max s, which
    // past |m'| ~ 2^30 leaves float32's exponent range, and the row then sees no key; run 32f).
    online_softmax<kBlockN, false, decltype(masked)::value>(acc_s, row_m, row_l, alpha, limit,
                                                            n * kBlockN, t, args.scale_log2);
    // Line 13: O = diag(alpha) O + P~ V_j, the product from zero (k-steps of 8 keys; P~'s
    // fragment relabelled as V^T's keys are: a[1] <-> the accumulator's element 2).
    uint32_t p_big[kBlockN / 8][4], p_small[kBlockN / 8][4];
#pragma unroll
    for (int kk = 0; kk < kBlockN / 8; ++kk) {
      const float* s = acc_s + 4 * kk;
      split_tf32_raw_small(p_big[kk][0], p_small[kk][0], __float_as_uint(s[0]));
      split_tf32_raw_small(p_big[kk][1], p_small[kk][1], __float_as_uint(s[2]));
      split_tf32_raw_small(p_big[kk][2], p_small[kk][2], __float_as_uint(s[1]));
      split_tf32_raw_small(p_big[kk][3], p_small[kk][3], __float_as_uint(s[3]));
    }
    float acc_pv[kD / 2];
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kBlockN / 8; ++kk) {
      const uint64_t v_big = make_smem_desc(sVtBig(st) + kk * 32, 16, kSwizzleAtom);
      const uint64_t v_small = make_smem_desc(sVtSmall(st) + kk * 32, 16, kSwizzleAtom);
      WgmmaRS<float, kD>::run(acc_pv, p_small[kk], v_big, kk > 0 ? 1 : 0);
      WgmmaRS<float, kD>::run(acc_pv, p_big[kk], v_small, 1);
      WgmmaRS<float, kD>::run(acc_pv, p_big[kk], v_big, 1);
    }
    wgmma_commit();
#pragma unroll
    for (int i = 0; i < kD / 8; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc_o[4 * i + e] *= alpha[e / 2];
    wgmma_wait<0>();
    fence_registers(acc_pv);
    mbar_arrive(bar_empty(st));
#pragma unroll
    for (int i = 0; i < kD / 2; ++i) acc_o[i] += acc_pv[i];
  };
  int n = n_end - 1, it = 0;
  for (; n >= 0 && needs_mask(n * kBlockN); --n, ++it) visit(n, it, std::true_type{});
  for (; n >= 0; --n, ++it) visit(n, it, std::false_type{});

#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    // Lines 15-16: O = O / l, L = ln 2 (m' + log2 l); a row that saw no key gets O = 0 and
    // L = -inf.
    float l = row_l[hf];
    l += __shfl_xor_sync(0xffffffff, l, 1);
    l += __shfl_xor_sync(0xffffffff, l, 2);
    const int r = r_lo + hf * 8;
    if (r >= tile.rows_valid) continue;
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    float* o_row = o_tile + static_cast<int64_t>(r) * args.o.row_stride;
#pragma unroll
    for (int i = 0; i < kD / 8; ++i)
      if (8 * i + 2 * t < args.d)
        *reinterpret_cast<float2*>(o_row + 8 * i + 2 * t) =
            make_float2(acc_o[4 * i + 2 * hf] * inv, acc_o[4 * i + 2 * hf + 1] * inv);
    if (t == 0) lse_rows[r] = l > 0.0f ? (row_m[hf] + log2f(l)) * 0.69314718055994531f : -INFINITY;
  }
}

}  // namespace flashref::cuda::kernels::sm90

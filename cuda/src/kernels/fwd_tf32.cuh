// Forward pass on TF32 tensor cores (float32 inputs with allow_tf32): Algorithm 1 for one
// query tile per thread block, built like the bf16/f16 kernel (fwd_mma.cuh): the same grid
// order (longest query tiles first), key-tile loop (last to first, so the tiles needing a
// mask come first), causal tile classes, log2-domain online softmax on ex2.approx, and load
// pipeline (V_j fetched during S = Q_i K_j^T and the softmax, K_{j-1} during P~ V_j).
//
// What TF32 changes (tf32.cuh has the fragment layouts):
//   - Q_i, K_j, V_j are float32 tiles in shared memory, rounded to TF32 in place once they
//     land, so every product sees the operands the TF32 baseline rounds (cvt.rna);
//   - S = Q_i K_j^T and O += P~ V_j run on mma.m16n8k8 (k = 8 per instruction);
//   - P~ is rounded to TF32 in registers and fed to P~ V_j as the A operand, its keys
//     relabelled (a_from_c), with V_j read at the matching rows (load_b_cols).
// The row sum l takes the unrounded P~, as the bf16 kernel's does.
#pragma once

#include "kernels/args.hpp"
#include "kernels/epilogue.cuh"
#include "kernels/fragment_softmax.cuh"
#include "kernels/ptx.cuh"
#include "kernels/schedule.cuh"
#include "kernels/tf32.cuh"
#include "kernels/tile_io.cuh"

namespace flashref::cuda::kernels {

template <int kD_, int kBlockM_, int kBlockN_, int kNWarps_, bool kQInRegs_>
struct FwdTf32Traits {
  static constexpr int kD = kD_;            // compiled head dim (the true d is <= kD, padded)
  static constexpr int kBlockM = kBlockM_;  // B_q
  static constexpr int kBlockN = kBlockN_;  // B_k
  static constexpr int kNWarps = kNWarps_;
  static constexpr bool kQInRegs = kQInRegs_;  // keep Q_i's fragments in registers
  static constexpr int kThreads = kNWarps * 32;
  static constexpr int kMT = kBlockM / (16 * kNWarps);  // 16-row mma tiles per warp
  static constexpr int kStride = kD + 4;                // floats; tf32.cuh says why
  static constexpr int kSmemBytes = (kBlockM + 2 * kBlockN) * kStride * 4;
  static_assert(kBlockM % (16 * kNWarps) == 0 && kMT >= 1, "B_q must be a multiple of 16 * warps");
  static_assert(kBlockN % 8 == 0 && kD % 32 == 0, "B_k in 8s; the head dim in 32s (bank padding)");
};

template <typename T>
__global__ void __launch_bounds__(T::kThreads) fwd_tf32_kernel(const AttnArgs args) {
  constexpr int kD = T::kD, kBlockM = T::kBlockM, kBlockN = T::kBlockN, kMT = T::kMT;
  constexpr int kStride = T::kStride, kThreads = T::kThreads;
  constexpr int kNT = kBlockN / 8;  // 8-key mma tiles of S (and 8-key steps of P~ V)
  constexpr int kDT = kD / 8;       // 8-column mma tiles of O
  constexpr int kKS = kD / 8;       // 8-wide reduction steps of S = Q K^T

  extern __shared__ __align__(16) unsigned char smem_raw[];
  float* sQ = reinterpret_cast<float*>(smem_raw);
  float* sK = sQ + kBlockM * kStride;
  float* sV = sK + kBlockN * kStride;

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;
  const QueryTileSchedule<kBlockM, kBlockN> tile(args);
  const int b = tile.b, h = tile.h, row0 = tile.row0, rows_valid = tile.rows_valid;
  const int d = args.d;

  // Key tiles this query tile needs (above the causal diagonal: never loaded).
  int n_end = ceil_div(args.S_k, kBlockN);
  if (args.causal) n_end = tile.causal_key_tiles_end(args, n_end);

  float* o_tile = row_ptr<float>(args.o, b, row0, h);
  float* lse_rows = args.lse + (static_cast<int64_t>(b) * args.H + h) * args.S_q + row0;
  if (n_end == 0) {
    write_fully_masked_tile<kBlockM, kD, kThreads>(o_tile, args.o.row_stride, lse_rows, rows_valid,
                                                   d, tid);
    return;
  }

  const float* k_head = row_ptr<const float>(args.k, b, 0, tile.h_kv);
  const float* v_head = row_ptr<const float>(args.v, b, 0, tile.h_kv);
  auto load_k = [&](int n) {
    const int n0 = n * kBlockN;
    load_tile_async<kBlockN, kD, kStride, kThreads>(
        sK, k_head + static_cast<int64_t>(n0) * args.k.row_stride, args.k.row_stride, args.S_k - n0,
        d, tid);
  };

  // Alg. 1 line 5: load Q_i (and the first key tile K_j), rounded to TF32 once they land.
  load_tile_async<kBlockM, kD, kStride, kThreads>(sQ, row_ptr<const float>(args.q, b, row0, h),
                                                  args.q.row_stride, rows_valid, d, tid);
  load_k(n_end - 1);
  cp_async_commit();
  cp_async_wait<0>();
  round_own_chunks_tf32<kBlockM, kD, kStride, kThreads>(sQ, tid);
  round_own_chunks_tf32<kBlockN, kD, kStride, kThreads>(sK, tid);
  __syncthreads();  // Q_i and K_j are rounded and visible to every warp

  const int warp_row0 = warp * kMT * 16;  // first row of this warp inside the tile
  uint32_t q_frag[T::kQInRegs ? kMT : 1][T::kQInRegs ? kKS : 1][4];
  if constexpr (T::kQInRegs) {
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int ks = 0; ks < kKS; ++ks)
        load_a(q_frag[mt][ks], sQ, kStride, warp_row0 + mt * 16, ks * 8, g, t);
  }

  // Alg. 1 line 6: O = 0, l = 0, m = -inf (two rows per thread per 16-row tile).
  float acc_o[kMT][kDT][4];
  zero_tiles(acc_o);
  float row_m[kMT][2], row_l[kMT][2];
  init_softmax_rows(row_m, row_l);

  // Alg. 1 line 7: the loop over key tiles, last to first. On entry K_j is in sK, rounded and
  // visible, and every warp is done with sV.
  for (int n = n_end - 1; n >= 0; --n) {
    const int n0 = n * kBlockN;
    // Line 8: V_j, fetched while S and the softmax are computed.
    load_tile_async<kBlockN, kD, kStride, kThreads>(
        sV, v_head + static_cast<int64_t>(n0) * args.v.row_stride, args.v.row_stride, args.S_k - n0,
        d, tid);
    cp_async_commit();

    // Line 9: S = Q_i K_j^T (the scale comes next, in the log2-domain multiply). With Q read
    // from shared memory nothing indexes registers by ks, so that loop may stay rolled
    // (unrolled, every load of the tile would be hoisted into registers).
    float acc_s[kMT][kNT][4];
    zero_tiles(acc_s);
#pragma unroll(T::kQInRegs ? kKS : 1)
    for (int ks = 0; ks < kKS; ++ks) {
      uint32_t a[kMT][4];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        if constexpr (T::kQInRegs) {
#pragma unroll
          for (int e = 0; e < 4; ++e) a[mt][e] = q_frag[mt][ks][e];
        } else {
          load_a(a[mt], sQ, kStride, warp_row0 + mt * 16, ks * 8, g, t);
        }
      }
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
        uint32_t b0, b1;
        load_b_rows(b0, b1, sK, kStride, nt * 8, ks * 8, g, t);
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) mma_tf32(acc_s[mt][nt], a[mt], b0, b1);
      }
    }

    // Scores to the log2 domain; -inf where the key is past S_k or above the causal diagonal.
    // Only tiles that cross the diagonal or the end of the keys compare indices.
    const bool needs_mask =
        n0 + kBlockN > args.S_k ||
        (args.causal && n0 + kBlockN - 1 > static_cast<int64_t>(row0) + args.causal_offset);
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        int limit = args.S_k;  // keys < limit are visible to this row
        if (needs_mask && args.causal) {
          const int row = row0 + warp_row0 + mt * 16 + g + hf * 8;
          const int64_t last = static_cast<int64_t>(row) + args.causal_offset;
          limit = static_cast<int>(max64(0, min64(limit, last + 1)));
        }
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            float& s = acc_s[mt][nt][hf * 2 + c];
            s *= args.scale_log2;
            if (needs_mask && n0 + nt * 8 + 2 * t + c >= limit) s = -INFINITY;
          }
      }

    // Lines 10-12: running max, P~, running sum; and the rescale of O (line 13's first term).
    // P~ is then rounded to TF32, as the A operand of P~ V_j.
    online_softmax_rows(acc_s, row_m, row_l, acc_o);
    uint32_t p_frag[kMT][kNT][4];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) a_frags_from_c(p_frag[mt], acc_s[mt]);

    cp_async_wait<0>();
    round_own_chunks_tf32<kBlockN, kD, kStride, kThreads>(sV, tid);
    __syncthreads();  // V_j is rounded and visible, and every warp is done reading K_j
    if (n > 0) {
      load_k(n - 1);
      cp_async_commit();
    }

    // Line 13: O += P~ V_j, with P~ straight from registers.
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int dt = 0; dt < kDT; ++dt) {
        uint32_t b0, b1;
        load_b_cols(b0, b1, sV, kStride, nt * 8, dt * 8, g, t);
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) mma_tf32(acc_o[mt][dt], p_frag[mt][nt], b0, b1);
      }

    if (n > 0) {
      cp_async_wait<0>();
      round_own_chunks_tf32<kBlockN, kD, kStride, kThreads>(sK, tid);
      __syncthreads();  // K_{j-1} is rounded and visible, and every warp is done reading V_j
    }
  }

  // Lines 15-16: O = O / l, L = m + log(l) (natural log), O staged through the warp's own rows
  // of sQ (no other warp reads them; the last barrier above ordered this warp's reads of sQ).
  normalize_rows<kMT, kDT, kStride>(sQ, lse_rows, row_m, row_l, acc_o, warp_row0, rows_valid, g, t);
  __syncthreads();
  store_tile<kBlockM, kD, kStride, kThreads>(sQ, o_tile, args.o.row_stride, rows_valid, d, tid);
}

}  // namespace flashref::cuda::kernels

// Forward pass on tensor cores (bf16 / f16): Algorithm 1 for one query tile per thread block.
//
// Grid: one block per (query tile, head, batch), longest query tiles first (QueryTileSchedule,
// schedule.cuh). Each warp owns kMT * 16 query rows and keeps their S tile, P~, O accumulator,
// m and l in registers; K_j and V_j are shared by the block through shared memory.
//
// Per key tile j (walked from the last to the first, so the tiles that need a mask come first):
//   S = Q_i K_j^T                              mma.sync m16n8k16, fp32 accumulators
//   s' = S * scale * log2(e)                   one multiply puts the softmax in the log2 domain:
//                                              exp(scale*S - m) = 2^(s' - m') with m' = m log2 e
//   m' = max(m'_old, rowmax(s'))               (Alg. 1 line 10)
//   P~ = 2^(s' - m')                           (line 11), rounded to bf16/f16 for the next mma
//   l = 2^(m'_old - m') l + rowsum(P~)         (line 12)
//   O = 2^(m'_old - m') O + P~ V_j             (line 13)
// and at the end O / l and L = ln(2) (m' + log2 l) (lines 15-16), written once.
// Loads are cp.async with one K and one V buffer, in FlashAttention-2's order: V_j is fetched
// while S = Q K_j^T and the softmax run, K_{j-1} while P~ V_j runs.
#pragma once

#include "kernels/args.hpp"
#include "kernels/epilogue.cuh"
#include "kernels/fragment_softmax.cuh"
#include "kernels/mma_fragments.cuh"
#include "kernels/ptx.cuh"
#include "kernels/schedule.cuh"
#include "kernels/tile_io.cuh"

namespace flashref::cuda::kernels {

template <typename Element_, int kD_, int kBlockM_, int kBlockN_, int kNWarps_, bool kQInRegs_>
struct FwdMmaTraits {
  using Element = Element_;
  static constexpr int kD = kD_;            // compiled head dim (the true d is <= kD, padded)
  static constexpr int kBlockM = kBlockM_;  // B_q
  static constexpr int kBlockN = kBlockN_;  // B_k
  static constexpr int kNWarps = kNWarps_;
  static constexpr bool kQInRegs = kQInRegs_;  // keep Q_i's mma fragments in registers
  static constexpr int kThreads = kNWarps * 32;
  static constexpr int kMT = kBlockM / (16 * kNWarps);  // 16-row mma tiles per warp
  // 16 bytes of padding per row: the 8 rows one ldmatrix reads start in 8 different banks.
  static constexpr int kStride = kD + 8;
  static constexpr int kSmemElems = (kBlockM + 2 * kBlockN) * kStride;
  static constexpr int kSmemBytes = kSmemElems * 2;
  static_assert(kBlockM % (16 * kNWarps) == 0 && kMT >= 1, "B_q must be a multiple of 16 * warps");
  static_assert(kBlockN % 16 == 0 && kD % 16 == 0, "B_k and the head dim must be multiples of 16");
};

template <typename T>
__global__ void __launch_bounds__(T::kThreads) fwd_mma_kernel(const AttnArgs args) {
  using Element = typename T::Element;
  using M = Mma<Element>;
  constexpr int kD = T::kD, kBlockM = T::kBlockM, kBlockN = T::kBlockN, kMT = T::kMT;
  constexpr int kStride = T::kStride, kThreads = T::kThreads;
  constexpr int kNT = kBlockN / 8;  // 8-key mma tiles of S
  constexpr int kDT = kD / 8;       // 8-column mma tiles of O

  extern __shared__ __align__(16) unsigned char smem_raw[];
  Element* sQ = reinterpret_cast<Element*>(smem_raw);
  Element* sK = sQ + kBlockM * kStride;
  Element* sV = sK + kBlockN * kStride;

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;
  const QueryTileSchedule<kBlockM, kBlockN> tile(args);
  const int b = tile.b, h = tile.h, row0 = tile.row0, rows_valid = tile.rows_valid;
  const int d = args.d;

  // Key tiles this query tile needs: all of them, or with a causal mask those up to the diagonal.
  int n_end = ceil_div(args.S_k, kBlockN);
  if (args.causal) n_end = tile.causal_key_tiles_end(args, n_end);

  Element* o_tile = row_ptr<Element>(args.o, b, row0, h);
  float* lse_rows = args.lse + (static_cast<int64_t>(b) * args.H + h) * args.S_q + row0;
  if (n_end == 0) {
    write_fully_masked_tile<kBlockM, kD, kThreads>(o_tile, args.o.row_stride, lse_rows, rows_valid,
                                                   d, tid);
    return;
  }

  const Element* q_tile = row_ptr<const Element>(args.q, b, row0, h);
  const Element* k_head = row_ptr<const Element>(args.k, b, 0, tile.h_kv);
  const Element* v_head = row_ptr<const Element>(args.v, b, 0, tile.h_kv);

  // Alg. 1 line 5: load Q_i (and, in the same wait, the first key tile K_j).
  load_tile_async<kBlockM, kD, kStride, kThreads>(sQ, q_tile, args.q.row_stride, rows_valid, d,
                                                  tid);
  cp_async_commit();
  {
    const int n0 = (n_end - 1) * kBlockN;
    load_tile_async<kBlockN, kD, kStride, kThreads>(
        sK, k_head + static_cast<int64_t>(n0) * args.k.row_stride, args.k.row_stride, args.S_k - n0,
        d, tid);
    cp_async_commit();
  }

  const int warp_row0 = warp * kMT * 16;  // first row of this warp inside the tile
  // ldmatrix lane addresses (see ptx.cuh): A fragments of Q, B fragments of K and of V^T.
  const int a_row = (lane % 8) + ((lane / 8) % 2) * 8, a_col = (lane / 16) * 8;
  const int bk_row = (lane % 8) + (lane / 16) * 8, bk_col = ((lane / 8) % 2) * 8;
  const int bv_row = (lane % 8) + ((lane / 8) % 2) * 8, bv_col = (lane / 16) * 8;

  uint32_t q_frag[T::kQInRegs ? kMT : 1][T::kQInRegs ? kD / 16 : 1][4];
  if constexpr (T::kQInRegs) {
    cp_async_wait<1>();
    __syncthreads();
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int ks = 0; ks < kD / 16; ++ks)
        ldmatrix_x4(q_frag[mt][ks],
                    smem_addr(sQ + (warp_row0 + mt * 16 + a_row) * kStride + ks * 16 + a_col));
  }

  // Alg. 1 line 6: O = 0, l = 0, m = -inf (two rows per thread per 16-row tile).
  float acc_o[kMT][kDT][4];
  zero_tiles(acc_o);
  float row_m[kMT][2], row_l[kMT][2];
  init_softmax_rows(row_m, row_l);

  // Alg. 1 line 7: the loop over key tiles, last to first.
  for (int n = n_end - 1; n >= 0; --n) {
    const int n0 = n * kBlockN;
    cp_async_wait<0>();
    __syncthreads();  // K_j has landed, and every warp is done reading V_{j+1}
    // Line 8: V_j, fetched while S and the softmax are computed.
    load_tile_async<kBlockN, kD, kStride, kThreads>(
        sV, v_head + static_cast<int64_t>(n0) * args.v.row_stride, args.v.row_stride, args.S_k - n0,
        d, tid);
    cp_async_commit();

    // Line 9: S = Q_i K_j^T (the scale comes next, in the log2-domain multiply).
    float acc_s[kMT][kNT][4];
    zero_tiles(acc_s);
    // With Q re-read from shared memory nothing indexes registers by ks, so the loop may stay
    // rolled: unrolled, the compiler hoists every ldmatrix of the tile and runs out of
    // registers.
#pragma unroll(T::kQInRegs ? kD / 16 : 1)
    for (int ks = 0; ks < kD / 16; ++ks) {
      uint32_t a[kMT][4];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        if constexpr (T::kQInRegs) {
#pragma unroll
          for (int e = 0; e < 4; ++e) a[mt][e] = q_frag[mt][ks][e];
        } else {
          ldmatrix_x4(a[mt],
                      smem_addr(sQ + (warp_row0 + mt * 16 + a_row) * kStride + ks * 16 + a_col));
        }
      }
#pragma unroll
      for (int np = 0; np < kNT / 2; ++np) {
        uint32_t bk[4];
        ldmatrix_x4(bk, smem_addr(sK + (np * 16 + bk_row) * kStride + ks * 16 + bk_col));
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          M::run(acc_s[mt][2 * np], a[mt], bk[0], bk[1]);
          M::run(acc_s[mt][2 * np + 1], a[mt], bk[2], bk[3]);
        }
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
    online_softmax_rows(acc_s, row_m, row_l, acc_o);
    uint32_t p_frag[kMT][kBlockN / 16][4];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) pack_a_frags<Element>(p_frag[mt], acc_s[mt]);

    cp_async_wait<0>();
    __syncthreads();  // V_j has landed, and every warp is done reading K_j
    if (n > 0) {
      const int n0_next = n0 - kBlockN;
      load_tile_async<kBlockN, kD, kStride, kThreads>(
          sK, k_head + static_cast<int64_t>(n0_next) * args.k.row_stride, args.k.row_stride,
          args.S_k - n0_next, d, tid);
      cp_async_commit();
    }

    // Line 13: O += P~ V_j, with P~ straight from registers.
#pragma unroll
    for (int kp = 0; kp < kBlockN / 16; ++kp)
#pragma unroll
      for (int dp = 0; dp < kDT / 2; ++dp) {
        uint32_t bv[4];
        ldmatrix_x4_trans(bv, smem_addr(sV + (kp * 16 + bv_row) * kStride + dp * 16 + bv_col));
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          M::run(acc_o[mt][2 * dp], p_frag[mt][kp], bv[0], bv[1]);
          M::run(acc_o[mt][2 * dp + 1], p_frag[mt][kp], bv[2], bv[3]);
        }
      }
  }

  // Lines 15-16: O = O / l, L = m + log(l) (natural log), staged through sQ (each warp wrote
  // and read only its own rows of sQ, so a warp barrier is enough before overwriting them).
  __syncwarp();
  normalize_rows<kMT, kDT, kStride>(sQ, lse_rows, row_m, row_l, acc_o, warp_row0, rows_valid, g, t);
  __syncthreads();
  store_tile<kBlockM, kD, kStride, kThreads>(sQ, o_tile, args.o.row_stride, rows_valid, d, tid);
}

}  // namespace flashref::cuda::kernels

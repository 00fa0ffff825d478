// Forward pass on sm80 tensor cores (mma.sync): Algorithm 1 for one query tile per thread
// block. T::Ops is the operand policy: Sm80Fp16Ops<E> for bf16/f16 inputs (m16n8k16),
// Sm80Tf32Ops for float32 inputs with allow_tf32 (m16n8k8, operands rounded to TF32).
//
// Grid: one block per (query tile, head, batch), longest query tiles first (QueryTileSchedule,
// schedule.cuh). Each warp owns kMT * 16 query rows and keeps their S tile, P~, O accumulator,
// m and l in registers; K_j and V_j are shared by the block through shared memory.
//
// Per key tile j (walked from the last to the first, so the tiles that need a mask come first):
//   S = Q_i K_j^T                              mma.sync, fp32 accumulators
//   s' = S * scale * log2(e)                   one multiply puts the softmax in the log2 domain:
//                                              exp(scale*S - m) = 2^(s' - m') with m' = m log2 e
//   m' = max(m'_old, rowmax(s'))               (Alg. 1 line 10)
//   P~ = 2^(s' - m')                           (line 11), rounded to the operand type for
//                                              the next mma (the row sum takes it unrounded)
//   l = 2^(m'_old - m') l + rowsum(P~)         (line 12)
//   O = 2^(m'_old - m') O + P~ V_j             (line 13)
// and at the end O / l and L = ln(2) (m' + log2 l) (lines 15-16), written once.
// Loads are cp.async with one K and one V buffer, in FlashAttention-2's order: V_j is fetched
// while S = Q K_j^T and the softmax run, K_{j-1} while P~ V_j runs.
//
// With Sm80Tf32Ops (kRoundsTiles) every tile is rounded to TF32 in shared memory once it lands,
// by the threads that copied it, so every product sees the operands the TF32 baseline rounds
// (cvt.rna); the barrier that publishes a tile then follows its rounding, which moves the wait
// for K_{j-1} from the top of the next step to the end of this one.
#pragma once

#include "kernels/common/args.hpp"
#include "kernels/common/epilogue.cuh"
#include "kernels/common/fragment_softmax.cuh"
#include "kernels/common/ptx.cuh"
#include "kernels/common/schedule.cuh"
#include "kernels/common/tile_io.cuh"
#include "kernels/sm80/lane_at.cuh"

namespace flashref::cuda::kernels {

template <typename Ops_, int kD_, int kBlockM_, int kBlockN_, int kNWarps_, bool kQInRegs_>
struct FwdMmaTraits {
  using Ops = Ops_;  // operand policy: Sm80Fp16Ops<E> or Sm80Tf32Ops
  using Element = typename Ops::Element;
  static constexpr int kD = kD_;            // compiled head dim (the true d is <= kD, padded)
  static constexpr int kBlockM = kBlockM_;  // B_q
  static constexpr int kBlockN = kBlockN_;  // B_k
  static constexpr int kNWarps = kNWarps_;
  static constexpr bool kQInRegs = kQInRegs_;  // keep Q_i's mma fragments in registers
  static constexpr int kThreads = kNWarps * 32;
  static constexpr int kMT = kBlockM / (16 * kNWarps);  // 16-row mma tiles per warp
  static constexpr int kStride = kD + Ops::kPad;        // row padding against bank conflicts
  static constexpr int kSmemBytes =
      (kBlockM + 2 * kBlockN) * kStride * static_cast<int>(sizeof(Element));
  static_assert(kBlockM % (16 * kNWarps) == 0 && kMT >= 1, "B_q must be a multiple of 16 * warps");
  static_assert(kBlockN % Ops::kK == 0 && kBlockN % Ops::kBN == 0 &&
                    kD % Ops::kHeadDimMultiple == 0,
                "B_k in whole mma steps; the head dim a multiple the operand policy can pad");
};

template <typename T>
__global__ void __launch_bounds__(T::kThreads) fwd_mma_kernel(const AttnArgs args) {
  using Ops = typename T::Ops;
  using Element = typename T::Element;
  constexpr int kD = T::kD, kBlockM = T::kBlockM, kBlockN = T::kBlockN, kMT = T::kMT;
  constexpr int kStride = T::kStride, kThreads = T::kThreads;
  constexpr int kNT = kBlockN / 8;        // 8-key mma tiles of S
  constexpr int kDT = kD / 8;             // 8-column mma tiles of O
  constexpr int kKS = kD / Ops::kK;       // reduction steps of S = Q K^T
  constexpr int kKP = kBlockN / Ops::kK;  // reduction steps of P~ V (A fragments of P~)
  constexpr int kNB = Ops::kBN / 8;       // mma tiles one B load feeds

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

  // Q_i's first row. (Each policy's kernel forms it where it did as a separate file, the TF32
  // one at the load below: the order of these address computations moves ptxas's register
  // allocation; kernels/sm80/lane_at.cuh.)
  const Element* q_tile = Ops::kRoundsTiles ? nullptr : row_ptr<const Element>(args.q, b, row0, h);
  const Element* k_head = row_ptr<const Element>(args.k, b, 0, tile.h_kv);
  const Element* v_head = row_ptr<const Element>(args.v, b, 0, tile.h_kv);

  auto load_k = [&](int n0) {  // K_j of the key tile starting at n0, into sK
    load_tile_async<kBlockN, kD, kStride, kThreads>(
        sK, k_head + static_cast<int64_t>(n0) * args.k.row_stride, args.k.row_stride, args.S_k - n0,
        d, tid);
  };

  // Alg. 1 line 5: load Q_i (and, in the same wait, the first key tile K_j). Tiles used as they
  // land: Q_i is a group of its own, so its fragments can load while K_j is in flight. Tiles
  // rounded once they land: both are rounded, then published by one barrier.
  load_tile_async<kBlockM, kD, kStride, kThreads>(
      sQ, Ops::kRoundsTiles ? row_ptr<const Element>(args.q, b, row0, h) : q_tile,
      args.q.row_stride, rows_valid, d, tid);
  if constexpr (!Ops::kRoundsTiles) cp_async_commit();
  load_k((n_end - 1) * kBlockN);
  cp_async_commit();
  if constexpr (Ops::kRoundsTiles) {
    cp_async_wait<0>();
    Ops::template round_tile<kBlockM, kD, kStride, kThreads>(sQ, tid);
    Ops::template round_tile<kBlockN, kD, kStride, kThreads>(sK, tid);
    __syncthreads();  // Q_i and K_j are rounded and visible to every warp
  }

  const int warp_row0 = warp * kMT * 16;   // first row of this warp inside the tile
  const typename Ops::Lane lane_at(lane);  // the lane's fragment addresses

  uint32_t q_frag[T::kQInRegs ? kMT : 1][T::kQInRegs ? kKS : 1][4];
  if constexpr (T::kQInRegs) {
    if constexpr (!Ops::kRoundsTiles) {
      cp_async_wait<1>();
      __syncthreads();
    }
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int ks = 0; ks < kKS; ++ks)
        Ops::load_a(q_frag[mt][ks], FLASHREF_LANE_AT(sQ, warp_row0 + mt * 16, ks * Ops::kK, a));
  }

  // Alg. 1 line 6: O = 0, l = 0, m = -inf (two rows per thread per 16-row tile).
  float acc_o[kMT][kDT][4];
  zero_tiles(acc_o);
  float row_m[kMT][2], row_l[kMT][2];
  init_softmax_rows(row_m, row_l);

  // Alg. 1 line 7: the loop over key tiles, last to first. With tiles rounded once they land,
  // K_j is already rounded and visible here (the end of the previous step, or the prologue).
  for (int n = n_end - 1; n >= 0; --n) {
    const int n0 = n * kBlockN;
    if constexpr (!Ops::kRoundsTiles) {
      cp_async_wait<0>();
      __syncthreads();  // K_j has landed, and every warp is done reading V_{j+1}
    }
    // Line 8: V_j, fetched while S and the softmax are computed.
    load_tile_async<kBlockN, kD, kStride, kThreads>(
        sV, v_head + static_cast<int64_t>(n0) * args.v.row_stride, args.v.row_stride, args.S_k - n0,
        d, tid);
    cp_async_commit();

    // Line 9: S = Q_i K_j^T (the scale comes next, in the log2-domain multiply).
    float acc_s[kMT][kNT][4];
    zero_tiles(acc_s);
    // With Q re-read from shared memory nothing indexes registers by ks, so the loop may stay
    // rolled: unrolled, the compiler hoists every fragment load of the tile and runs out of
    // registers.
#pragma unroll(T::kQInRegs ? kKS : 1)
    for (int ks = 0; ks < kKS; ++ks) {
      uint32_t a[kMT][4];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        if constexpr (T::kQInRegs) {
#pragma unroll
          for (int e = 0; e < 4; ++e) a[mt][e] = q_frag[mt][ks][e];
        } else {
          Ops::load_a(a[mt], FLASHREF_LANE_AT(sQ, warp_row0 + mt * 16, ks * Ops::kK, a));
        }
      }
#pragma unroll
      for (int nb = 0; nb < kNT / kNB; ++nb) {
        typename Ops::BFrag bk;
        Ops::load_b_rows(bk, FLASHREF_LANE_AT(sK, nb * Ops::kBN, ks * Ops::kK, b));
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) Ops::mma_group(acc_s[mt], nb, a[mt], bk);
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
    // P~ rounded to the operand type, as the A operand of P~ V_j.
    uint32_t p_frag[kMT][kKP][4];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) Ops::a_frags_from_c(p_frag[mt], acc_s[mt]);

    cp_async_wait<0>();
    Ops::template round_tile<kBlockN, kD, kStride, kThreads>(sV, tid);
    __syncthreads();  // V_j has landed (rounded), and every warp is done reading K_j
    if (n > 0) {
      if constexpr (Ops::kRoundsTiles)
        load_k((n - 1) * kBlockN);
      else
        load_k(n0 - kBlockN);
      cp_async_commit();
    }

    // Line 13: O += P~ V_j, with P~ straight from registers.
#pragma unroll
    for (int kp = 0; kp < kKP; ++kp)
#pragma unroll
      for (int db = 0; db < kDT / kNB; ++db) {
        typename Ops::BFrag bv;
        Ops::load_b_cols(bv, FLASHREF_LANE_AT(sV, kp * Ops::kK, db * Ops::kBN, t));
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) Ops::mma_group(acc_o[mt], db, p_frag[mt][kp], bv);
      }

    if constexpr (Ops::kRoundsTiles) {
      if (n > 0) {
        cp_async_wait<0>();
        Ops::template round_tile<kBlockN, kD, kStride, kThreads>(sK, tid);
        __syncthreads();  // K_{j-1} is rounded and visible, and every warp is done reading V_j
      }
    }
  }

  // Lines 15-16: O = O / l, L = m + log(l) (natural log), staged through sQ. Each warp writes
  // and reads only its own rows of sQ, and its last reads of them (S = Q K^T) came before the
  // loop's last __syncthreads, so no barrier is needed here; the bf16/f16 kernel keeps the warp
  // barrier it always had (kept so its machine code does not move).
  if constexpr (!Ops::kRoundsTiles) __syncwarp();
  normalize_rows<kMT, kDT, kStride>(sQ, lse_rows, row_m, row_l, acc_o, warp_row0, rows_valid, g, t);
  __syncthreads();
  store_tile<kBlockM, kD, kStride, kThreads>(sQ, o_tile, args.o.row_stride, rows_valid, d, tid);
}

}  // namespace flashref::cuda::kernels

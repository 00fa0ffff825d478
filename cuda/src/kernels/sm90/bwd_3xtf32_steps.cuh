// The pieces of exact float32's backward passes on 3xTF32 wgmma (bwd_dkdv_3xtf32.cuh,
// bwd_dq_3xtf32.cuh). Each pass keeps one side's tile still as TF32 halves in shared memory and
// streams the other side's raw tiles, whose A fragments it reads and splits in registers:
//   the scores  C (64 x N) = X Y^T     A = X's rows (a_fragment_rows); B = Y's halves
//   a gradient  G^T (d x N) += X^T C'  A = X read transposed (a_fragment_cols); B = C''s halves,
//                                      written by the consumers (store_split_transposed)
// where C' is P or dS as the scores' accumulator holds it (rows: the streamed side; columns: the
// still one). Every product sums its three terms per k-step (small ones first) from zero in
// groups, and each group is added to its float32 result with an FADD (fwd_3xtf32.cuh says why).
#pragma once

#include <cuda.h>

#include <cstdint>

#include "kernels/common/args.hpp"
#include "kernels/common/tile_io.cuh"
#include "kernels/sm90/hopper.cuh"
#include "kernels/sm90/tf32_tiles.cuh"
#include "kernels/sm90/wgmma.cuh"

namespace flashref::cuda::kernels::sm90 {

// The barriers of a pass, 8 bytes apart from `bar`: the still tiles' (one TMA arrival), then per
// stage "full" (one arrival, the loads' bytes) and "empty" (the 128 consumer threads).
__device__ __forceinline__ uint32_t bar_full_of(uint32_t bar, int st) {
  return bar + 8 * (1 + st);
}
template <int kStages>
__device__ __forceinline__ uint32_t bar_empty_of(uint32_t bar, int st) {
  return bar + 8 * (1 + kStages + st);
}
template <int kStages>
__device__ __forceinline__ void init_pass_barriers(uint32_t bar) {
  mbar_init(bar, 1);
  for (int st = 0; st < kStages; ++st) {
    mbar_init(bar_full_of(bar, st), 1);
    mbar_init(bar_empty_of<kStages>(bar, st), 128);
  }
  mbar_init_fence();
}

// Two kRows x kD float32 tiles at the same (row, head, batch) of two tensor maps (Q_i and dO_i,
// or K_j and V_j) into shared memory at dst_a and dst_b, one TMA box per 32-column block,
// completing on `bar`.
template <int kRows, int kD>
__device__ __forceinline__ void tma_load_f32_pair(uint32_t dst_a, const CUtensorMap* map_a,
                                                  uint32_t dst_b, const CUtensorMap* map_b,
                                                  uint32_t bar, int row, int head, int batch) {
#pragma unroll
  for (int cb = 0; cb < kD / kF32BlockCols; ++cb) {
    const uint32_t off = cb * (kRows * kSwizzleBytes);
    tma_load_4d(dst_a + off, map_a, bar, cb * kF32BlockCols, row, head, batch);
    tma_load_4d(dst_b + off, map_b, bar, cb * kF32BlockCols, row, head, batch);
  }
}

// The pass's still tiles (kRows x kD each, two of them: K_j and V_j, or Q_i and dO_i), landed raw
// at raw_a and raw_b (a stage's tiles, free until the caller's __syncthreads) on `bar`, and split
// by the block's threads into their halves (split_k_major_tile), ready for wgmma.
template <int kRows, int kD, Tf32Split kSplit, int kThreads>
__device__ __forceinline__ void split_still_tiles(uint32_t bar, uint32_t raw_a, uint32_t big_a,
                                                  uint32_t small_a, uint32_t raw_b, uint32_t big_b,
                                                  uint32_t small_b, int tid) {
  mbar_wait(bar, 0);
  split_k_major_tile<kRows, kD, kSplit>(raw_a, big_a, small_a, tid, kThreads);
  split_k_major_tile<kRows, kD, kSplit>(raw_b, big_b, small_b, tid, kThreads);
  fence_proxy_async_shared();  // the halves are read by wgmma (the async proxy)
}

// The loading thread's walk: steps 1 .. steps - 1 (step 0 loads with the still tiles), each
// once the consumers have freed its stage.
template <int kStages, typename LoadStep>
__device__ __forceinline__ void load_steps(uint32_t bar, int steps, const LoadStep& load_step) {
  for (int it = 1; it < steps; ++it) {
    mbar_wait(bar_empty_of<kStages>(bar, it % kStages), ((it / kStages) & 1) ^ 1);
    load_step(it);
  }
}

// The split A fragment of k-step ks of a product that reduces over a raw tile's rows, the tile
// read transposed (dO_i^T in dV_j^T += dO_i^T P; the tile has kRows rows): A rows g and g + 8
// are the tile's columns col0 and col0 + 1, positions t and t + 4 its rows 8 ks + 2t and
// 8 ks + 2t + 1 (the order the B operand's halves are written in, p_position).
template <int kRows, Tf32Split kSplit>
__device__ __forceinline__ void a_fragment_cols(uint32_t (&big)[4], uint32_t (&small)[4],
                                                uint32_t tile, int col0, int ks, int t) {
#pragma unroll
  for (int x = 0; x < 2; ++x) {
    const uint32_t at = tile + f32_tile_offset<kRows>(8 * ks + 2 * t + x, col0);
    uint32_t v0, v1;
    asm volatile("ld.shared.v2.b32 {%0, %1}, [%2];\n" : "=r"(v0), "=r"(v1) : "r"(at));
    split_operand<kSplit>(big[2 * x], small[2 * x], v0);
    split_operand<kSplit>(big[2 * x + 1], small[2 * x + 1], v1);
  }
}

// Where row r of the scores sits in a K-major row of the halves written from them: each 8 rows'
// even ones at positions 0-3, the odd ones at 4-7 (a_fragment_cols reads the raw tile's rows in
// that order).
__device__ __forceinline__ int p_position(int r) {
  return (r & ~7) | ((r & 1) << 2) | ((r & 7) >> 1);
}

// Value v of the scores' accumulator element (row r, column c), split, into the big and small
// halves of a gradient product's B operand (kN rows, one per column c; K-major over the rows r).
template <int kN, Tf32Split kSplit>
__device__ __forceinline__ void store_split_transposed(uint32_t big_tile, uint32_t small_tile,
                                                       int r, int c, float v) {
  const uint32_t at = f32_tile_offset<kN>(c, p_position(r));
  uint32_t big, small;
  split_operand<kSplit>(big, small, __float_as_uint(v));
  st_shared_s32(big_tile + at, static_cast<int>(big));
  st_shared_s32(small_tile + at, static_cast<int>(small));
}

// One group of a 64 x kN product, k-steps first_ks .. first_ks + kSteps - 1 (8 reduction indices
// each), into `part` from zero, committed. A: each k-step's fragment read from the raw tile `raw`
// (kRows rows) and split, by rows (kByCols false: A's rows r_lo + 8 hf are the tile's rows, `at`
// = r_lo) or by columns (true: A's rows are the tile's columns, `at` = col0). B: the halves at
// the descriptors desc_big and desc_small (kN rows, K-major, at their first column).
template <int kSteps, int kRows, int kN, bool kByCols, Tf32Split kSplit>
__device__ __forceinline__ void issue_split_group(float (&part)[kN / 2], uint32_t raw, int at,
                                                  int first_ks, int t, uint64_t desc_big,
                                                  uint64_t desc_small) {
  uint32_t big[kSteps][4], small[kSteps][4];
#pragma unroll
  for (int kq = 0; kq < kSteps; ++kq) {
    if constexpr (kByCols)
      a_fragment_cols<kRows, kSplit>(big[kq], small[kq], raw, at, first_ks + kq, t);
    else
      a_fragment_rows<kRows, kSplit>(big[kq], small[kq], raw, at, first_ks + kq, t);
  }
  wgmma_fence();
#pragma unroll
  for (int kq = 0; kq < kSteps; ++kq) {
    const int ks = first_ks + kq;
    const uint32_t off = (ks / 4) * (kN * kSwizzleBytes) + (ks % 4) * 32;
    const uint64_t d_big = smem_desc_advance(desc_big, off);
    const uint64_t d_small = smem_desc_advance(desc_small, off);
    WgmmaRS<float, kN>::run(part, small[kq], d_big, kq > 0 ? 1 : 0);
    WgmmaRS<float, kN>::run(part, big[kq], d_small, 1);
    WgmmaRS<float, kN>::run(part, big[kq], d_big, 1);
  }
  wgmma_commit();
}

// Runs kGroups groups of wgmma products with two in flight: issue(part, grp) issues group grp
// into `part` (from zero) and commits it; add(part, grp) adds it to its result once complete.
template <int kGroups, int kN, typename Issue, typename Add>
__device__ __forceinline__ void run_product_groups(const Issue& issue, const Add& add) {
  float part[2][kN];
  issue(part[0], 0);
  if constexpr (kGroups > 1) issue(part[1], 1);
#pragma unroll
  for (int grp = 0; grp < kGroups; ++grp) {
    if (grp + 1 < kGroups)
      wgmma_wait<1>();
    else
      wgmma_wait<0>();
    fence_registers(part[grp % 2]);
    add(part[grp % 2], grp);
    if (grp + 2 < kGroups) issue(part[grp % 2], grp + 2);
  }
}

// A transposed gradient's accumulators (kMTiles tiles of 64 head-dim rows x kN; element
// 4i + 2hf + e of tile mt: head-dim column 64 mt + col0 + hf, row 8i + 2t + e of the output's
// tile) times `mul`, written in dtype `code` at element offset `offset` of `out`: rows below
// rows_valid, columns below d.
template <int kMTiles, int kN>
__device__ __forceinline__ void store_transposed_gradient(const float (&acc)[kMTiles][kN / 2],
                                                          float mul, const TensorArg& out, int code,
                                                          int64_t offset, int rows_valid, int d,
                                                          int col0, int t) {
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int i = 0; i < kN / 8; ++i)
#pragma unroll
      for (int hf = 0; hf < 2; ++hf)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int row = 8 * i + 2 * t + e, col = 64 * mt + col0 + hf;
          if (row < rows_valid && col < d)
            store1(out.ptr, code, offset + row * out.row_stride + col,
                   acc[mt][4 * i + 2 * hf + e] * mul);
        }
}

}  // namespace flashref::cuda::kernels::sm90

// The 3xTF32 tiles of the sm90_3xtf32 kernels (fwd_3xtf32.cuh, bwd_dkdv_3xtf32.cuh): float32
// tiles as the TMA loads them (column blocks of 32 floats, one 128-byte swizzled row each;
// hopper.cuh), their TF32 halves as a wgmma B operand, and A fragments read from them and split
// in registers.
//
// Every such product sums over a dimension it may take in any order, so each 8 columns of a
// reduction are laid out in the order a thread's A fragment holds them: TF32 wgmma gives lane
// 4g + t the A columns t and t + 4, and the kernels put reduction indices 2t and 2t + 1 there,
// which are adjacent in memory (one 8-byte load) and are the columns a wgmma accumulator gives
// the same thread (an accumulator becomes an A fragment with no shuffle). A B operand written
// for such an A holds, within each 8 of its K-major row, the even indices at positions 0-3 and
// the odd ones at 4-7.
#pragma once

#include <cstdint>

#include "kernels/common/tf32.cuh"
#include "kernels/sm90/hopper.cuh"

namespace flashref::cuda::kernels::sm90 {

inline constexpr int kF32BlockCols = 32;  // float32 columns per 128-byte swizzled row

// How an operand's TF32 halves are made (kernels/common/tf32.cuh): big rounded to nearest and
// clamped to TF32's largest finite value (any finite input; five instructions), rounded
// unclamped (inputs below float32's largest less 2^-12 of it; three), or truncated (any finite
// input; two, at twice the rounded pair's error of the split; its products err 4.4 times the
// rounded split's RMS and are biased toward zero: docs/verification.md, "3xTF32 products").
// rounded_satfinite: the halves of rounded_finite from one conversion (two instructions).
enum class Tf32Split { rounded_finite, rounded, truncated, rounded_satfinite };

template <Tf32Split kSplit>
__device__ __forceinline__ void split_operand(uint32_t& big, uint32_t& small, uint32_t x) {
  if constexpr (kSplit == Tf32Split::rounded_finite)
    split_tf32_raw_small_finite(big, small, x);
  else if constexpr (kSplit == Tf32Split::rounded)
    split_tf32_raw_small(big, small, x);
  else if constexpr (kSplit == Tf32Split::rounded_satfinite)
    split_tf32_satfinite(big, small, x);
  else
    split_tf32_trunc(big, small, x);
}

// The byte offset of row `row`, float column `col` (a multiple of 4 for a 16-byte chunk) in a
// tile of kRows rows as the TMA loads it.
template <int kRows>
__device__ __forceinline__ uint32_t f32_tile_offset(int row, int col) {
  return (col / kF32BlockCols) * (kRows * kSwizzleBytes) + row * kSwizzleBytes +
         ((((col % kF32BlockCols) / 4) ^ (row % 8)) * 16) + (col % 4) * 4;
}

// The big and small TF32 halves of a raw tile (kRows x kD float32, at `raw`) written K-major
// into tiles of the same layout at `big` and `small`, each 8 columns in A-fragment order (even
// columns, then odd): the B operand of a product that reduces over the tile's columns (K_j in
// S = Q K^T). Threads `x` of `threads` share the work, a pair of 16-byte chunks each time.
template <int kRows, int kD, Tf32Split kSplit>
__device__ __forceinline__ void split_k_major_tile(uint32_t raw, uint32_t big_tile,
                                                   uint32_t small_tile, int x, int threads) {
  for (int u = x; u < kRows * kD / 8; u += threads) {
    const int cb = u / (kRows * 4), row = (u / 4) % kRows, pair = u % 4;
    const uint32_t at0 =
        cb * (kRows * kSwizzleBytes) + row * kSwizzleBytes + (((2 * pair) ^ (row % 8)) * 16);
    const uint32_t at1 =
        cb * (kRows * kSwizzleBytes) + row * kSwizzleBytes + (((2 * pair + 1) ^ (row % 8)) * 16);
    uint32_t v[8], big[8], small[8];
    asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(v[0]), "=r"(v[1]), "=r"(v[2]), "=r"(v[3])
                 : "r"(raw + at0));
    asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(v[4]), "=r"(v[5]), "=r"(v[6]), "=r"(v[7])
                 : "r"(raw + at1));
#pragma unroll
    for (int e = 0; e < 8; ++e) split_operand<kSplit>(big[e], small[e], v[e]);
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(big_tile + at0), "r"(big[0]),
                 "r"(big[2]), "r"(big[4]), "r"(big[6]));
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(big_tile + at1), "r"(big[1]),
                 "r"(big[3]), "r"(big[5]), "r"(big[7]));
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(small_tile + at0),
                 "r"(small[0]), "r"(small[2]), "r"(small[4]), "r"(small[6]));
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(small_tile + at1),
                 "r"(small[1]), "r"(small[3]), "r"(small[5]), "r"(small[7]));
  }
}

// The split A fragment of k-step ks of a product that reduces over a raw tile's columns (Q_i in
// S = Q K^T; the tile has kRows rows): rows r_lo and r_lo + 8 (wgmma's TF32 A layout), at the
// positions t and t + 4, which hold columns 8 ks + 2t and 8 ks + 2t + 1, one 8-byte load a row.
template <int kRows, Tf32Split kSplit>
__device__ __forceinline__ void a_fragment_rows(uint32_t (&big)[4], uint32_t (&small)[4],
                                                uint32_t tile, int r_lo, int ks, int t) {
  const int blk = ks / 4, chunk = (ks % 4) * 2 + t / 2;
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    const int r = r_lo + 8 * hf;
    const uint32_t at = tile + blk * (kRows * kSwizzleBytes) + r * kSwizzleBytes +
                        ((chunk ^ (r % 8)) * 16) + (t % 2) * 8;
    uint32_t x0, x1;
    asm volatile("ld.shared.v2.b32 {%0, %1}, [%2];\n" : "=r"(x0), "=r"(x1) : "r"(at));
    split_operand<kSplit>(big[hf], small[hf], x0);
    split_operand<kSplit>(big[2 + hf], small[2 + hf], x1);
  }
}

}  // namespace flashref::cuda::kernels::sm90

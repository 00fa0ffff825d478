// The fragment loops the bf16/f16 tensor-core kernels repeat (ptx.cuh has the layouts): C tiles
// repacked as the A operand of the next product, and that operand times a shared-memory tile
// whose rows are the reduction index.
#pragma once

#include <cstdint>

#include "kernels/ptx.cuh"

namespace flashref::cuda::kernels {

// Accumulator tiles 2 kp and 2 kp + 1 (16 rows x 16 reduction columns) rounded to the element
// type: A fragment kp of the next product. P~ and dS go from one mma to the next this way,
// without leaving registers.
template <typename Element, int kKP>
__device__ __forceinline__ void pack_a_frags(uint32_t (&a)[kKP][4], const float (&c)[2 * kKP][4]) {
  using M = Mma<Element>;
#pragma unroll
  for (int kp = 0; kp < kKP; ++kp) {
    a[kp][0] = M::pack(c[2 * kp][0], c[2 * kp][1]);
    a[kp][1] = M::pack(c[2 * kp][2], c[2 * kp][3]);
    a[kp][2] = M::pack(c[2 * kp + 1][0], c[2 * kp + 1][1]);
    a[kp][3] = M::pack(c[2 * kp + 1][2], c[2 * kp + 1][3]);
  }
}

// acc (16 x 8 kDT) += A (16 x 16 kKP) X, for a row-major (16 kKP x 8 kDT) tile X in shared
// memory (row stride kStride) read transposed with ldmatrix; (bt_row, bt_col) is the lane's
// ldmatrix address within a 16 x 16 block (dS K_j, P^T dO_i, dS^T Q_i).
template <typename Element, int kKP, int kDT, int kStride>
__device__ __forceinline__ void mma_a_frags_times_tile(float (&acc)[kDT][4],
                                                       const uint32_t (&a)[kKP][4],
                                                       const Element* tile, int bt_row,
                                                       int bt_col) {
  using M = Mma<Element>;
#pragma unroll
  for (int kp = 0; kp < kKP; ++kp)
#pragma unroll
    for (int dp = 0; dp < kDT / 2; ++dp) {
      uint32_t bx[4];
      ldmatrix_x4_trans(bx, smem_addr(tile + (kp * 16 + bt_row) * kStride + dp * 16 + bt_col));
      M::run(acc[2 * dp], a[kp], bx[0], bx[1]);
      M::run(acc[2 * dp + 1], a[kp], bx[2], bx[3]);
    }
}

}  // namespace flashref::cuda::kernels

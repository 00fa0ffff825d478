// Operand policy of the sm80 family for bf16 / f16 inputs: what the tensor-core kernels
// (fwd.cuh, bwd_dq.cuh, bwd_dkdv.cuh) do with an operand, on mma.sync m16n8k16 (layouts in
// mma_sync.cuh). Its twins for float32 inputs on TF32 tensor cores are Sm80Tf32Ops
// (ops_tf32.cuh, allow_tf32) and Sm80Tf32x3Ops (ops_3xtf32.cuh, exact float32 as 3xTF32); the
// kernels take any of them as T::Ops and are otherwise the same code.
//
// What a policy decides:
//   Element          the type of the operand tiles in shared memory
//   kPad             padding of a tile row (elements), against bank conflicts
//   kK               reduction width of one mma (16 here); kBN keys or columns per B load
//   Lane             the lane's fixed addresses inside a fragment, computed once per kernel
//   load_a/_b_rows/_b_cols   fragment loads (here ldmatrix, one instruction per 16 x 16 block)
//   mma_group        the mma instructions one B load feeds
//   a_frags_from_c   a C tile (P~, dS) turned into the A operand of the next product (here:
//                    two adjacent C tiles rounded to bf16/f16 and packed)
//   kRoundsTiles     whether a tile is rounded in shared memory once it lands (no: the inputs
//                    are already bf16/f16)
//   kLabel           the kernels' suffix in error messages: fwd_mma, fwd_tf32, fwd_3xtf32
//   kHoistsLoads     whether the compiler may hoist the fragment loads of a fully unrolled
//                    reduction loop (then every load of a tile is live at once, and a loop
//                    reading its A operand from shared memory stays rolled)
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/common/ptx.cuh"
#include "kernels/common/tile_io.cuh"
#include "kernels/sm80/mma_sync.cuh"

namespace flashref::cuda::kernels {

template <typename E>
struct Sm80Fp16Ops {
  using Element = E;
  static constexpr int kPad = 8;  // 16 bytes: the 8 rows one ldmatrix reads start in 8 banks
  static constexpr int kK = 16;   // m16n8k16
  static constexpr int kBN = 16;  // one ldmatrix_x4 of B covers two 8-wide mma tiles
  static constexpr int kHeadDimMultiple = 16;
  static constexpr bool kRoundsTiles = false;
  static constexpr bool kHoistsLoads = false;  // ldmatrix is volatile asm, kept in place
  static constexpr const char* kLabel = "mma";

  // The lane's (row, col) inside a 16 x 16 block, for ldmatrix (one row address per lane):
  // an A fragment (a_), B read from the rows of a tile (b_), and B read from a row-major tile
  // transposed (t_: the tile's rows are the reduction index).
  struct Lane {
    int a_row, a_col, b_row, b_col, t_row, t_col;
    __device__ __forceinline__ explicit Lane(int lane)
        : a_row((lane % 8) + ((lane / 8) % 2) * 8),
          a_col((lane / 16) * 8),
          b_row((lane % 8) + (lane / 16) * 8),
          b_col(((lane / 8) % 2) * 8),
          t_row((lane % 8) + ((lane / 8) % 2) * 8),
          t_col((lane / 16) * 8) {}
  };
  using BFrag = uint32_t[4];

  // Each load gets its address in two forms (FLASHREF_LANE_AT, sm80/lane_at.cuh): the lane's
  // pointer, formed in the kernel, and its parts. ldmatrix takes the pointer.
  //
  // A fragment: rows [row0, row0 + 16), reduction columns [k0, k0 + 16) of a row-major tile.
  static __device__ __forceinline__ void load_a(uint32_t (&a)[4], const E* p, const E*, int, int,
                                                int, int, int) {
    ldmatrix_x4(a, smem_addr(p));
  }
  // B fragments of Y^T for a row-major (n x k) tile Y: its rows n0..n0+15 are the columns of
  // two mma tiles, the reduction runs along Y's rows (K_j in Q K^T, Q_i in K Q^T).
  static __device__ __forceinline__ void load_b_rows(BFrag& b, const E* p, const E*, int, int, int,
                                                     int, int) {
    ldmatrix_x4(b, smem_addr(p));
  }
  // B fragments of a row-major (k x n) tile Z, read transposed: reduction rows k0..k0+15,
  // columns n0..n0+15 (V_j in P~ V_j).
  static __device__ __forceinline__ void load_b_cols(BFrag& b, const E* p, const E*, int, int, int,
                                                     int, int) {
    ldmatrix_x4_trans(b, smem_addr(p));
  }
  // C tiles i' = kBN / 8 * i .. of c += a b, for the B load b of group i.
  template <int kN>
  static __device__ __forceinline__ void mma_group(float (&c)[kN][4], int i, const uint32_t (&a)[4],
                                                   const BFrag& b) {
    Mma<E>::run(c[2 * i], a, b[0], b[1]);
    Mma<E>::run(c[2 * i + 1], a, b[2], b[3]);
  }

  // Accumulator tiles 2 kp and 2 kp + 1 (16 rows x 16 reduction columns) rounded to the element
  // type: A fragment kp of the next product. P~ and dS go from one mma to the next this way,
  // without leaving registers.
  template <int kNT>
  static __device__ __forceinline__ void a_frags_from_c(uint32_t (&a)[kNT / 2][4],
                                                        const float (&c)[kNT][4]) {
#pragma unroll
    for (int kp = 0; kp < kNT / 2; ++kp) {
      a[kp][0] = pack_pair<E>(c[2 * kp][0], c[2 * kp][1]);
      a[kp][1] = pack_pair<E>(c[2 * kp][2], c[2 * kp][3]);
      a[kp][2] = pack_pair<E>(c[2 * kp + 1][0], c[2 * kp + 1][1]);
      a[kp][3] = pack_pair<E>(c[2 * kp + 1][2], c[2 * kp + 1][3]);
    }
  }

  // acc (16 x 8 kDT) += A (16 x 16 kKP) X, for a row-major (16 kKP x 8 kDT) tile X in shared
  // memory read transposed (dS K_j, P^T dO_i, dS^T Q_i).
  template <int kKP, int kDT, int kStride>
  static __device__ __forceinline__ void a_frags_times_tile(float (&acc)[kDT][4],
                                                            const uint32_t (&a)[kKP][4],
                                                            const E* tile, const Lane& l) {
#pragma unroll
    for (int kp = 0; kp < kKP; ++kp)
#pragma unroll
      for (int dp = 0; dp < kDT / 2; ++dp) {
        uint32_t bx[4];
        ldmatrix_x4_trans(bx, smem_addr(tile + (kp * 16 + l.t_row) * kStride + dp * 16 + l.t_col));
        Mma<E>::run(acc[2 * dp], a[kp], bx[0], bx[1]);
        Mma<E>::run(acc[2 * dp + 1], a[kp], bx[2], bx[3]);
      }
  }

  // Nothing to round: bf16/f16 tiles are used as they land.
  template <int kRows, int kD, int kStride, int kThreads>
  static __device__ __forceinline__ void round_tile(E*, int) {}
};

}  // namespace flashref::cuda::kernels

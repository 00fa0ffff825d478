// Operand policy of the sm80 family for float32 inputs with allow_tf32: the tensor-core
// kernels (fwd.cuh, bwd_dq.cuh, bwd_dkdv.cuh) on TF32 mma.sync; the bf16/f16 twin, and the
// list of what a policy decides, are in ops_fp16.cuh.
//
// mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 (PTX ISA, "Matrix fragments for
// mma.m16n8k8", .tf32), for lane = 4 g + t, one 32-bit value per register:
//   A (16 x 8, row-major):  a0 = (g, t), a1 = (g + 8, t), a2 = (g, t + 4), a3 = (g + 8, t + 4)
//   B (8 x 8, "col"):       b0 = (k t, n g), b1 = (k t + 4, n g)
//   C (16 x 8, float):      c0, c1 = (g, 2t), (g, 2t + 1); c2, c3 = (g + 8, 2t), (g + 8, 2t + 1)
//
// A C tile gives its thread columns 2t and 2t + 1, not the t and t + 4 of an A fragment. The
// order of a product's reduction index is ours to choose, so a C tile (P~, dS) becomes an A
// fragment with no shuffle by relabelling: reduction index t is column 2t and index t + 4 is
// column 2t + 1 (a_from_c); the other operand is then read at rows 2t and 2t + 1 (load_b_cols).
//
// Operands are rounded with cvt.rna.tf32.f32 (round to nearest, ties away from zero), the
// rounding reference/include/flashref/reference/tf32.hpp models: tiles in shared memory once,
// by the thread that copied each chunk (round_own_chunks_tf32), P~ and dS in registers.
//
// Shared-memory tiles are float32 with rows padded to kD + 4 floats (kD a multiple of 32), so
// row r starts 4 r banks further on: every fragment load below touches 32 distinct banks
// (rows g, columns t: banks 4 g + t; rows 2t, column g: banks 8 t + g).
#pragma once

#include <cstdint>

#include "kernels/common/tf32.cuh"
#include "kernels/common/tile_io.cuh"

namespace flashref::cuda::kernels {

// c += a b on TF32 tensor cores, float32 accumulation.
__device__ __forceinline__ void mma_tf32(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// A C tile (rows g, g + 8; columns 2t, 2t + 1) rounded to TF32, as the A fragment of the next
// product under the relabelling above.
__device__ __forceinline__ void a_from_c(uint32_t (&a)[4], const float (&c)[4]) {
  a[0] = to_tf32(c[0]);
  a[1] = to_tf32(c[2]);
  a[2] = to_tf32(c[1]);
  a[3] = to_tf32(c[3]);
}

// Rounds to TF32, in place, the 16-byte chunks of a kRows x kD float tile that thread `tid`
// copied with load_tile_async<kRows, kD, kStride, kThreads> (the same chunk mapping). Call it
// after cp_async_wait has covered those copies (they are then visible to this thread) and
// before the barrier that publishes the tile; zero-filled chunks stay zero.
template <int kRows, int kD, int kStride, int kThreads>
__device__ __forceinline__ void round_own_chunks_tf32(float* smem, int tid) {
  constexpr int kChunksPerRow = kD / 4;
  constexpr int kTotal = kRows * kChunksPerRow;
#pragma unroll
  for (int i = 0; i < (kTotal + kThreads - 1) / kThreads; ++i) {
    const int c = tid + i * kThreads;
    if (kTotal % kThreads == 0 || c < kTotal) {
      float4* p =
          reinterpret_cast<float4*>(smem + (c / kChunksPerRow) * kStride + (c % kChunksPerRow) * 4);
      float4 v = *p;
      v.x = __uint_as_float(to_tf32(v.x));
      v.y = __uint_as_float(to_tf32(v.y));
      v.z = __uint_as_float(to_tf32(v.z));
      v.w = __uint_as_float(to_tf32(v.w));
      *p = v;
    }
  }
}

struct Sm80Tf32Ops {
  using Element = float;
  static constexpr int kPad = 4;               // floats: the bank argument above
  static constexpr int kK = 8;                 // m16n8k8
  static constexpr int kBN = 8;                // one B load per 8-wide mma tile
  static constexpr int kHeadDimMultiple = 32;  // the bank padding needs kD a multiple of 32
  static constexpr bool kRoundsTiles = true;
  static constexpr bool kHoistsLoads = true;  // plain shared-memory loads
  static constexpr const char* kLabel = "tf32";

  // The lane's indices in the layouts above: (g, t) for every access; load_b_cols relabels
  // them itself (rows 2t, 2t + 1, column g).
  struct Lane {
    int a_row, a_col, b_row, b_col, t_row, t_col;
    __device__ __forceinline__ explicit Lane(int lane)
        : a_row(lane / 4),
          a_col(lane % 4),
          b_row(lane / 4),
          b_col(lane % 4),
          t_row(lane / 4),
          t_col(lane % 4) {}
  };
  using BFrag = uint32_t[2];

  // Each load gets its address in two forms (FLASHREF_LANE_AT, sm80/lane_at.cuh); the TF32
  // loads form their own addresses from the parts (the lane's pointer goes unused).
  //
  // A fragment: rows [row0, row0 + 16) and reduction columns [k0, k0 + 8) of a row-major tile
  // already rounded to TF32 (Q_i, dO_i, K_j, V_j as the left operand).
  static __device__ __forceinline__ void load_a(uint32_t (&a)[4], const float*, const float* tile,
                                                int stride, int row0, int k0, int g, int t) {
    const float* p = tile + (row0 + g) * stride + k0 + t;
    a[0] = __float_as_uint(p[0]);
    a[1] = __float_as_uint(p[8 * stride]);
    a[2] = __float_as_uint(p[4]);
    a[3] = __float_as_uint(p[8 * stride + 4]);
  }
  // B fragment of Y^T for a row-major (n x k) tile Y: columns n0..n0+7 are rows of Y, the
  // reduction runs along Y's rows (K_j in S = Q_i K_j^T, V_j in dP = dO_i V_j^T, Q_i in
  // S^T = K_j Q_i^T).
  static __device__ __forceinline__ void load_b_rows(BFrag& b, const float*, const float* tile,
                                                     int stride, int n0, int k0, int g, int t) {
    const float* p = tile + (n0 + g) * stride + k0 + t;
    b[0] = __float_as_uint(p[0]);
    b[1] = __float_as_uint(p[4]);
  }
  // B fragment of a row-major (k x n) tile Z whose reduction index is relabelled as a_from_c
  // relabels it: reduction rows k0 + 2t (index t) and k0 + 2t + 1 (index t + 4), column n0 + g
  // (V_j in P~ V_j, K_j in dS K_j, dO_i in P^T dO_i, Q_i in dS^T Q_i).
  static __device__ __forceinline__ void load_b_cols(BFrag& b, const float*, const float* tile,
                                                     int stride, int k0, int n0, int g, int t) {
    const float* p = tile + (k0 + 2 * t) * stride + n0 + g;
    b[0] = __float_as_uint(p[0]);
    b[1] = __float_as_uint(p[stride]);
  }
  // C tile i of c += a b.
  template <int kN>
  static __device__ __forceinline__ void mma_group(float (&c)[kN][4], int i, const uint32_t (&a)[4],
                                                   const BFrag& b) {
    mma_tf32(c[i], a, b[0], b[1]);
  }

  // Accumulator tiles rounded to TF32 as the A fragments of the next product (P~, dS).
  template <int kNT>
  static __device__ __forceinline__ void a_frags_from_c(uint32_t (&a)[kNT][4],
                                                        const float (&c)[kNT][4]) {
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) a_from_c(a[nt], c[nt]);
  }

  // acc (16 x 8 kDT) += A (16 x 8 kNT, from a_frags_from_c) Z, for a row-major (8 kNT x 8 kDT)
  // tile Z read at the relabelled rows (load_b_cols): dS K_j, P^T dO_i, dS^T Q_i.
  template <int kNT, int kDT, int kStride>
  static __device__ __forceinline__ void a_frags_times_tile(float (&acc)[kDT][4],
                                                            const uint32_t (&a)[kNT][4],
                                                            const float* tile, const Lane& l) {
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int dt = 0; dt < kDT; ++dt) {
        BFrag b;
        load_b_cols(b, nullptr, tile, kStride, nt * 8, dt * 8, l.t_row, l.t_col);
        mma_tf32(acc[dt], a[nt], b[0], b[1]);
      }
  }

  // Q_i, K_j, V_j, dO_i rounded once they land (round_own_chunks_tf32).
  template <int kRows, int kD, int kStride, int kThreads>
  static __device__ __forceinline__ void round_tile(float* smem, int tid) {
    round_own_chunks_tf32<kRows, kD, kStride, kThreads>(smem, tid);
  }
};

}  // namespace flashref::cuda::kernels

// The exact float32 path (no TF32): register-tiled FFMA products on shared-memory tiles.
//
// 128 threads as 8 rows x 16 columns of threads (ty, tx). For a score-like tile (rows x cols)
// thread (ty, tx) owns rows f32_row(ty, i) = ty + 8 i (a 16-lane half-warp shares them, so row
// reductions are 4 shuffles; the two half-warps of a warp read adjacent rows, which with rows
// padded by 4 floats sit in different banks) and columns tx + 16 j (so the 16 lanes read 16
// consecutive rows of the other operand, again in distinct banks). For an output-like tile
// (rows x head dim) the same thread owns rows f32_row(ty, i) and head-dim columns
// jj * 16 * VW + tx * VW + v, VW = min(4, D / 16), read as VW-wide vectors. Every sum runs in a
// fixed order, so results are bitwise reproducible.
#pragma once

#include <cstdint>

namespace flashref::cuda::kernels {

inline constexpr int kF32Threads = 128;

// Row i of thread row ty. Rows ty * TM + i (contiguous) put the two half-warps of a warp 8 rows
// apart, in the same banks: a 2-way conflict on every operand read.
__device__ __forceinline__ int f32_row(int ty, int i) {
  return ty + 8 * i;
}

// The backward's lane order (run 7, docs/perf-notes.md): the same (ty, tx) pairs per warp as
// tid / 16, tid % 16, with lane bit 0 picking ty and lane bits 1-4 giving tx. Lanes n and n^1
// then share tx (every B-operand row of f32_gemm_rows, every row chunk of f32_gemm_out's
// right operand) and lanes n and n^2 share ty (every A-operand and P row): both of the
// hardware's LDS.128 packing rules hold, and each such load takes 2 shared-memory wavefronts
// instead of up to 4. Which lane computes an element changes, not how: results are bitwise
// the same. The forward keeps tid / 16, tid % 16, because its row sums shuffle over the 16
// lanes of a row in that order.
__device__ __forceinline__ int f32_bwd_ty(int tid) {
  return 2 * (tid / 32) + (tid & 1);
}
__device__ __forceinline__ int f32_bwd_tx(int tid) {
  return (tid % 32) / 2;
}

template <int kD_, int kBlockM_, int kBlockN_>
struct F32Shape {
  static constexpr int kD = kD_, kBlockM = kBlockM_, kBlockN = kBlockN_;
  static constexpr int kStride = kD + 4;  // row stride of Q/K/V/dO tiles (floats)
  static constexpr int kVW = kD / 16 < 4 ? kD / 16 : 4;
  static constexpr int kOC = kD / 16;  // head-dim columns per thread
  static_assert(kD % 16 == 0 && kBlockM % 16 == 0 && kBlockN % 16 == 0, "shapes in 16s");
};

template <int kVW>
struct FloatVec;
template <>
struct FloatVec<1> {
  float v[1];
  __device__ __forceinline__ void load(const float* p) { v[0] = *p; }
};
template <>
struct FloatVec<2> {
  float v[2];
  __device__ __forceinline__ void load(const float* p) {
    const float2 x = *reinterpret_cast<const float2*>(p);
    v[0] = x.x;
    v[1] = x.y;
  }
};
template <>
struct FloatVec<4> {
  float v[4];
  __device__ __forceinline__ void load(const float* p) {
    const float4 x = *reinterpret_cast<const float4*>(p);
    v[0] = x.x;
    v[1] = x.y;
    v[2] = x.z;
    v[3] = x.w;
  }
};

// acc[i][j] += sum_k A[ty*TM + i][k] * B[tx + 16 j][k]: a product with both operands row-major
// over the reduction dim k (S = Q K^T, dP = dO V^T, and their transposes).
template <int TM, int TN, int kK, int kStrideA, int kStrideB>
__device__ __forceinline__ void f32_gemm_rows(float (&acc)[TM][TN], const float* sA,
                                              const float* sB, int ty, int tx) {
#pragma unroll 1
  for (int k = 0; k < kK; k += 4) {
    float4 a[TM], bb[TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
      a[i] = *reinterpret_cast<const float4*>(sA + f32_row(ty, i) * kStrideA + k);
#pragma unroll
    for (int j = 0; j < TN; ++j)
      bb[j] = *reinterpret_cast<const float4*>(sB + (tx + 16 * j) * kStrideB + k);
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j) {
        float s = acc[i][j];
        s = fmaf(a[i].x, bb[j].x, s);
        s = fmaf(a[i].y, bb[j].y, s);
        s = fmaf(a[i].z, bb[j].z, s);
        s = fmaf(a[i].w, bb[j].w, s);
        acc[i][j] = s;
      }
  }
}

// acc[i][c] += sum_k P[ty*TM + i][k] * V[k][col(c)]: a score-like tile times a row-major
// (keys x head dim) tile (O += P~ V, dQ += dS K, dV += P^T dO, dK += dS^T Q).
template <int TM, int kOC, int kVW, int kK, int kStrideP, int kStrideV>
__device__ __forceinline__ void f32_gemm_out(float (&acc)[TM][kOC], const float* sP,
                                             const float* sV, int ty, int tx) {
  constexpr int kGroups = kOC / kVW;
#pragma unroll 1
  for (int k = 0; k < kK; k += 4) {
    float4 p[TM];
#pragma unroll
    for (int i = 0; i < TM; ++i)
      p[i] = *reinterpret_cast<const float4*>(sP + f32_row(ty, i) * kStrideP + k);
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      FloatVec<kVW> v[kGroups];
#pragma unroll
      for (int jj = 0; jj < kGroups; ++jj)
        v[jj].load(sV + (k + kk) * kStrideV + jj * 16 * kVW + tx * kVW);
#pragma unroll
      for (int i = 0; i < TM; ++i) {
        const float pk = kk == 0 ? p[i].x : kk == 1 ? p[i].y : kk == 2 ? p[i].z : p[i].w;
#pragma unroll
        for (int jj = 0; jj < kGroups; ++jj)
#pragma unroll
          for (int v2 = 0; v2 < kVW; ++v2)
            acc[i][jj * kVW + v2] = fmaf(pk, v[jj].v[v2], acc[i][jj * kVW + v2]);
      }
    }
  }
}

// Head-dim column of the thread's c-th output value.
template <int kVW>
__device__ __forceinline__ int f32_out_col(int c, int tx) {
  return (c / kVW) * 16 * kVW + tx * kVW + c % kVW;
}

// Sum over the 16 lanes (tx) that share a row.
__device__ __forceinline__ float row_sum16(float x) {
#pragma unroll
  for (int off = 8; off > 0; off /= 2) x += __shfl_xor_sync(0xffffffffu, x, off);
  return x;
}
__device__ __forceinline__ float row_max16(float x) {
#pragma unroll
  for (int off = 8; off > 0; off /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, off));
  return x;
}

}  // namespace flashref::cuda::kernels

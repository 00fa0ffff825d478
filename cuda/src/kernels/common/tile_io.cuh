// Moving tiles between global and shared memory, shared by every kernel.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "kernels/common/args.hpp"
#include "kernels/common/ptx.cuh"

namespace flashref::cuda::kernels {

__host__ __device__ constexpr int ceil_div(int a, int b) {
  return (a + b - 1) / b;
}
__device__ __forceinline__ int64_t min64(int64_t a, int64_t b) {
  return a < b ? a : b;
}
__device__ __forceinline__ int64_t max64(int64_t a, int64_t b) {
  return a > b ? a : b;
}

// The 16-byte vector a tile of T moves in: float4 for float, uint4 for the 16-bit types.
template <typename T>
using Chunk16 = std::conditional_t<std::is_same_v<T, float>, float4, uint4>;

// (lo, hi) rounded to nearest even in E (bf16 or f16) and packed in 32 bits, lo in the low 16
// bits (the smaller column): an mma operand pair, or two staged output columns.
template <typename E>
__device__ __forceinline__ uint32_t pack_pair(float lo, float hi) {
  if constexpr (std::is_same_v<E, __nv_bfloat16>) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  } else {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
}

// One element of a tile as float.
__device__ __forceinline__ float to_float(float x) {
  return x;
}
__device__ __forceinline__ float to_float(__half x) {
  return __half2float(x);
}
__device__ __forceinline__ float to_float(__nv_bfloat16 x) {
  return __bfloat162float(x);
}

// Start of row `row` of head `h` in batch `b` of a tensor (64-bit offsets throughout: a tensor
// may hold more than 2^31 elements).
template <typename T>
__device__ __forceinline__ T* row_ptr(const TensorArg& t, int b, int row, int h) {
  return static_cast<T*>(t.ptr) + static_cast<int64_t>(b) * t.batch_stride +
         static_cast<int64_t>(h) * t.head_stride + static_cast<int64_t>(row) * t.row_stride;
}

// Element offset of row `row` of head `h` in batch `b` (for outputs whose dtype is a run-time
// value, addressed through store4).
__device__ __forceinline__ int64_t row_offset(const TensorArg& t, int b, int row, int h) {
  return static_cast<int64_t>(b) * t.batch_stride + static_cast<int64_t>(h) * t.head_stride +
         static_cast<int64_t>(row) * t.row_stride;
}

// Copies a kRows x kD tile (row i at g + i * row_stride) into shared memory with row stride
// kStride elements, asynchronously, in 16-byte chunks. Rows >= rows_valid and columns >= d are
// zero-filled: a zero row of K/V or Q adds nothing, and V's zeros keep 0 * garbage out of O.
template <int kRows, int kD, int kStride, int kThreads, typename T>
__device__ __forceinline__ void load_tile_async(T* smem, const T* g, int64_t row_stride,
                                                int rows_valid, int d, int tid) {
  constexpr int kChunkElems = 16 / sizeof(T);
  constexpr int kChunksPerRow = kD / kChunkElems;
  constexpr int kTotal = kRows * kChunksPerRow;
  static_assert(kD % kChunkElems == 0, "tile width must be a whole number of 16-byte chunks");
#pragma unroll
  for (int i = 0; i < ceil_div(kTotal, kThreads); ++i) {
    const int c = tid + i * kThreads;
    if (kTotal % kThreads == 0 || c < kTotal) {
      const int r = c / kChunksPerRow;
      const int col = (c % kChunksPerRow) * kChunkElems;
      const bool pred = r < rows_valid && col < d;
      // A predicated-off copy reads nothing, but still gets a valid address.
      const T* src = pred ? g + static_cast<int64_t>(r) * row_stride + col : g;
      cp_async_16(smem_addr(smem + r * kStride + col), src, pred);
    }
  }
}

// Copies rows < rows_valid and columns < d of a kRows x kD tile from shared memory (row stride
// kStride elements) to rows of stride row_stride starting at g, in 16-byte chunks: the reverse
// of load_tile_async, for an output tile staged in its own dtype.
template <int kRows, int kD, int kStride, int kThreads, typename T>
__device__ __forceinline__ void store_tile(const T* smem, T* g, int64_t row_stride, int rows_valid,
                                           int d, int tid) {
  constexpr int kChunkElems = 16 / sizeof(T);
  constexpr int kChunksPerRow = kD / kChunkElems;
  constexpr int kTotal = kRows * kChunksPerRow;
#pragma unroll
  for (int i = 0; i < ceil_div(kTotal, kThreads); ++i) {
    const int c = tid + i * kThreads;
    const int r = c / kChunksPerRow, col = (c % kChunksPerRow) * kChunkElems;
    if (c < kTotal && r < rows_valid && col < d)
      *reinterpret_cast<Chunk16<T>*>(g + static_cast<int64_t>(r) * row_stride + col) =
          *reinterpret_cast<const Chunk16<T>*>(smem + r * kStride + col);
  }
}

// Writes one float, converted to dtype `code`, at element offset `off`.
__device__ __forceinline__ void store1(void* base, int code, int64_t off, float v) {
  if (code == kOutF32)
    static_cast<float*>(base)[off] = v;
  else if (code == kOutF16)
    static_cast<__half*>(base)[off] = __float2half_rn(v);
  else
    static_cast<__nv_bfloat16*>(base)[off] = __float2bfloat16_rn(v);
}

// Writes 4 floats, converted to the output dtype, at element offset `off` of `base`.
__device__ __forceinline__ void store4(void* base, int code, int64_t off, float4 v) {
  if (code == kOutF32) {
    *reinterpret_cast<float4*>(static_cast<float*>(base) + off) = v;
  } else if (code == kOutF16) {
    __half2 a = __floats2half2_rn(v.x, v.y), b = __floats2half2_rn(v.z, v.w);
    uint2 u;
    u.x = *reinterpret_cast<uint32_t*>(&a);
    u.y = *reinterpret_cast<uint32_t*>(&b);
    *reinterpret_cast<uint2*>(static_cast<__half*>(base) + off) = u;
  } else {
    __nv_bfloat162 a = __floats2bfloat162_rn(v.x, v.y), b = __floats2bfloat162_rn(v.z, v.w);
    uint2 u;
    u.x = *reinterpret_cast<uint32_t*>(&a);
    u.y = *reinterpret_cast<uint32_t*>(&b);
    *reinterpret_cast<uint2*>(static_cast<__nv_bfloat16*>(base) + off) = u;
  }
}

// Copies a kRows x kD float tile from shared memory (row stride kStride) to rows starting at
// element offset `off` of a tensor of dtype `code`, rows < rows_valid and columns < d only,
// 4 elements per store. kUnroll > 0 unrolls its loop that many times instead of fully, for a
// caller short of registers (every load of the unrolled loop may be in flight at once).
template <int kRows, int kD, int kStride, int kThreads, int kUnroll = 0>
__device__ __forceinline__ void store_tile_f32(const float* smem, void* base, int code, int64_t off,
                                               int64_t row_stride, int rows_valid, int d, int tid) {
  constexpr int kChunksPerRow = kD / 4;
  constexpr int kTotal = kRows * kChunksPerRow;
  auto chunk = [&](int i) {
    const int c = tid + i * kThreads;
    if (kTotal % kThreads == 0 || c < kTotal) {
      const int r = c / kChunksPerRow;
      const int col = (c % kChunksPerRow) * 4;
      if (r < rows_valid && col < d) {
        const float4 v = *reinterpret_cast<const float4*>(smem + r * kStride + col);
        store4(base, code, off + static_cast<int64_t>(r) * row_stride + col, v);
      }
    }
  };
  if constexpr (kUnroll > 0) {
#pragma unroll kUnroll
    for (int i = 0; i < ceil_div(kTotal, kThreads); ++i) chunk(i);
  } else {
#pragma unroll
    for (int i = 0; i < ceil_div(kTotal, kThreads); ++i) chunk(i);
  }
}

}  // namespace flashref::cuda::kernels

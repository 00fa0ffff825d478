// Writing results: staging accumulator fragments in shared memory, the forward's tile of rows
// that see no key, and the backward's gradient tiles.
#pragma once

#include <cstdint>
#include <type_traits>

#include "kernels/common/args.hpp"
#include "kernels/common/ptx.cuh"
#include "kernels/common/tile_io.cuh"

namespace flashref::cuda::kernels {

// Two adjacent columns (lo, hi) of an accumulator row as a staging tile of element type E
// holds them: rounded to 16 bits and packed, lo in the smaller column; or a float2. (Kernels
// store it as `*reinterpret_cast<StagedPair<E>*>(address) = staged_pair<E>(lo, hi)`, which
// computes the value before the address, as the kernels always have.)
template <typename E>
__device__ __forceinline__ auto staged_pair(float lo, float hi) {
  if constexpr (std::is_same_v<E, float>)
    return make_float2(lo, hi);
  else
    return pack_pair<E>(lo, hi);
}
template <typename E>
using StagedPair = decltype(staged_pair<E>(0.0f, 0.0f));

// 16 zero bytes, in the vector type a tile of E moves in (tile_io.cuh, Chunk16).
template <typename E>
__device__ __forceinline__ Chunk16<E> zero_chunk16() {
  if constexpr (std::is_same_v<E, float>)
    return make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  else
    return make_uint4(0, 0, 0, 0);
}

// A forward query tile none of whose rows sees a key (bottom-right causal, S_q > S_k):
// O = 0 and L = -inf for its rows below rows_valid, in 16-byte chunks.
template <int kRows, int kD, int kThreads, typename E>
__device__ __forceinline__ void write_fully_masked_tile(E* o_tile, int64_t row_stride,
                                                        float* lse_rows, int rows_valid, int d,
                                                        int tid) {
  constexpr int kChunkElems = 16 / sizeof(E);
  constexpr int kChunks = kD / kChunkElems;
  for (int c = tid; c < kRows * kChunks; c += kThreads) {
    const int r = c / kChunks, col = (c % kChunks) * kChunkElems;
    if (r < rows_valid && col < d)
      *reinterpret_cast<Chunk16<E>*>(o_tile + static_cast<int64_t>(r) * row_stride + col) =
          zero_chunk16<E>();
  }
  for (int r = tid; r < rows_valid; r += kThreads) lse_rows[r] = -INFINITY;
}

// A backward gradient tile (dK_j or dV_j) from its float accumulator, each warp holding
// 16 rows as C fragments (lane_row = warp_row0 + g): acc * mul staged as float in sOut (row
// stride kOutStride), then rows < rows_valid and columns < d written in the gradient dtype to
// rows row0.. of head h of `out`. Ends with sOut still being read: the caller must reach a
// barrier before writing sOut again.
template <int kRows, int kD, int kOutStride, int kThreads>
__device__ __forceinline__ void write_acc_tile(float* sOut, const float (&acc)[kD / 8][4],
                                               float mul, const TensorArg& out,
                                               const AttnArgs& args, int b, int row0, int h,
                                               int rows_valid, int d, int lane_row, int t,
                                               int tid) {
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    const int r = lane_row + hf * 8;
#pragma unroll
    for (int dt = 0; dt < kD / 8; ++dt)
      *reinterpret_cast<float2*>(sOut + r * kOutStride + dt * 8 + 2 * t) =
          make_float2(acc[dt][hf * 2] * mul, acc[dt][hf * 2 + 1] * mul);
  }
  __syncthreads();
  store_tile_f32<kRows, kD, kOutStride, kThreads>(sOut, out.ptr, args.grad_code,
                                                  row_offset(out, b, row0, h), out.row_stride,
                                                  rows_valid, d, tid);
}

// The dQ pass's tile: dQ_i = scale * (dS K) from its float accumulator, staged and written as
// write_acc_tile does (the scale read here, where the kernels always read it).
template <int kRows, int kD, int kOutStride, int kThreads>
__device__ __forceinline__ void write_dq_tile(float* sOut, const float (&acc)[kD / 8][4],
                                              const AttnArgs& args, int b, int row0, int h,
                                              int rows_valid, int d, int lane_row, int t, int tid) {
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    const int r = lane_row + hf * 8;
#pragma unroll
    for (int dt = 0; dt < kD / 8; ++dt)
      *reinterpret_cast<float2*>(sOut + r * kOutStride + dt * 8 + 2 * t) =
          make_float2(acc[dt][hf * 2] * args.scale, acc[dt][hf * 2 + 1] * args.scale);
  }
  __syncthreads();
  store_tile_f32<kRows, kD, kOutStride, kThreads>(sOut, args.dq.ptr, args.grad_code,
                                                  row_offset(args.dq, b, row0, h),
                                                  args.dq.row_stride, rows_valid, d, tid);
}

}  // namespace flashref::cuda::kernels

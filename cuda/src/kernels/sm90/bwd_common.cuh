// Pieces the two sm90 backward kernels share: the 1-D bulk copy that brings a row vector of the
// workspace (L' or D) into shared memory on a TMA barrier, and the epilogue that writes a
// consumer's float accumulator tile in the gradient dtype.
#pragma once

#include <cstdint>

#include "kernels/common/args.hpp"
#include "kernels/common/tile_io.cuh"
#include "kernels/sm90/hopper.cuh"

namespace flashref::cuda::kernels::sm90 {

// `bytes` (a multiple of 16, both addresses 16-byte aligned) from global to shared memory,
// completing on `bar` like a tensor load. The workspace rows are padded (kWorkspaceRowPad), so
// a tile's vector is always in bounds.
__device__ __forceinline__ void bulk_load(uint32_t dst, const void* src, uint32_t bytes,
                                          uint32_t bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::
          "r"(dst),
      "l"(reinterpret_cast<uint64_t>(src)), "r"(bytes), "r"(bar)
      : "memory");
}

// A consumer warpgroup's 64 x kD float accumulator (the wgmma layout: warp w, lane 4g + t holds
// rows 16w + g (+ 8) and columns 8i + 2t (+ 1) in acc[4i + 2hf + e]) times `mul`, staged through
// shared memory (sOut, kRows x (kD + 4) floats, every consumer's rows) and written in the
// gradient dtype, rows < rows_valid and columns < d only. `bar` is a named barrier over the
// kThreads consumer threads (the producer has left): once to publish the staged tile, once so
// that the next use of sOut waits for the stores. kUnroll: store_tile_f32's.
template <int kRows, int kD, int kThreads, int kUnroll = 0>
__device__ __forceinline__ void store_consumer_tile(float* sOut, const float (&acc)[kD / 2],
                                                    float mul, const TensorArg& out, int code,
                                                    int64_t offset, int rows_valid, int d,
                                                    int lane_row, int t, int ctid, int bar) {
  constexpr int kOutStride = kD + 4;
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    const int r = lane_row + hf * 8;
#pragma unroll
    for (int i = 0; i < kD / 8; ++i)
      *reinterpret_cast<float2*>(sOut + r * kOutStride + 8 * i + 2 * t) =
          make_float2(acc[4 * i + 2 * hf] * mul, acc[4 * i + 2 * hf + 1] * mul);
  }
  named_bar_sync(bar, kThreads);
  store_tile_f32<kRows, kD, kOutStride, kThreads, kUnroll>(sOut, out.ptr, code, offset,
                                                           out.row_stride, rows_valid, d, ctid);
  named_bar_sync(bar, kThreads);
}

}  // namespace flashref::cuda::kernels::sm90

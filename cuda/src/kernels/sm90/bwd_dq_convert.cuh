// dQ out of the ordered fused backward's float32 accumulator by the fused kernel's own warps
// (BwdTraitsConvertDq, a tuning variant: FLASHREF_CUDA_TUNE fused90=5), instead of by the
// postprocess kernel after it (bwd_postprocess.cuh, which this does tile for tile: v + 0, times
// the scale, in the gradient dtype, zeros for a tile no key tile sees).
//
// A query tile is complete when its semaphore (bwd_dkdv.cuh's ordered adds, one per key tile
// whose walk includes it) reaches its count of such key tiles. Converting warps take tiles from
// a counter of their own (AttnArgs::dq_convert_counter) in the order the key tiles complete
// them (dq_tiles.hpp's dq_convert_tile). Each warp waits for its tile's count and converts it.
// The producer warpgroup's idle warp converts from the start; the others join once their part
// of the kernel is done, so the tiles that complete last (without a mask, all of a section's)
// are converted by every warp of the blocks that have finished.
#pragma once

#include <cstdint>

#include "kernels/common/args.hpp"
#include "kernels/common/tile_io.cuh"
#include "kernels/sm90/dq_tiles.hpp"
#include "kernels/sm90/hopper.cuh"

namespace flashref::cuda::kernels::sm90 {

// Two floats, the gradient dtype's, at element offset `off` (even: d is a multiple of 8).
__device__ __forceinline__ void store2(void* base, int code, int64_t off, float x, float y) {
  if (code == kOutF32) {
    *reinterpret_cast<float2*>(static_cast<float*>(base) + off) = make_float2(x, y);
  } else if (code == kOutF16) {
    *reinterpret_cast<__half2*>(static_cast<__half*>(base) + off) = __floats2half2_rn(x, y);
  } else {
    *reinterpret_cast<__nv_bfloat162*>(static_cast<__nv_bfloat16*>(base) + off) =
        __floats2bfloat162_rn(x, y);
  }
}

// Called by whole warps: tiles from the counter until none is left. kBatch float4 loads of a
// lane are in flight at once (the producer warpgroup's warps have few registers: one,
// BwdTraitsConvertDq::kProducerConvertBatch; the consumers' 8).
template <int kD, int kBlockM, int kBlockN, int kBatch>
__device__ __forceinline__ void convert_dq_tiles(const AttnArgs& args, int lane) {
  constexpr int kChunks = kDqTileRows * kD / 4;  // float4s of a tile
  static_assert(kChunks % (32 * kBatch) == 0, "whole batches of the warp's chunks");
  const int total = ceil_div(args.S_q, kDqTileRows) * args.group * args.B * args.H_kv;
  for (;;) {
    int c = 0;
    if (lane == 0) c = atomicAdd(args.dq_convert_counter, 1);
    c = __shfl_sync(0xffffffffu, c, 0);
    if (c >= total) return;
    const DqTile dq = dq_convert_tile(args, c);
    const int b = dq.b, h = dq.h, row_tile = dq.row_tile;
    const int64_t tile =
        (static_cast<int64_t>(b) * args.H + h) * (args.S_q_pad / kDqTileRows) + row_tile;
    const int m0 = row_tile * kDqTileRows;
    const int adders = dq_adders<kBlockM, kBlockN>(args, m0 / kBlockM);
    if (adders > 0) {  // every lane acquires the count, then reads what the adds wrote
      const int* sem = args.dq_semaphore + tile;
      while (!semaphore_reads(sem, adders)) __nanosleep(128);
    }
    const float4* src = reinterpret_cast<const float4*>(args.dq_accum) + tile * kChunks;
    const int64_t out0 = row_offset(args.dq, b, m0, h);
    const int rows_valid = args.S_q - m0;
#pragma unroll 1
    for (int first = lane; first < kChunks; first += 32 * kBatch) {
      float4 v[kBatch];
#pragma unroll
      for (int u = 0; u < kBatch; ++u)
        v[u] = adders > 0 ? src[first + 32 * u] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        // float4 k of thread x (bwd_postprocess.cuh's layout): rows 16 w + g and + 8, columns
        // 8 k + 2 t and + 1, for x = 32 w + 4 g + t.
        const int i = first + 32 * u, k = i / 128, x = i % 128;
        const int row = 16 * (x / 32) + (x % 32) / 4, col = 8 * k + 2 * (x % 4);
        auto out = [&](float f) { return __fadd_rn(f, 0.0f) * args.scale; };
        if (col < args.d) {
          if (row < rows_valid)
            store2(args.dq.ptr, args.grad_code, out0 + row * args.dq.row_stride + col, out(v[u].x),
                   out(v[u].y));
          if (row + 8 < rows_valid)
            store2(args.dq.ptr, args.grad_code, out0 + (row + 8) * args.dq.row_stride + col,
                   out(v[u].z), out(v[u].w));
        }
      }
    }
  }
}

}  // namespace flashref::cuda::kernels::sm90

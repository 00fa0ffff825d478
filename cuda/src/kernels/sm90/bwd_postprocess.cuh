// dQ out of the sm90 fused backward's float32 accumulator (kernels/sm90/bwd_dkdv.cuh): times
// the softmax scale, in the gradient dtype, at dQ's strides.
#pragma once

#include "kernels/common/args.hpp"
#include "kernels/common/tile_io.cuh"

namespace flashref::cuda::kernels::sm90 {

// One block of 128 threads per (query tile, head, batch). A tile of the accumulator is in the
// register order of the warpgroup that made it: float4 k of thread x = 32 w + 4 g + t holds
// rows 16 w + g (.x, .y) and 16 w + g + 8 (.z, .w), columns 8 k + 2 t and 8 k + 2 t + 1.
// kFirstStore: the ordered adds stored their first (bwd_dkdv.cuh's BwdTraitsDqFirstStore) into
// an accumulator nobody zeroed, counting them in the tile's semaphore: a tile no key tile saw
// (0 adds) was never written, and its dQ is zeros. The stored first add may leave a -0 where
// adding it to a zeroed accumulator gave +0 (0 + -0 = +0; the sums after it keep the two equal
// but for that sign), so each value is taken as v + 0: a zeroed accumulator's bits.
template <int kD, bool kFirstStore>
__device__ __forceinline__ void dq_postprocess_tile(const AttnArgs& args) {
  constexpr int kRows = kDqTileRows, kStride = kD + 4;
  __shared__ __align__(16) float tile[kRows * kStride];
  const int m_tiles_pad = args.S_q_pad / kRows;
  const int bh = blockIdx.x / m_tiles_pad, m0 = (blockIdx.x % m_tiles_pad) * kRows;
  if (m0 >= args.S_q) return;  // padding tiles hold zeros and have no rows to write
  const int b = bh / args.H, h = bh % args.H;
  const float4* src = reinterpret_cast<const float4*>(args.dq_accum) +
                      static_cast<int64_t>(blockIdx.x) * (kRows * kD / 4);
  const int x = threadIdx.x, row = 16 * (x / 32) + (x % 32) / 4, t = x % 4;
  if constexpr (kFirstStore) {
    const bool added = args.dq_semaphore[blockIdx.x] != 0;
    auto out = [&](float v) { return __fadd_rn(v, 0.0f) * args.scale; };
#pragma unroll
    for (int k = 0; k < kD / 8; ++k) {
      const float4 v = added ? src[k * 128 + x] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      float* at = tile + row * kStride + 8 * k + 2 * t;
      *reinterpret_cast<float2*>(at) = make_float2(out(v.x), out(v.y));
      *reinterpret_cast<float2*>(at + 8 * kStride) = make_float2(out(v.z), out(v.w));
    }
  } else {
#pragma unroll
    for (int k = 0; k < kD / 8; ++k) {
      const float4 v = src[k * 128 + x];
      float* at = tile + row * kStride + 8 * k + 2 * t;
      *reinterpret_cast<float2*>(at) = make_float2(v.x * args.scale, v.y * args.scale);
      *reinterpret_cast<float2*>(at + 8 * kStride) =
          make_float2(v.z * args.scale, v.w * args.scale);
    }
  }
  __syncthreads();
  store_tile_f32<kRows, kD, kStride, 128>(tile, args.dq.ptr, args.grad_code,
                                          row_offset(args.dq, b, m0, h), args.dq.row_stride,
                                          min(kRows, args.S_q - m0), args.d, x);
}

// The kernels: a name each, so that the first keeps its symbol (scripts/sass-compare's key).
template <int kD>
__global__ void __launch_bounds__(128) bwd_dq_postprocess_kernel(const AttnArgs args) {
  dq_postprocess_tile<kD, false>(args);
}
template <int kD>
__global__ void __launch_bounds__(128) bwd_dq_postprocess_first_store_kernel(const AttnArgs args) {
  dq_postprocess_tile<kD, true>(args);
}

}  // namespace flashref::cuda::kernels::sm90

// Backward preprocessing (Alg. 2 line 2): D = rowsum(dO * O), and L (moved to the log2 domain
// for the tensor-core kernels), both into the padded (B * H, S_q_pad) workspace the two
// backward kernels read without predicates. One warp per row; any head dim and alignment
// (scalar, coalesced loads).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/common/args.hpp"
#include "kernels/common/tile_io.cuh"

namespace flashref::cuda::kernels {

__device__ __forceinline__ float to_float(float x) {
  return x;
}
__device__ __forceinline__ float to_float(__half x) {
  return __half2float(x);
}
__device__ __forceinline__ float to_float(__nv_bfloat16 x) {
  return __bfloat162float(x);
}

inline constexpr int kPreprocessWarps = 8;

// kNaturalLog: write L instead of L * log2(e) into args.lse2 (the float32 kernels' form).
template <typename Element, bool kNaturalLog>
__global__ void __launch_bounds__(kPreprocessWarps * 32)
    bwd_preprocess_kernel(const AttnArgs args) {
  constexpr float kLog2e = 1.4426950408889634f;
  const int lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kPreprocessWarps + threadIdx.x / 32;
  if (row >= static_cast<int64_t>(args.B) * args.H * args.S_q_pad) return;
  const int bh = static_cast<int>(row / args.S_q_pad), r = static_cast<int>(row % args.S_q_pad);
  const int b = bh / args.H, h = bh % args.H;
  float D = 0.0f;
  float lse2 = INFINITY;  // padding rows: P = 2^(s - inf) = 0
  if (r < args.S_q) {
    const Element* o = row_ptr<const Element>(args.o, b, r, h);
    const Element* dO = row_ptr<const Element>(args.dO, b, r, h);
    if constexpr (kNaturalLog) {
      // float32: one sequential FFMA chain over the head dim, the order in which the float32
      // kernels form dP = dO V^T (bwd_f32.cuh says why).
      if (lane == 0)
        for (int i = 0; i < args.d; ++i) D = fmaf(to_float(dO[i]), to_float(o[i]), D);
    } else {
      for (int i = lane; i < args.d; i += 32) D += to_float(o[i]) * to_float(dO[i]);
#pragma unroll
      for (int off = 16; off > 0; off /= 2) D += __shfl_xor_sync(0xffffffffu, D, off);
    }
    const float L = args.lse[static_cast<int64_t>(bh) * args.S_q + r];
    // A fully masked row has L = -inf; +inf here makes its P exactly 0 (not 2^(-inf + inf)).
    // The float32 kernels take L itself (natural log, see bwd_f32.cuh); the tensor-core
    // kernels L' = L * log2(e).
    const float guarded = L == -INFINITY ? INFINITY : L;
    lse2 = kNaturalLog ? guarded : guarded * kLog2e;
  }
  if (lane == 0) {
    args.dsum[row] = D;
    args.lse2[row] = lse2;
  }
}

}  // namespace flashref::cuda::kernels

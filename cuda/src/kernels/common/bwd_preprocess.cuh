// Backward preprocessing (Alg. 2 line 2): D = rowsum(dO * O), and L (moved to the log2 domain
// for the tensor-core kernels), both into the padded (B * H, S_q_pad) workspace the backward
// kernels read without predicates.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/common/args.hpp"
#include "kernels/common/tile_io.cuh"

namespace flashref::cuda::kernels {

inline constexpr int kPreprocessWarps = 8;

// The exact float32 kernels' preprocess: L itself (natural log) into args.lse2, and D as one
// sequential FFMA chain over the head dim, the order in which they form dP = dO V^T
// (bwd_f32.cuh says why). One warp per row.
template <typename Element>
__global__ void __launch_bounds__(kPreprocessWarps * 32)
    bwd_preprocess_natural_log_kernel(const AttnArgs args) {
  const int lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kPreprocessWarps + threadIdx.x / 32;
  if (row >= static_cast<int64_t>(args.B) * args.H * args.S_q_pad) return;
  const int bh = static_cast<int>(row / args.S_q_pad), r = static_cast<int>(row % args.S_q_pad);
  const int b = bh / args.H, h = bh % args.H;
  float D = 0.0f;
  float lse = INFINITY;  // padding rows: P = e^(s - inf) = 0
  if (r < args.S_q) {
    const Element* o = row_ptr<const Element>(args.o, b, r, h);
    const Element* dO = row_ptr<const Element>(args.dO, b, r, h);
    if (lane == 0)
      for (int i = 0; i < args.d; ++i) D = fmaf(to_float(dO[i]), to_float(o[i]), D);
    const float L = args.lse[static_cast<int64_t>(bh) * args.S_q + r];
    lse = L == -INFINITY ? INFINITY : L;  // a fully masked row: P exactly 0
  }
  if (lane == 0) {
    args.dsum[row] = D;
    args.lse2[row] = lse;
  }
}

// The tensor-core kernels' preprocess: L' = L log2(e) and D = rowsum(dO * O), and for a fused
// dQ the row's float32 accumulator (accum_cols floats; 0 where the ordered adds store their
// first, dispatch.cu's dq_first_store) and, once per 64-row tile, its counter zeroed (and once
// the persistent kernel's tile counters), so that no memset runs beside it. A group of
// kPreprocessRowThreads threads per row, each loading 16-byte vectors of O and dO (the backend
// requires 16-byte aligned rows, and the tensor-core families a head dim that is a multiple of
// the vector, family.cpp). Run 18a's profile (docs/perf-notes.md) measured the kernel before it,
// one warp per row of scalar loads and a 64-bit division per row, at 137 us on
// FlashAttention-3's S = 1k problem (B 32, H 16), a third of the bandwidth; cuDNN's does the
// same and zeroes its accumulator in 68 us.
inline constexpr int kPreprocessRowThreads = 8;
inline constexpr int kPreprocessRows = kPreprocessWarps * 32 / kPreprocessRowThreads;

template <typename Element>
__global__ void __launch_bounds__(kPreprocessWarps * 32)
    bwd_preprocess_kernel(const AttnArgs args, int accum_cols) {
  constexpr float kLog2e = 1.4426950408889634f;
  constexpr int kVec = 16 / sizeof(Element);
  const int part = threadIdx.x % kPreprocessRowThreads;
  const int64_t rows = static_cast<int64_t>(args.B) * args.H * args.S_q_pad;
  const int64_t row =
      static_cast<int64_t>(blockIdx.x) * kPreprocessRows + threadIdx.x / kPreprocessRowThreads;
  if (row >= rows) return;  // the row's whole group leaves together
  int bh, r;
  if (rows <= INT32_MAX) {  // 32-bit division where it fits (64-bit is a long call)
    bh = static_cast<int>(static_cast<uint32_t>(row) / static_cast<uint32_t>(args.S_q_pad));
    r = static_cast<int>(row) - bh * args.S_q_pad;
  } else {
    bh = static_cast<int>(row / args.S_q_pad);
    r = static_cast<int>(row - static_cast<int64_t>(bh) * args.S_q_pad);
  }
  float D = 0.0f;
  if (r < args.S_q) {
    const int b = bh / args.H, h = bh - b * args.H;
    const Element* o = row_ptr<const Element>(args.o, b, r, h);
    const Element* dO = row_ptr<const Element>(args.dO, b, r, h);
    for (int c = part * kVec; c < args.d; c += kPreprocessRowThreads * kVec) {
      const uint4 ov = *reinterpret_cast<const uint4*>(o + c);
      const uint4 dv = *reinterpret_cast<const uint4*>(dO + c);
      const Element* oe = reinterpret_cast<const Element*>(&ov);
      const Element* de = reinterpret_cast<const Element*>(&dv);
#pragma unroll
      for (int e = 0; e < kVec; ++e) D = fmaf(to_float(oe[e]), to_float(de[e]), D);
    }
  }
  const unsigned group =
      0xffu << (threadIdx.x % 32 / kPreprocessRowThreads * kPreprocessRowThreads);
#pragma unroll
  for (int off = kPreprocessRowThreads / 2; off > 0; off /= 2) D += __shfl_xor_sync(group, D, off);
  if (part == 0) {
    float lse2 = INFINITY;  // padding rows: P = 2^(s - inf) = 0
    if (r < args.S_q) {
      const float L = args.lse[static_cast<int64_t>(bh) * args.S_q + r];
      // A fully masked row has L = -inf; +inf here makes its P exactly 0 (not 2^(-inf + inf)).
      lse2 = L == -INFINITY ? INFINITY : L * kLog2e;
    }
    args.dsum[row] = D;
    args.lse2[row] = lse2;
    if (args.dq_semaphore != nullptr && r % kDqTileRows == 0)
      args.dq_semaphore[row / kDqTileRows] = 0;
    if (args.tile_counter != nullptr && row == 0) *args.tile_counter = 0;
  }
  if (accum_cols > 0) {
    float4* accum = reinterpret_cast<float4*>(args.dq_accum + row * accum_cols);
    for (int v = part; v < accum_cols / 4; v += kPreprocessRowThreads)
      accum[v] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
}

}  // namespace flashref::cuda::kernels

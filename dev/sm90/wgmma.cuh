// Hopper (sm_90a) building blocks for the wgmma experiments in dev/sm90: the library's own
// (cuda/src/kernels/common/ptx.cuh, tile_io.cuh, kernels/sm90/hopper.cuh and wgmma.cuh, which
// began here), under the names the experiments were written with, plus the two pieces only
// experiment 1 needs: the swizzled placement of a 16-byte chunk written by cp.async, and the
// proxy fence that makes such writes visible to wgmma.
//
// Build with -I cuda/src -I include (dev/sm90/README.md).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "kernels/common/ptx.cuh"
#include "kernels/common/tile_io.cuh"
#include "kernels/sm90/hopper.cuh"
#include "kernels/sm90/wgmma.cuh"

namespace flashref::dev::sm90 {

using namespace flashref::cuda::kernels;        // smem_addr, cp.async, fast_exp2, pack_pair
using namespace flashref::cuda::kernels::sm90;  // descriptors, wgmma, mbarriers, TMA, setmaxnreg

using bf16_t = __nv_bfloat16;
using f16_t = __half;

__device__ __forceinline__ uint32_t smem_u32(const void* p) { return smem_addr(p); }

// Byte offset of 16-byte chunk `c` (0..7) of row `r` inside a swizzled 128-byte-row block.
__device__ __forceinline__ uint32_t swizzled_chunk(int r, int c) {
  return static_cast<uint32_t>(r * 128 + ((c ^ (r & 7)) << 4));
}

__device__ __forceinline__ uint64_t make_desc(uint32_t smem_byte_addr, uint32_t lbo_bytes,
                                              uint32_t sbo_bytes) {
  return make_smem_desc(smem_byte_addr, lbo_bytes, sbo_bytes);
}

// Makes ordinary (generic-proxy) shared-memory writes, cp.async's included, visible to the
// tensor cores' reads through descriptors (the async proxy).
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

template <int N>
__device__ __forceinline__ void fence_regs(float (&d)[N]) {
  fence_registers(d);
}

template <typename Element>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  return pack_pair<Element>(lo, hi);
}

}  // namespace flashref::dev::sm90

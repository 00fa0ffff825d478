// Thin wrappers over the PTX instructions every kernel family uses: cp.async (16-byte
// global -> shared copies, on sm_80 and newer), ex2.approx and an opaque copy. The mma.sync and
// ldmatrix wrappers of the sm80 family are in sm80/mma_sync.cuh.
#pragma once

#include <cstdint>

namespace flashref::cuda::kernels {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte global -> shared copy that bypasses L1; when !pred nothing is read and the 16 bytes
// are zero-filled, which is how partial tiles and padded head dims get their zeros.
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool pred) {
  const int bytes = pred ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes));
}

__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}

template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// 2^x on the special-function unit. The kernels work in the log2 domain (scores multiplied by
// scale * log2(e) once), so this is the only exponential they need.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// v, through a move the compiler cannot see through or move: what is formed from the result
// is formed where it is used. For an epilogue's indices, which ptxas would otherwise form
// before the main loop and keep live (or spill) through it.
__device__ __forceinline__ int opaque(int v) {
  asm volatile("mov.b32 %0, %0;\n" : "+r"(v));
  return v;
}

}  // namespace flashref::cuda::kernels

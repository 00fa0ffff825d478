// Hopper (sm_90a) building blocks for the wgmma experiments in dev/sm90: shared-memory matrix
// descriptors for the 128-byte swizzle, the swizzled placement of a 16-byte chunk, and the
// warpgroup MMA wrappers (the library's cuda/src/kernels/sm90/wgmma_generated.inc).
//
// Shared-memory tiles here are "column blocks" of 64 16-bit elements (128 bytes) per row: a
// tile of R rows and kD columns is kD / 64 blocks of R x 128 bytes, one after the other, each
// starting on a 1024-byte boundary. Inside a block, row r's 16-byte chunk c sits at chunk
// c ^ (r % 8): the 128-byte swizzle (address bits [4:6] ^= bits [7:9]) that wgmma reads and
// that keeps the 8 rows of a core matrix in 8 different bank groups.
//
// Descriptors (PTX ISA, "Matrix Descriptor Format"; byte offsets are stored >> 4):
//   K-major  (Q and K as the A and B of S = Q K^T; the reduction dim is contiguous):
//     SBO = 1024 (the next 8 rows), LBO unused with a swizzle (1).
//     A k-step of 16 elements is +32 bytes inside the block; the next block starts a new one.
//   MN-major (V as the B of O = P V; the output dim d is contiguous, the reduction dim is rows):
//     SBO = 1024 (the next 8 reduction rows), LBO = one column block (the next 64 output
//     columns). A k-step of 16 rows is +2048 bytes.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace flashref::dev::sm90 {

using bf16_t = __nv_bfloat16;
using f16_t = __half;

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Byte offset of 16-byte chunk `c` (0..7) of row `r` inside a swizzled 128-byte-row block.
__device__ __forceinline__ uint32_t swizzled_chunk(int r, int c) {
  return static_cast<uint32_t>(r * 128 + ((c ^ (r & 7)) << 4));
}

__device__ __forceinline__ uint64_t make_desc(uint32_t smem_byte_addr, uint32_t lbo_bytes,
                                              uint32_t sbo_bytes) {
  uint64_t desc = 0;
  desc |= static_cast<uint64_t>((smem_byte_addr & 0x3FFFF) >> 4);
  desc |= static_cast<uint64_t>((lbo_bytes & 0x3FFFF) >> 4) << 16;
  desc |= static_cast<uint64_t>((sbo_bytes & 0x3FFFF) >> 4) << 32;
  desc |= static_cast<uint64_t>(1) << 62;  // 128-byte swizzle; base offset 0 (1024-aligned)
  return desc;
}

__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Makes ordinary (generic-proxy) shared-memory writes, cp.async's included, visible to the
// tensor cores' reads through descriptors (the async proxy).
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// Keeps the compiler from moving accumulator reads or writes across an in-flight wgmma.
template <int N>
__device__ __forceinline__ void fence_regs(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

template <typename Element, int N>
struct WgmmaSS;  // D(64 x N) (+)= A(64 x 16, smem, K-major) B(16 x N, smem, K-major)
template <typename Element, int N>
struct WgmmaRS;  // D(64 x N) (+)= A(64 x 16, registers) B(16 x N, smem, MN-major)

// The generated specializations are the library's (cuda/src/kernels/sm90/gen_wgmma.py).
#include "../../cuda/src/kernels/sm90/wgmma_generated.inc"

__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool pred) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(pred ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}


// --- mbarriers and the tensor memory accelerator (TMA) ---------------------------------------
// A stage's "full" barrier completes when the TMA has written every byte announced with
// expect_tx; its "empty" barrier completes when every consumer thread has arrived (done
// reading). Waits are by phase parity: a fresh barrier is in phase 0, so waiting for parity 1
// returns at once (how the producer finds every stage free at the start).
__device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count));
}
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred p;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
      "@!p bra WAIT_%=;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
// One box of a 4-D tensor map (d, S, H, B) into shared memory, completing on `bar`. Rows past
// the tensor's S are zero-filled by the hardware: partial tiles need no predicate.
__device__ __forceinline__ void tma_load_4d(uint32_t dst, const void* tmap, uint32_t bar, int c0,
                                            int c1, int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(tmap)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
      : "memory");
}
template <int N>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
// Named barrier among `threads` threads (a multiple of 32): sync waits, arrive does not.
__device__ __forceinline__ void named_bar_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_bar_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

template <typename Element>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (sizeof(Element) == 2 && std::is_same_v<Element, bf16_t>) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  } else {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
}

}  // namespace flashref::dev::sm90

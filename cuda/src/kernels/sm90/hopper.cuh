// Hopper (sm_90a) instructions the sm90 family uses, as small wrappers in the manner of
// kernels/common/ptx.cuh: shared-memory matrix descriptors for wgmma, wgmma's fences, mbarriers,
// TMA tensor loads, setmaxnreg and named barriers. The wgmma instructions themselves are in
// wgmma.cuh.
//
// Tiles in shared memory are "column blocks" of 64 16-bit elements (128 bytes) per row: a tile
// of R rows and kD columns is kD / 64 blocks of R x 128 bytes, one after the other, each starting
// on a 1024-byte boundary. Inside a block, row r's 16-byte chunk c sits at chunk c ^ (r % 8):
// the 128-byte swizzle (address bits [4:6] ^= bits [7:9]) that TMA writes with
// CU_TENSOR_MAP_SWIZZLE_128B and wgmma reads, and that puts the 8 rows of a core matrix in 8
// different bank groups.
//
// Descriptors (PTX ISA, "Matrix Descriptor Format"; byte offsets are stored >> 4):
//   K-major  (Q and K as the A and B of S = Q K^T: the reduction dim d is contiguous):
//     SBO = 1024 bytes (the next 8 rows); LBO is unused with a swizzle (1).
//     A k-step of 16 elements is +32 bytes inside a block; the next block starts a new one.
//   MN-major (V as the B of O = P V: the output dim d is contiguous, keys are rows):
//     SBO = 1024 bytes (the next 8 keys), LBO = one column block (the next 64 output columns).
//     A k-step of 16 keys is +2048 bytes.
#pragma once

#include <cstdint>

#include "kernels/sm90/register_split.hpp"

namespace flashref::cuda::kernels::sm90 {

inline constexpr int kSwizzleBytes = 128;  // one row of a column block
inline constexpr int kBlockCols = 64;      // 16-bit elements per row of a column block
inline constexpr int kSwizzleAtom = 1024;  // 8 rows: where the swizzle pattern repeats

__device__ __forceinline__ uint64_t make_smem_desc(uint32_t smem_addr, uint32_t lbo_bytes,
                                                   uint32_t sbo_bytes) {
  uint64_t desc = static_cast<uint64_t>((smem_addr & 0x3FFFF) >> 4);
  desc |= static_cast<uint64_t>((lbo_bytes & 0x3FFFF) >> 4) << 16;
  desc |= static_cast<uint64_t>((sbo_bytes & 0x3FFFF) >> 4) << 32;
  desc |= static_cast<uint64_t>(1) << 62;  // 128-byte swizzle; base offset 0 (1024-aligned)
  return desc;
}

// The descriptor of smem_addr + offset_bytes from that of smem_addr: the address field holds
// the address / 16 in its low 14 bits, and a block's shared memory lies below 256 KB, so the sum
// never carries out of the field. Added to the low word alone: one instruction a descriptor
// where make_smem_desc takes four (a step of the d = 64 fused backward builds 56 of them).
__device__ __forceinline__ uint64_t smem_desc_advance(uint64_t desc, uint32_t offset_bytes) {
  const uint32_t lo = static_cast<uint32_t>(desc) + (offset_bytes >> 4);
  return (desc & 0xFFFFFFFF00000000ull) | lo;
}

__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
// Waits until at most N of this warpgroup's committed wgmma groups are still running.
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Keeps the compiler from moving reads or writes of accumulator registers across a wgmma wait.
template <int N>
__device__ __forceinline__ void fence_registers(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// A stage's "full" barrier completes when the TMA has written every byte announced with
// expect_tx; its "empty" barrier completes when every consumer thread has arrived (done
// reading). Waits are by phase parity: a fresh barrier is in phase 0, so a wait for parity 1
// returns at once (how the producer finds every stage free at the start).
__device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count));
}
// Makes the barriers' initialization visible to the TMA unit before the first load uses them.
__device__ __forceinline__ void mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// `count` arrivals at once, from one thread (for the threads whose work it stands for).
__device__ __forceinline__ void mbar_arrive_count(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// The PTX of a wait: try_wait on [%0] for parity %1 (and HINT, its further operands) until the
// phase has completed.
#define FLASHREF_MBAR_WAIT_LOOP(HINT)                         \
  "{\n.reg .pred p;\n"                                        \
  "WAIT_%=:\n"                                                \
  "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1" HINT \
  ";\n"                                                       \
  "@!p bra WAIT_%=;\n}\n"
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(FLASHREF_MBAR_WAIT_LOOP("")::"r"(bar), "r"(parity) : "memory");
}

// One try of mbar_wait's: whether the phase of that parity has completed (the instruction may
// suspend the thread a while first).
__device__ __forceinline__ bool mbar_try_wait(uint32_t bar, uint32_t parity) {
  uint32_t done;
  asm volatile(
      "{\n.reg .pred p;\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      "selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done)
      : "r"(bar), "r"(parity)
      : "memory");
  return done != 0;
}
// mbar_wait whose every try may suspend the thread up to kSuspendNs (try_wait's suspendTimeHint)
// instead of the instruction's own system-dependent limit; the thread still resumes when the
// phase completes. For a thread that waits long and whose retries would take issue slots from
// the warps of its scheduler: run 40a counted 6.3 M instructions in the forward's retry loops
// at d = 64, S = 1k (six waits, the producer's among them), against cuDNN's 0.4 M.
template <uint32_t kSuspendNs>
__device__ __forceinline__ void mbar_wait_suspending(uint32_t bar, uint32_t parity) {
  asm volatile(FLASHREF_MBAR_WAIT_LOOP(", %2")::"r"(bar), "r"(parity), "n"(kSuspendNs) : "memory");
}

// mbar_wait for a thread that waits long and whose spinning would take issue slots from the
// busy warps of its scheduler (the forward's store warp, which waits a whole tile for each O):
// it sleeps between tries.
__device__ __forceinline__ void mbar_wait_sleeping(uint32_t bar, uint32_t parity) {
  while (!mbar_try_wait(bar, parity)) __nanosleep(256);
}

// A 32-bit word of shared memory one role of a block hands another under an mbarrier (the
// arrive releases it, the wait acquires it), by its shared address: a generic pointer would
// take two of the producer warpgroup's 40 registers.
__device__ __forceinline__ void st_shared_s32(uint32_t addr, int value) {
  asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(value) : "memory");
}
__device__ __forceinline__ int ld_shared_s32(uint32_t addr) {
  int value;
  asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(value) : "r"(addr) : "memory");
  return value;
}

// One box of a 4-D tensor map (d, S, H, B) into shared memory, completing on `bar`. Rows past
// the tensor's S and columns past its d are zero-filled: partial tiles and padded head dims
// need no predicate.
__device__ __forceinline__ void tma_load_4d(uint32_t dst, const void* tensor_map, uint32_t bar,
                                            int col, int row, int head, int batch) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(tensor_map)), "r"(col), "r"(row), "r"(head), "r"(batch),
      "r"(bar)
      : "memory");
}

// L2 eviction priorities for the accesses that take a cache policy (createpolicy): a line loaded
// or stored with evict_first goes before the others, one with evict_last after them.
__device__ __forceinline__ uint64_t l2_policy_evict_first() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
  return policy;
}
__device__ __forceinline__ uint64_t l2_policy_evict_last() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;\n" : "=l"(policy));
  return policy;
}

// tma_load_4d with an L2 cache policy (l2_policy_evict_first, l2_policy_evict_last).
__device__ __forceinline__ void tma_load_4d_hinted(uint32_t dst, const void* tensor_map,
                                                   uint32_t bar, int col, int row, int head,
                                                   int batch, uint64_t policy) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1, {%2, %3, %4, %5}], [%6], %7;\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(tensor_map)), "r"(col), "r"(row), "r"(head), "r"(batch),
      "r"(bar), "l"(policy)
      : "memory");
}

// One box from shared memory into a 4-D tensor map, as one bulk group of this thread: the
// other way of tma_load_4d. Rows past the tensor's S and columns past its d are not written.
__device__ __forceinline__ void tma_store_4d(const void* tensor_map, uint32_t src, int col, int row,
                                             int head, int batch) {
  asm volatile(
      "cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%1, %2, %3, %4}], [%5];\n"
      "cp.async.bulk.commit_group;\n" ::"l"(reinterpret_cast<uint64_t>(tensor_map)),
      "r"(col), "r"(row), "r"(head), "r"(batch), "r"(src)
      : "memory");
}

// tma_store_4d with an L2 cache policy.
__device__ __forceinline__ void tma_store_4d_hinted(const void* tensor_map, uint32_t src, int col,
                                                    int row, int head, int batch, uint64_t policy) {
  asm volatile(
      "cp.async.bulk.tensor.4d.global.shared::cta.bulk_group.L2::cache_hint"
      " [%0, {%1, %2, %3, %4}], [%5], %6;\n"
      "cp.async.bulk.commit_group;\n" ::"l"(reinterpret_cast<uint64_t>(tensor_map)),
      "r"(col), "r"(row), "r"(head), "r"(batch), "r"(src), "l"(policy)
      : "memory");
}

// Register reallocation between warpgroups (needs a register cap at entry: the kernel's
// __launch_bounds__(threads, 1)).
template <int N>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}

// Named barrier `id` (1..15; 0 is __syncthreads) among `threads` threads: sync waits for the
// count, arrive counts itself and goes on.
__device__ __forceinline__ void named_bar_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
// named_bar_sync that also tells every thread whether any of them passed `pred` true.
__device__ __forceinline__ bool named_bar_sync_any(int id, int threads, bool pred) {
  uint32_t any;
  asm volatile(
      "{\n .reg .pred p, q;\n setp.ne.u32 p, %1, 0;\n bar.red.or.pred q, %2, %3, p;\n"
      " selp.u32 %0, 1, 0, q;\n}\n"
      : "=r"(any)
      : "r"(static_cast<uint32_t>(pred)), "r"(id), "r"(threads)
      : "memory");
  return any != 0;
}
__device__ __forceinline__ void named_bar_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
// named_bar_arrive once `made` is computed: the barrier's id goes through min(id, id + (made >>
// 31)), which is id but not to ptxas, so the work that made `made` stays before the arrive
// (ptxas moves register-only work across a plain bar.arrive: FwdTraitsExpTurns).
__device__ __forceinline__ void named_bar_arrive_after(int id, int threads, uint32_t made) {
  asm volatile(
      "{\n .reg .u32 t;\n shr.u32 t, %2, 31;\n add.u32 t, t, %0;\n min.u32 t, t, %0;\n"
      " bar.arrive t, %1;\n}\n" ::"r"(id),
      "r"(threads), "r"(made)
      : "memory");
}
// The SM clock's low word, read where it stands among the barriers: a ticket whose value does
// not matter, only that it is read after the barrier before it (fwd_softmax.cuh's
// after_ticket).
__device__ __forceinline__ uint32_t clock_ticket() {
  uint32_t t;
  asm volatile("mov.u32 %0, %%clock;\n" : "=r"(t)::"memory");
  return t;
}

// Orders this thread's generic-proxy writes to shared memory before later async-proxy reads
// (wgmma operands, bulk copies out of shared memory); the readers still need a barrier.
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// The same between async-proxy writes to global memory (bulk reductions, complete) and the
// generic-proxy accesses around them (the semaphores that order them).
__device__ __forceinline__ void fence_proxy_async_global() {
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
}

// Four 8 x 8 matrices of 16-bit elements from a warp's registers to shared memory, each
// transposed: register j of lane 4g + t holds row g, columns 2t and 2t + 1 of matrix j (the
// mma C or A fragment), and lane 8j + r gives the address of stored row r of matrix j, which
// receives column r (8 elements, 16 bytes).
__device__ __forceinline__ void stmatrix_x4_trans(uint32_t addr, const uint32_t (&r)[4]) {
  asm volatile(
      "stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr),
      "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
      : "memory");
}

// The same without the transpose: lane 8j + r gives the address of row r of matrix j, which
// receives row r of the fragments (16 bytes).
__device__ __forceinline__ void stmatrix_x4(uint32_t addr, const uint32_t (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr),
               "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
               : "memory");
}

// dst[i] += src[i] for `bytes` of float32 (a multiple of 16, both 16-byte aligned), from shared
// memory into global memory by the TMA unit, as one bulk group of this thread.
__device__ __forceinline__ void bulk_reduce_add_f32(float* dst, uint32_t src, uint32_t bytes) {
  asm volatile(
      "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n"
      "cp.async.bulk.commit_group;\n" ::"l"(dst),
      "r"(src), "r"(bytes)
      : "memory");
}
// One box from shared memory into a 3-D tensor map at (c0, c1, c2), as one bulk group of this
// thread: the ordered dQ's first add, a plain store of a whole accumulator tile, which so needs
// no zeroed accumulator (bwd_dkdv.cuh). Made a tensor store in place of cp.async.bulk's plain
// copy in the hope that initcheck would count its writes; it counts neither (runs 34g, 35a), so
// launch.cuh marks the accumulator instead. The plain copy (no map to encode per call, no eighth
// kernel parameter) would now do as well: the simpler form, once a GPU call has timed it and
// compared its bits.
__device__ __forceinline__ void tma_store_3d(const void* tensor_map, uint32_t src, int c0, int c1,
                                             int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%1, %2, %3}], [%4];\n"
      "cp.async.bulk.commit_group;\n" ::"l"(reinterpret_cast<uint64_t>(tensor_map)),
      "r"(c0), "r"(c1), "r"(c2), "r"(src)
      : "memory");
}
// Waits until this thread's bulk groups are done reading shared memory (the source may be
// rewritten) ...
__device__ __forceinline__ void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
}
// ... or wholly complete, their writes to global memory performed.
__device__ __forceinline__ void bulk_wait_complete() {
  asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
}

// A counter in global memory that orders blocks: read it once, or wait until it reads `value`
// (acquire); add one (release).
__device__ __forceinline__ bool semaphore_reads(const int* sem, int value) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(sem) : "memory");
  return v == value;
}
__device__ __forceinline__ void semaphore_wait_equal(const int* sem, int value) {
  while (!semaphore_reads(sem, value)) {
  }
}
__device__ __forceinline__ void semaphore_release_add(int* sem) {
  asm volatile("red.release.gpu.global.add.s32 [%0], 1;\n" ::"l"(sem) : "memory");
}

}  // namespace flashref::cuda::kernels::sm90

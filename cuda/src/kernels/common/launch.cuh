// Host side of every kernel family's launchers: kernel labels for error messages, the
// shared-memory opt-in, the grids of the two schedules (kernels/common/schedule.cuh), the
// FLASHREF_CUDA_TUNE knob and the device's multiprocessor count. A family's launchers
// (kernels/<family>/launch.cuh) include this and their own kernels only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <type_traits>
#include <utility>

#include "check.hpp"
#include "flashref/error.hpp"
#include "kernels/common/args.hpp"
#include "kernels/common/tile_io.cuh"
#include "kernels/common/tune.hpp"

namespace flashref::cuda {

template <typename Element>
constexpr const char* element_name() {
  if constexpr (std::is_same_v<Element, __nv_bfloat16>)
    return "bf16";
  else if constexpr (std::is_same_v<Element, __half>)
    return "f16";
  else
    return "f32";
}

// "fwd_mma<bf16, d=64, 128x64, 128 threads, 55296 B smem>": what an error message names.
inline std::string kernel_label(const char* kernel, const char* element, int d, int bm, int bn,
                                int threads, int smem) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "%s<%s, d=%d, %dx%d, %d threads, %d B smem>", kernel, element, d,
                bm, bn, threads, smem);
  return buf;
}

// Once per kernel and device: the opt-in above 48 KB of dynamic shared memory, and the
// preference for the largest shared-memory carveout. An SM's split between L1 and shared
// memory is set when a block lands on it idle, from that kernel's needs; without the
// preference a grid that reaches idle SMs first (the dQ pass, launched first) leaves them
// configured for its own blocks, and a concurrent grid with larger blocks (the dK/dV pass)
// then fits one block per SM instead of two until the SM drains (docs/perf-notes.md, run 6).
// The kernels stage their tiles through cp.async.cg (L2 only), so the smaller L1 costs them
// nothing.
inline void configure_kernel(const void* kernel, int smem, const std::string& label) {
  static std::mutex mutex;
  static std::set<std::pair<const void*, int>> configured;  // (kernel, device)
  int device = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  std::lock_guard<std::mutex> lock(mutex);
  if (configured.count({kernel, device}) != 0) return;
  if (smem > 48 * 1024) {
    check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem),
               label + " (raising the shared memory limit)");
  }
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                  cudaSharedmemCarveoutMaxShared),
             label + " (preferring the largest shared-memory carveout)");
  configured.insert({kernel, device});
}

template <typename Kernel>
void launch_kernel(Kernel kernel, unsigned grid, int threads, int smem,
                   const kernels::AttnArgs& args, cudaStream_t stream, const std::string& label) {
  if (grid == 0) return;
  configure_kernel(reinterpret_cast<const void*>(kernel), smem, label);
  kernel<<<grid, threads, smem, stream>>>(args);
  check_cuda(cudaGetLastError(), label);
}

inline unsigned grid_size(long long tiles, long long heads, long long batch) {
  return static_cast<unsigned>(tiles * heads * batch);
}

// One block per query tile of every (query head, batch): the grid QueryTileSchedule decodes
// (kernels/schedule.cuh). T gives the tile and the block size.
template <typename T, typename Kernel>
void launch_per_query_tile(Kernel kernel, int smem, const kernels::AttnArgs& args,
                           cudaStream_t stream, const char* name, const char* element, int kD) {
  launch_kernel(kernel, grid_size(kernels::ceil_div(args.S_q, T::kBlockM), args.H, args.B),
                T::kThreads, smem, args, stream,
                kernel_label(name, element, kD, T::kBlockM, T::kBlockN, T::kThreads, smem));
}

// One block per key tile of every (key/value head, batch): the grid KeyTileSchedule decodes.
template <typename T, typename Kernel>
void launch_per_key_tile(Kernel kernel, int smem, const kernels::AttnArgs& args,
                         cudaStream_t stream, const char* name, const char* element, int kD) {
  launch_kernel(kernel, grid_size(kernels::ceil_div(args.S_k, T::kBlockN), args.H_kv, args.B),
                T::kThreads, smem, args, stream,
                kernel_label(name, element, kD, T::kBlockM, T::kBlockN, T::kThreads, smem));
}

// Benchmarking knob: FLASHREF_CUDA_TUNE="fwd=N,dq=N,dkdv=N,fwd90=N,f32=N,f32bwd=N,bwd90=N,
// order90=N,fused90=N,grid90=N,poison90=N" picks the rejected d = 64 alternatives of
// kernels/sm80/configs.hpp instead of variant 0 (fwd 1-3, dq 1, dkdv 1-2; and the 3xTF32
// float32 kernels' at d = 128, fwd 1 and dkdv 1), those of the sm90 forward (fwd90 1-4, 6, 7,
// 12, 15, kernels/sm90/configs.hpp; 13, 14 and 16-19, the 3xTF32 forward's halves; 20 d = 64's
// marked rows in the kernel or after it, the place the default does not take; 21 the other
// choice of narrow steps, sm90/fwd_traits.cuh's FwdTraitsNarrowSteps, and 22 narrow steps on d =
// 64's 192-row tiles at any S; 5 no ping-pong; 8 the softmax's tree max, 9 an eighth of its
// exponentials on the FMA pipe, 10 the other choice of the deferred rescale, 11 the deferral
// in one pass, 23 the wgmma descriptors advanced rather than built, 24 the consumer's index
// provably warp-uniform, 25 both, 26 25 with the deferral in one pass, 27 d = 128's O stored
// by a warp of the producer's, 29 that with narrow steps, 28 d = 64's short tiles up to
// S_q = 4096 (2048 without the mask), 30 L2's eviction priorities, 31 the producer suspending
// between its tries for a free stage, 32 the consumers' turns around the exponentials, 33
// and 34 the other choice of the pinned P~ V wait and of two P~ arrays, 35 d = 64's long-walk
// short tiles on every causal problem the short tiles take; configs.hpp), the float32 tiles
// (f32: 0 automatic, 1 large tiles, 2 small tiles, for the backward too;
// kernels/ffma/configs.hpp), the float32 backward's version (f32bwd: 0 paired lanes, 1 plain;
// on the sm90_3xtf32 family 7 and 8 one pass on wgmma, 9 ffma's two passes, 2-5 other groups,
// kernels/sm90/launch.cuh),
// the sm90 backward's deterministic dQ strategy (bwd90: 1 the one that is not the default,
// dispatch.cu's dq_strategy; both are always compiled), the sm90
// tile order's L2 budget (order90: 1 none, which numbers all heads together as before sections;
// 2 the whole L2's for every kernel, the budget before run 40a; 3 half; 4 sections of three
// heads whatever the sizes, for the tests; 5 and 6 the rule that keeps one section where a wave
// holds a few tiles of each head or more, dropped (5) or kept (6) by every kernel;
// kernels/sm90/launch.cuh), the sm90 fused backward's kernels (fused90: 1 a grid of a block per
// key tile with dQ's product in step, 2 the persistent grid with dQ's product in step, instead of
// deferred a step, both adding into a zeroed accumulator; 3 and 4 the deferred kernels with dK
// and dV stored by the TMA, or staged, at every S; kernels/sm90/configs.hpp), the persistent
// backward's grid (grid90: at most N blocks, so that the suites' small problems run many tiles
// a block), and a check, not a variant (poison90: 1 fills the ordered fused backward's dQ
// accumulator with NaN before the kernel that stores its first adds, dispatch.cu, so that a tile
// read unwritten reaches dQ).
// Read once (kernels/common/tune.hpp); an unknown key or a value out of its range is an
// InvalidArgument that names it.
//
// The alternatives are compiled only with the CMake option FLASHREF_CUDA_TUNING_VARIANTS
// (scripts/device-build turns it on for the GPU runs that time them): they are experiments
// kept beside the product, with their measured reasons in the configs and docs/perf-notes.md.
// Without it, asking for one (every non-zero value above except f32=1, fwd90=7 and 35, and
// fused90=4, which pick among the default kernels, f32bwd=6-9, the default's float32 backward or
// ffma's, bwd90=1, order90, grid90 and poison90) is an error that says so, never a quiet fall back
// to the default.
#ifndef FLASHREF_CUDA_TUNING_VARIANTS
#define FLASHREF_CUDA_TUNING_VARIANTS 0
#endif
inline constexpr bool kTuningVariants = FLASHREF_CUDA_TUNING_VARIANTS != 0;

using kernels::Tune;
inline const Tune& tune() {
  static const Tune t = kernels::parse_tune(std::getenv("FLASHREF_CUDA_TUNE"));
  if constexpr (!kTuningVariants) {
    if (t.fwd != 0 || t.dq != 0 || t.dkdv != 0 || (t.fwd90 != 0 && t.fwd90 != 7 && t.fwd90 != 35) ||
        t.f32 == 2 || (t.f32bwd != 0 && t.f32bwd < 6) || (t.fused90 != 0 && t.fused90 != 4)) {
      throw Unsupported(std::string("cuda backend: FLASHREF_CUDA_TUNE=\"") +
                        std::getenv("FLASHREF_CUDA_TUNE") +
                        "\" asks for a tuning variant, and this build has none compiled (they "
                        "are behind the CMake option FLASHREF_CUDA_TUNING_VARIANTS, OFF by "
                        "default; f32=1 alone needs none); unset it or rebuild with "
                        "-DFLASHREF_CUDA_TUNING_VARIANTS=ON");
    }
  }
  return t;
}

// An attribute of the current device, looked up once per device.
inline int device_attribute(cudaDeviceAttr attribute, const char* what) {
  static std::mutex mutex;
  static std::map<std::pair<int, int>, int> values;  // (device, attribute)
  int device = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  std::lock_guard<std::mutex> lock(mutex);
  const std::pair<int, int> key{device, static_cast<int>(attribute)};
  auto it = values.find(key);
  if (it != values.end()) return it->second;
  int n = 0;
  check_cuda(cudaDeviceGetAttribute(&n, attribute, device),
             std::string("cudaDeviceGetAttribute(") + what + ")");
  values.emplace(key, n);
  return n;
}

inline int sm_count() {
  return device_attribute(cudaDevAttrMultiProcessorCount, "multiprocessors");
}
inline long long l2_cache_bytes() {
  return device_attribute(cudaDevAttrL2CacheSize, "L2 size");
}

}  // namespace flashref::cuda

// Launchers: grid size, dynamic shared memory opt-in and error checks for each kernel. The
// explicit instantiations are spread over inst/*.cu so the build compiles them in parallel.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <type_traits>
#include <utility>

#include "check.hpp"
#include "kernels/configs.hpp"

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

// Benchmarking knob: FLASHREF_CUDA_TUNE="fwd=N,dq=N,dkdv=N,f32=N,f32bwd=N" picks the d = 64
// alternatives of configs.hpp instead of variant 0 (f32: 0 automatic, 1 large tiles, 2 small
// tiles; f32bwd: 0 the exact float32 backward with paired lanes, 1 the plain one, bwd_f32.cuh).
// Read once; unknown keys and values fall back to 0.
struct Tune {
  int fwd = 0, dq = 0, dkdv = 0, f32 = 0, f32bwd = 0;
};
inline const Tune& tune() {
  static const Tune t = [] {
    Tune r;
    const char* s = std::getenv("FLASHREF_CUDA_TUNE");
    if (s == nullptr) return r;
    const std::string str(s);
    auto read = [&](const char* key, int& out, int max) {
      const std::string k = std::string(key) + "=";
      const auto pos = str.find(k);
      if (pos == std::string::npos) return;
      const int v = std::atoi(str.c_str() + pos + k.size());
      out = v >= 0 && v <= max ? v : 0;
    };
    read("fwd", r.fwd, 3);
    read("dq", r.dq, 1);
    read("dkdv", r.dkdv, 2);
    read("f32", r.f32, 2);
    read("f32bwd", r.f32bwd, 1);
    return r;
  }();
  return t;
}

template <typename Element, int kD, int kVariant>
void run_fwd_mma_variant(const kernels::AttnArgs& args, cudaStream_t stream) {
  using T = typename kernels::FwdMmaConfig<Element, kD, kVariant>::Traits;
  launch_per_query_tile<T>(kernels::fwd_mma_kernel<T>, T::kSmemBytes, args, stream, "fwd_mma",
                           element_name<Element>(), kD);
}

template <typename Element, int kD>
void run_fwd_mma(const kernels::AttnArgs& args, cudaStream_t stream) {
  if constexpr (kD == 64) {
    switch (tune().fwd) {
      case 1:
        return run_fwd_mma_variant<Element, kD, 1>(args, stream);
      case 2:
        return run_fwd_mma_variant<Element, kD, 2>(args, stream);
      case 3:
        return run_fwd_mma_variant<Element, kD, 3>(args, stream);
      default:
        break;
    }
  }
  run_fwd_mma_variant<Element, kD, 0>(args, stream);
}

template <typename Element, int kD, int kVariant>
void run_bwd_dq_mma_variant(const kernels::AttnArgs& args, cudaStream_t stream) {
  using Dq = typename kernels::BwdDqMmaConfig<Element, kD, kVariant>::Traits;
  launch_per_query_tile<Dq>(kernels::bwd_dq_mma_kernel<Dq>, Dq::kSmemBytes, args, stream,
                            "bwd_dq_mma", element_name<Element>(), kD);
}

template <typename Element, int kD, int kVariant>
void run_bwd_dkdv_mma_variant(const kernels::AttnArgs& args, cudaStream_t stream) {
  using Dkv = typename kernels::BwdDkvMmaConfig<Element, kD, kVariant>::Traits;
  using Dkv2 = typename kernels::BwdDkvMmaConfig<Element, kD, kVariant>::Second;
  launch_per_key_tile<Dkv>(kernels::bwd_dkdv_mma_kernel<Dkv>, Dkv::kSmemBytes, args, stream,
                           Dkv::kDoDK ? "bwd_dkdv_mma" : "bwd_dv_mma", element_name<Element>(), kD);
  if constexpr (!std::is_void_v<Dkv2>) {
    launch_per_key_tile<Dkv2>(kernels::bwd_dkdv_mma_kernel<Dkv2>, Dkv2::kSmemBytes, args, stream,
                              "bwd_dk_mma", element_name<Element>(), kD);
  }
}

// The dQ pass and the dK/dV pass are independent (both read only Q, K, V, dO and the
// workspace): the dQ pass runs on `stream`, the dK/dV pass on `side`, which the caller forks
// from and joins back to `stream` (dispatch.cu), so the tail of one grid overlaps the other.
template <typename Element, int kD>
void run_bwd_mma(const kernels::AttnArgs& args, cudaStream_t stream, cudaStream_t side) {
  if constexpr (kD == 64) {
    if (tune().dq == 1)
      run_bwd_dq_mma_variant<Element, kD, 1>(args, stream);
    else
      run_bwd_dq_mma_variant<Element, kD, 0>(args, stream);
    switch (tune().dkdv) {
      case 1:
        return run_bwd_dkdv_mma_variant<Element, kD, 1>(args, side);
      case 2:
        return run_bwd_dkdv_mma_variant<Element, kD, 2>(args, side);
      default:
        return run_bwd_dkdv_mma_variant<Element, kD, 0>(args, side);
    }
  } else {
    run_bwd_dq_mma_variant<Element, kD, 0>(args, stream);
    run_bwd_dkdv_mma_variant<Element, kD, 0>(args, side);
  }
}

// Multiprocessors of the current device, looked up once per device.
inline int sm_count() {
  static std::mutex mutex;
  static std::map<int, int> counts;
  int device = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  std::lock_guard<std::mutex> lock(mutex);
  auto it = counts.find(device);
  if (it != counts.end()) return it->second;
  int n = 0;
  check_cuda(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device),
             "cudaDeviceGetAttribute(multiprocessors)");
  counts.emplace(device, n);
  return n;
}

// The float32 forward takes its small tiles when the grid of 64-row tiles would hold fewer
// than 4 blocks per SM (configs.hpp says why); the backward keeps the large ones, which
// measured faster inside forward+backward (docs/perf-notes.md, run 3). FLASHREF_CUDA_TUNE
// f32=1 / f32=2 forces large / small tiles on both.
inline bool f32_small_tiles(long long rows, long long heads, long long batch, bool backward) {
  if (tune().f32 == 1) return false;
  if (tune().f32 == 2) return true;
  return !backward && (rows + 63) / 64 * heads * batch < 4LL * sm_count();
}

template <typename T>
void launch_fwd_f32(const kernels::AttnArgs& args, cudaStream_t stream, int kD) {
  launch_per_query_tile<T>(kernels::fwd_f32_kernel<T>, T::kSmemBytes, args, stream, "fwd_f32",
                           "f32", kD);
}

template <int kD>
void run_fwd_f32(const kernels::AttnArgs& args, cudaStream_t stream) {
  if (f32_small_tiles(args.S_q, args.H, args.B, false))
    launch_fwd_f32<typename kernels::F32Config<kD>::FwdSmall>(args, stream, kD);
  else
    launch_fwd_f32<typename kernels::F32Config<kD>::Fwd>(args, stream, kD);
}

template <typename Dq, typename Dkv>
void launch_bwd_f32(const kernels::AttnArgs& args, cudaStream_t stream, cudaStream_t side, int kD) {
  launch_per_query_tile<Dq>(kernels::bwd_dq_f32_kernel<Dq>, Dq::kDqSmemBytes, args, stream,
                            Dq::kPairedLanes ? "bwd_dq_f32" : "bwd_dq_f32_plain", "f32", kD);
  launch_per_key_tile<Dkv>(kernels::bwd_dkdv_f32_kernel<Dkv>, Dkv::kDkvSmemBytes, args, side,
                           Dkv::kPairedLanes ? "bwd_dkdv_f32" : "bwd_dkdv_f32_plain", "f32", kD);
}

// FLASHREF_CUDA_TUNE f32bwd=1 runs the plain kernels on the same tiles (Traits::Plain).
template <typename Dq, typename Dkv>
void launch_bwd_f32_version(const kernels::AttnArgs& args, cudaStream_t stream, cudaStream_t side,
                            int kD) {
  if (tune().f32bwd == 1)
    launch_bwd_f32<typename Dq::Plain, typename Dkv::Plain>(args, stream, side, kD);
  else
    launch_bwd_f32<Dq, Dkv>(args, stream, side, kD);
}

template <int kD>
void run_bwd_f32(const kernels::AttnArgs& args, cudaStream_t stream, cudaStream_t side) {
  using C = kernels::F32Config<kD>;
  if (f32_small_tiles(std::max(args.S_q, args.S_k), args.H, args.B, true))
    launch_bwd_f32_version<typename C::DqSmall, typename C::DkvSmall>(args, stream, side, kD);
  else
    launch_bwd_f32_version<typename C::Dq, typename C::Dkv>(args, stream, side, kD);
}

// TF32 tensor cores (float32 with allow_tf32): the forward, and the two backward passes on
// `stream` and `side` as run_bwd_mma does.
template <int kD>
void run_fwd_tf32(const kernels::AttnArgs& args, cudaStream_t stream) {
  using T = typename kernels::Tf32Config<kD>::Fwd;
  launch_per_query_tile<T>(kernels::fwd_tf32_kernel<T>, T::kSmemBytes, args, stream, "fwd_tf32",
                           "f32", kD);
}

template <typename Dkv>
void launch_bwd_dkdv_tf32(const kernels::AttnArgs& args, cudaStream_t stream, int kD) {
  const char* name = Dkv::kDoDK && Dkv::kDoDV ? "bwd_dkdv_tf32"
                     : Dkv::kDoDV             ? "bwd_dv_tf32"
                                              : "bwd_dk_tf32";
  launch_per_key_tile<Dkv>(kernels::bwd_dkdv_tf32_kernel<Dkv>, Dkv::kSmemBytes, args, stream, name,
                           "f32", kD);
}

template <int kD>
void run_bwd_tf32(const kernels::AttnArgs& args, cudaStream_t stream, cudaStream_t side) {
  using C = kernels::Tf32Config<kD>;
  using Dq = typename C::Dq;
  launch_per_query_tile<Dq>(kernels::bwd_dq_tf32_kernel<Dq>, Dq::kSmemBytes, args, stream,
                            "bwd_dq_tf32", "f32", kD);
  launch_bwd_dkdv_tf32<typename C::Dkv>(args, side, kD);
  if constexpr (!std::is_void_v<typename C::DkvSecond>)
    launch_bwd_dkdv_tf32<typename C::DkvSecond>(args, side, kD);
}

// Declared here, instantiated once each in inst/*.cu.
#define FLASHREF_DECLARE_MMA(E, D)                                                \
  extern template void run_fwd_mma<E, D>(const kernels::AttnArgs&, cudaStream_t); \
  extern template void run_bwd_mma<E, D>(const kernels::AttnArgs&, cudaStream_t, cudaStream_t);
FLASHREF_DECLARE_MMA(__nv_bfloat16, 32)
FLASHREF_DECLARE_MMA(__nv_bfloat16, 64)
FLASHREF_DECLARE_MMA(__nv_bfloat16, 128)
FLASHREF_DECLARE_MMA(__nv_bfloat16, 256)
FLASHREF_DECLARE_MMA(__half, 32)
FLASHREF_DECLARE_MMA(__half, 64)
FLASHREF_DECLARE_MMA(__half, 128)
FLASHREF_DECLARE_MMA(__half, 256)
#undef FLASHREF_DECLARE_MMA
#define FLASHREF_DECLARE_F32(D)                                                \
  extern template void run_fwd_f32<D>(const kernels::AttnArgs&, cudaStream_t); \
  extern template void run_bwd_f32<D>(const kernels::AttnArgs&, cudaStream_t, cudaStream_t);
FLASHREF_DECLARE_F32(32)
FLASHREF_DECLARE_F32(64)
FLASHREF_DECLARE_F32(128)
FLASHREF_DECLARE_F32(256)
#undef FLASHREF_DECLARE_F32

#define FLASHREF_DECLARE_TF32(D)                                                \
  extern template void run_fwd_tf32<D>(const kernels::AttnArgs&, cudaStream_t); \
  extern template void run_bwd_tf32<D>(const kernels::AttnArgs&, cudaStream_t, cudaStream_t);
FLASHREF_DECLARE_TF32(32)
FLASHREF_DECLARE_TF32(64)
FLASHREF_DECLARE_TF32(128)
#undef FLASHREF_DECLARE_TF32

}  // namespace flashref::cuda

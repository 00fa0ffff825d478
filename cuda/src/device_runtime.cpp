#include "device_runtime.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "check.hpp"

namespace flashref::cuda {

const DeviceInfo& device_info() {
  static const DeviceInfo info = [] {
    DeviceInfo r;
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
      r.reason = std::string("no CUDA device: cudaGetDeviceCount failed with ") +
                 cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
      (void)cudaGetLastError();
      return r;
    }
    if (count == 0) {
      r.reason = "no CUDA device: the driver reports no GPU on this machine";
      return r;
    }
    int device = 0;
    cudaDeviceProp prop{};
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
      r.reason = "no CUDA device: could not read the properties of the current device";
      return r;
    }
    if (prop.major < 8) {
      r.reason = std::string("GPU '") + prop.name + "' has compute capability " +
                 std::to_string(prop.major) + "." + std::to_string(prop.minor) +
                 "; the cuda backend needs sm_80 or newer (mma.sync bf16, cp.async)";
      return r;
    }
    r.arch = prop.major * 10 + prop.minor;
    int pools = 0;
    (void)cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, device);
    r.memory_pools = pools != 0;
    r.ok = true;
    return r;
  }();
  return info;
}

CudaRuntime::~CudaRuntime() {
  // Freeing at process exit may find the runtime already torn down; nothing to report then.
  if (flush_ != nullptr) (void)cudaFree(flush_);
}

void* CudaRuntime::allocate(std::size_t bytes) const {
  void* p = nullptr;
  check_cuda(cudaMalloc(&p, std::max<std::size_t>(bytes, 1)),
             "cudaMalloc of " + std::to_string(bytes) + " bytes");
  return p;
}

void CudaRuntime::release(void* p) const {
  if (p != nullptr) check_cuda(cudaFree(p), "cudaFree");
}

void CudaRuntime::to_device(void* dst, const void* src, std::size_t bytes) const {
  check_cuda(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice),
             "cudaMemcpy host to device, " + std::to_string(bytes) + " bytes");
}

void CudaRuntime::to_host(void* dst, const void* src, std::size_t bytes) const {
  check_cuda(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost),
             "cudaMemcpy device to host, " + std::to_string(bytes) + " bytes");
}

void CudaRuntime::fill_bytes(void* dst, unsigned char value, std::size_t bytes) const {
  check_cuda(cudaMemset(dst, value, bytes), "cudaMemset, " + std::to_string(bytes) + " bytes");
}

void CudaRuntime::synchronize() const {
  // Also surfaces an asynchronous error of an earlier kernel (an illegal address, say).
  check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize (an earlier kernel failed)");
}

std::vector<double> CudaRuntime::time_ms(const std::function<void()>& launch, int warmup, int reps,
                                         bool flush_l2) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (flush_l2 && flush_ == nullptr) {
    int device = 0, l2 = 0;
    check_cuda(cudaGetDevice(&device), "cudaGetDevice");
    check_cuda(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device),
               "cudaDeviceGetAttribute(L2 size)");
    flush_bytes_ = std::max<std::size_t>(2 * static_cast<std::size_t>(l2), 64u << 20);
    check_cuda(cudaMalloc(&flush_, flush_bytes_), "cudaMalloc of the L2 flush buffer");
  }
  for (int i = 0; i < warmup; ++i) launch();
  check_cuda(cudaDeviceSynchronize(), "warm-up runs");
  cudaEvent_t start = nullptr, stop = nullptr;
  check_cuda(cudaEventCreate(&start), "cudaEventCreate");
  check_cuda(cudaEventCreate(&stop), "cudaEventCreate");
  std::vector<double> times;
  times.reserve(static_cast<std::size_t>(std::max(reps, 0)));
  try {
    for (int i = 0; i < reps; ++i) {
      if (flush_l2) {
        check_cuda(cudaMemsetAsync(flush_, i & 0xff, flush_bytes_, nullptr), "L2 flush");
      }
      check_cuda(cudaEventRecord(start, nullptr), "cudaEventRecord");
      launch();
      check_cuda(cudaEventRecord(stop, nullptr), "cudaEventRecord");
      check_cuda(cudaEventSynchronize(stop), "timed run");
      float ms = 0.0f;
      check_cuda(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
      times.push_back(ms);
    }
  } catch (...) {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    throw;
  }
  check_cuda(cudaEventDestroy(start), "cudaEventDestroy");
  check_cuda(cudaEventDestroy(stop), "cudaEventDestroy");
  return times;
}

std::size_t CudaRuntime::bytes_in_use() const {
  std::size_t free_bytes = 0, total = 0;
  check_cuda(cudaMemGetInfo(&free_bytes, &total), "cudaMemGetInfo");
  return total - free_bytes;
}

std::string CudaRuntime::device_name() const {
  int device = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  cudaDeviceProp prop{};
  check_cuda(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  return prop.name;
}

}  // namespace flashref::cuda

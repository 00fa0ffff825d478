// DeviceRuntime for CUDA: allocation, copies and event timing on the current device, used by
// verify/'s runner and `flashref bench` (so neither links CUDA itself).
#pragma once

#include <cstddef>
#include <mutex>
#include <string>

#include "flashref/backend.hpp"

namespace flashref::cuda {

// What the process's current device can do, looked up once (device_info()).
struct DeviceInfo {
  bool ok = false;     // a device of sm_80 or newer is there
  std::string reason;  // why not, when !ok
  int arch = 0;        // compute capability, major * 10 + minor (80, 86, 90, ...): the
                       // family choice (family.hpp) reads it
  bool memory_pools = false;
};
const DeviceInfo& device_info();

class CudaRuntime : public DeviceRuntime {
 public:
  ~CudaRuntime() override;
  void* allocate(std::size_t bytes) const override;
  void release(void* p) const override;
  void to_device(void* dst, const void* src, std::size_t bytes) const override;
  void to_host(void* dst, const void* src, std::size_t bytes) const override;
  void fill_bytes(void* dst, unsigned char value, std::size_t bytes) const override;
  void synchronize() const override;
  // Events on the default stream around each run; with flush_l2, a buffer of twice the L2
  // size is overwritten before every timed run so no input is served from the cache.
  std::vector<double> time_ms(const std::function<void()>& launch, int warmup, int reps,
                              bool flush_l2) const override;
  std::size_t bytes_in_use() const override;
  std::string device_name() const override;

 private:
  mutable std::mutex mutex_;
  mutable void* flush_ = nullptr;  // allocated on the first timed run that flushes
  mutable std::size_t flush_bytes_ = 0;
};

}  // namespace flashref::cuda

// Where a backend reads and writes: the host tensors themselves, or device mirrors of them
// made through Backend::device_runtime() (verify/ internal; the runner and bench use it).
#pragma once

#include <cstring>
#include <memory>
#include <stdexcept>
#include <vector>

#include <xtensor/xtensor.hpp>

#include "device_buffer.hpp"
#include "flashref/backend.hpp"
#include "flashref/verify/host_tensor.hpp"

namespace flashref::verify {

// Views keep the host tensors' strides, so host and device copies share one layout. Outputs
// are poisoned (kPoisonByte) on both sides before a run.
class Staging {
 public:
  explicit Staging(const Backend& backend) : rt_(backend.device_runtime()) {
    if (backend.memory_space() == MemorySpace::device && rt_ == nullptr) {
      throw std::runtime_error("backend '" + backend.name() +
                               "' takes device memory but has no device_runtime()");
    }
  }

  // Null for a host backend.
  const DeviceRuntime* runtime() const { return rt_; }

  TensorView input(const HostTensor& t) {
    TensorView v = t.view();
    if (rt_ != nullptr) {
      v.data = mirror(t.bytes());
      rt_->to_device(v.data, t.data(), t.bytes());
    }
    return v;
  }

  const float* input(const xt::xtensor<float, 3>& lse) {
    if (rt_ == nullptr) return lse.data();
    const std::size_t bytes = lse.size() * sizeof(float);
    void* p = mirror(bytes);
    rt_->to_device(p, lse.data(), bytes);
    return static_cast<const float*>(p);
  }

  // Poisons the host tensor and, on a device, a fresh mirror of it.
  TensorView output(HostTensor& t) {
    t.fill_bytes(kPoisonByte);
    TensorView v = t.view();
    if (rt_ != nullptr) {
      v.data = mirror(t.bytes());
      rt_->fill_bytes(v.data, kPoisonByte, t.bytes());
    }
    return v;
  }

  float* output(xt::xtensor<float, 3>& lse) {
    const std::size_t bytes = lse.size() * sizeof(float);
    std::memset(lse.data(), kPoisonByte, bytes);
    if (rt_ == nullptr) return lse.data();
    void* p = mirror(bytes);
    rt_->fill_bytes(p, kPoisonByte, bytes);
    return static_cast<float*>(p);
  }

  // Copies a device output back into its host tensor (nothing to do on the host).
  void fetch(HostTensor& t, const TensorView& v) {
    if (rt_ == nullptr) return;
    rt_->synchronize();
    rt_->to_host(t.data(), v.data, t.bytes());
  }
  void fetch(xt::xtensor<float, 3>& lse, const float* p) {
    if (rt_ == nullptr) return;
    rt_->synchronize();
    rt_->to_host(lse.data(), p, lse.size() * sizeof(float));
  }

 private:
  void* mirror(std::size_t bytes) {
    // A zero-byte allocation may legally return null; every view here has >= 1 element.
    buffers_.emplace_back(std::make_unique<DeviceBuffer>(*rt_, bytes));
    return buffers_.back()->get();
  }

  const DeviceRuntime* rt_;
  std::vector<std::unique_ptr<DeviceBuffer>> buffers_;
};

}  // namespace flashref::verify

#include "host_staged.hpp"

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "flashref/error.hpp"

namespace flashref::cuda_test {
namespace {

// The device copies of one call's tensors, released when the call ends (also on a throw).
class DeviceCopies {
 public:
  explicit DeviceCopies(const DeviceRuntime& rt) : rt_(rt) {}
  ~DeviceCopies() {
    for (void* p : owned_) rt_.release(p);
  }
  DeviceCopies(const DeviceCopies&) = delete;
  DeviceCopies& operator=(const DeviceCopies&) = delete;

  // A device view of `host` with the same strides. The whole span the view can touch is
  // copied, gaps included, so that an output's bytes the backend does not write come back
  // unchanged.
  TensorView mirror(const TensorView& host) {
    const ElementSpan span = element_span(host);
    TensorView dev = host;
    if (span.hi == span.lo) return dev;
    const std::size_t elem = dtype_size(host.dtype);
    const std::size_t bytes = static_cast<std::size_t>(span.hi - span.lo) * elem;
    const std::int64_t lo_bytes = span.lo * static_cast<std::int64_t>(elem);
    std::byte* const host_lo = static_cast<std::byte*>(host.data) + lo_bytes;
    std::byte* const dev_lo = static_cast<std::byte*>(copy_in(host_lo, bytes));
    dev.data = dev_lo - lo_bytes;
    pending_.push_back({host_lo, dev_lo, bytes});
    return dev;
  }
  float* mirror(const float* host, std::size_t count) {
    return static_cast<float*>(copy_in(host, count * sizeof(float)));
  }
  // Registers an output to copy back by fetch(): the mirror made last.
  void output() { outputs_.push_back(pending_.back()); }
  float* output(float* host, std::size_t count) {
    float* dev = mirror(host, count);
    outputs_.push_back({reinterpret_cast<std::byte*>(host), reinterpret_cast<std::byte*>(dev),
                        count * sizeof(float)});
    return dev;
  }
  void fetch() {
    rt_.synchronize();
    for (const Copy& c : outputs_) rt_.to_host(c.host, c.dev, c.bytes);
  }

 private:
  struct Copy {
    std::byte* host;
    std::byte* dev;
    std::size_t bytes;
  };
  void* copy_in(const void* host, std::size_t bytes) {
    void* dev = rt_.allocate(bytes);
    owned_.push_back(dev);
    rt_.to_device(dev, host, bytes);
    return dev;
  }

  const DeviceRuntime& rt_;
  std::vector<void*> owned_;
  std::vector<Copy> pending_, outputs_;
};

class HostStagedBackend final : public Backend {
 public:
  explicit HostStagedBackend(std::shared_ptr<const Backend> inner)
      : inner_(std::move(inner)), rt_(*inner_->device_runtime()) {}

  std::string name() const override { return inner_->name(); }
  Support supports(const Problem& p) const override { return inner_->supports(p); }

  void forward(const ForwardParams& params) const override {
    validate(params);
    const Problem& p = params.problem;
    std::lock_guard<std::mutex> lock(mutex_);
    DeviceCopies dev(rt_);
    ForwardParams d = params;
    d.q = dev.mirror(params.q);
    d.k = dev.mirror(params.k);
    d.v = dev.mirror(params.v);
    d.o = dev.mirror(params.o);
    dev.output();
    d.lse = dev.output(params.lse, static_cast<std::size_t>(p.B * p.H * p.S_q));
    inner_->forward(d);
    dev.fetch();
  }

  void backward(const BackwardParams& params) const override {
    validate(params);
    const Problem& p = params.problem;
    std::lock_guard<std::mutex> lock(mutex_);
    DeviceCopies dev(rt_);
    BackwardParams d = params;
    d.q = dev.mirror(params.q);
    d.k = dev.mirror(params.k);
    d.v = dev.mirror(params.v);
    d.o = dev.mirror(params.o);
    d.dO = dev.mirror(params.dO);
    d.lse = dev.mirror(params.lse, static_cast<std::size_t>(p.B * p.H * p.S_q));
    for (TensorView* out : {&d.dq, &d.dk, &d.dv}) {
      *out = dev.mirror(*out);
      dev.output();
    }
    inner_->backward(d);
    dev.fetch();
  }

 private:
  std::shared_ptr<const Backend> inner_;
  const DeviceRuntime& rt_;
  mutable std::mutex mutex_;  // one call on the device at a time
};

}  // namespace

std::unique_ptr<Backend> host_staged(std::shared_ptr<const Backend> device_backend) {
  if (!device_backend) throw InvalidArgument("device_backend", "backend is null");
  if (device_backend->memory_space() != MemorySpace::device ||
      device_backend->device_runtime() == nullptr) {
    throw InvalidArgument("device_backend", device_backend->name() +
                                                " takes host memory already: host_staged is for device backends");
  }
  return std::make_unique<HostStagedBackend>(std::move(device_backend));
}

}  // namespace flashref::cuda_test

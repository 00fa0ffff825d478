// The interface every implementation of attention sits behind.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "flashref/params.hpp"

namespace flashref {

enum class MemorySpace { host, device };

// How host code moves tensors to and from a device backend's memory and times its launches.
// Host backends have none. The verify/ runner and `flashref bench` use it, so verify/ never
// links CUDA itself.
class DeviceRuntime {
 public:
  virtual ~DeviceRuntime() = default;
  virtual void* allocate(std::size_t bytes) const = 0;  // throws std::runtime_error on failure
  virtual void release(void* p) const = 0;
  virtual void to_device(void* dst, const void* src, std::size_t bytes) const = 0;
  virtual void to_host(void* dst, const void* src, std::size_t bytes) const = 0;
  virtual void fill_bytes(void* dst, unsigned char value, std::size_t bytes) const = 0;
  virtual void synchronize() const = 0;
  // Runs `launch` `warmup` times, then `reps` times timed one by one with device events,
  // flushing the L2 cache before each timed run when `flush_l2`. Returns the times in ms.
  virtual std::vector<double> time_ms(const std::function<void()>& launch, int warmup, int reps,
                                      bool flush_l2) const = 0;
  // Bytes of device memory in use now (free-memory difference), for bench's peak memory.
  virtual std::size_t bytes_in_use() const = 0;
  virtual std::string device_name() const = 0;
};

struct Support {
  bool ok = true;
  std::string reason;  // why not, when !ok ("head dim 300 > 256", "no CUDA device")
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // Where the params' pointers must point.
  virtual MemorySpace memory_space() const { return MemorySpace::host; }
  // Non-null exactly when memory_space() is device.
  virtual const DeviceRuntime* device_runtime() const { return nullptr; }
  // Whether this backend can run the problem; cheap, launches nothing.
  virtual Support supports(const Problem& p) const = 0;
  // Which of its kernels would run the problem with these options, and why those, in one line;
  // "" for a backend with one way to run everything. cuda names its kernel family and the reason
  // ("sm80: mma.sync m16n8k16; the wgmma kernels are compiled for head dims 64 and 128 ..."),
  // so that a problem that did not reach the Hopper kernels says why. Cheap, launches nothing;
  // what supports() refuses, it need not explain.
  virtual std::string plan(const Problem& p, const ExecutionOptions& options) const {
    (void)p;
    (void)options;
    return "";
  }
  // Writes O and L. Validates first (InvalidArgument, nothing written); throws Unsupported
  // when supports() says no.
  virtual void forward(const ForwardParams& p) const = 0;
  // Writes dQ, dK, dV from Q, K, V, O, dO, L. Same error contract as forward().
  virtual void backward(const BackwardParams& p) const = 0;
};

// The registry: the backends this build has, in a fixed order: "reference", "cpu", then "cuda"
// when built with CUDA (present even without a GPU: its supports() then says why it cannot
// run). Defined in registry/registry.cpp, the layer above the backends (target
// flashref::flashref); a backend made by name has its default settings (a backend's own
// factory, e.g. cpu::make_backend(cpu::Options), takes the rest).
std::vector<std::string> backend_names();
// Throws InvalidArgument("backend", ...) listing the known names for an unknown one.
std::unique_ptr<Backend> make_backend(const std::string& name);

}  // namespace flashref

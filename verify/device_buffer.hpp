// A device allocation through a DeviceRuntime, released on scope exit (verify/ internal).
#pragma once

#include <cstddef>

#include "flashref/backend.hpp"

namespace flashref::verify {

class DeviceBuffer {
 public:
  DeviceBuffer(const DeviceRuntime& rt, std::size_t bytes) : rt_(&rt), ptr_(rt.allocate(bytes)) {}
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { rt_->release(ptr_); }
  void* get() const { return ptr_; }

 private:
  const DeviceRuntime* rt_;
  void* ptr_;
};

}  // namespace flashref::verify

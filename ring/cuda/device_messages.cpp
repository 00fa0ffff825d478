// The in-process transport's messages on one GPU: each send is copied device to device into a
// buffer of its own, and each receive out of it, both complete before they return (the
// ranks' threads order their own kernels around the exchange with RankMemory::settle()).
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "flashref/ring/in_process_transport.hpp"

namespace flashref::ring {
namespace {

void check(cudaError_t e, const std::string& what) {
  if (e != cudaSuccess) {
    throw std::runtime_error("ring device transport: " + what + ": " + cudaGetErrorName(e) + " (" +
                             cudaGetErrorString(e) + ")");
  }
}

void copy(void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return;
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, nullptr),
        "cudaMemcpyAsync device to device, " + std::to_string(bytes) + " bytes");
  check(cudaStreamSynchronize(nullptr), "waiting for a message copy");
}

class DeviceMessages final : public MessageStore {
 public:
  std::shared_ptr<void> keep(const void* data, std::size_t bytes) const override {
    void* p = nullptr;
    check(cudaMalloc(&p, bytes > 0 ? bytes : 1),
          "cudaMalloc of a " + std::to_string(bytes) + "-byte message");
    std::shared_ptr<void> kept(p, [](void* q) { (void)cudaFree(q); });
    copy(p, data, bytes);
    return kept;
  }
  void deliver(void* dst, const void* kept, std::size_t bytes) const override {
    copy(dst, kept, bytes);
  }
};

}  // namespace

std::shared_ptr<const MessageStore> device_messages() {
  static const auto store = std::make_shared<const DeviceMessages>();
  return store;
}

}  // namespace flashref::ring

// A build without CUDA: the ring has no device memory and no device transport. Nothing can
// ask for them except a device backend, which such a build does not have.
#include "flashref/error.hpp"
#include "flashref/ring/in_process_transport.hpp"
#include "rank_memory.hpp"

namespace flashref::ring {

namespace detail {
std::unique_ptr<RankMemory> device_memory(const DeviceRuntime&, void*) {
  throw Unsupported("ring: this build has no CUDA, so no ring over device memory");
}
std::function<void()> bind_to_current_device() {
  throw Unsupported("ring: this build has no CUDA, so no ring over device memory");
}
}  // namespace detail

std::shared_ptr<const MessageStore> device_messages() {
  throw Unsupported("ring: this build has no CUDA, so no in-process transport on a GPU");
}

}  // namespace flashref::ring

// The device side of RankMemory: a rank's buffers in the memory of the inner backend's
// device, allocated through its DeviceRuntime, moved and merged by ring/cuda's kernels on the
// stream the inner backend's calls run on.
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "device_ops.hpp"
#include "rank_memory.hpp"

namespace flashref::ring::detail {
namespace {

void check(cudaError_t e, const std::string& what) {
  if (e != cudaSuccess) {
    throw std::runtime_error("ring device memory: " + what + ": " + cudaGetErrorName(e) + " (" +
                             cudaGetErrorString(e) + ")");
  }
}

class DeviceMemory final : public RankMemory {
 public:
  DeviceMemory(const DeviceRuntime& runtime, void* stream)
      : runtime_(runtime), stream_(static_cast<cudaStream_t>(stream)) {}

  RankBuffer allocate(std::size_t bytes) const override {
    auto* p = static_cast<std::byte*>(runtime_.allocate(bytes));
    RankBuffer buffer(p, bytes, this);
    zero(p, bytes);
    return buffer;
  }
  void release(std::byte* data) const noexcept override {
    try {
      runtime_.release(data);
    } catch (...) {
      // A failed free has nothing left to undo; the error of the work before it was (or will
      // be) reported by settle().
    }
  }
  void zero(void* data, std::size_t bytes) const override {
    if (bytes > 0) {
      check(cudaMemsetAsync(data, 0, bytes, stream_),
            "cudaMemsetAsync of " + std::to_string(bytes) + " bytes");
    }
  }
  void gather_rows(const TensorView& global, std::int64_t begin,
                   const TensorView& local) const override {
    device::gather_rows(global, begin, local, stream_);
  }
  void scatter_rows(const TensorView& local, const TensorView& global,
                    std::int64_t begin) const override {
    device::scatter_rows(local, global, begin, stream_);
  }
  void add_rows(const TensorView& acc, const TensorView& part) const override {
    device::add_rows(acc, part, stream_);
  }
  void gather_lse(const float* global, std::int64_t B, std::int64_t H, std::int64_t S,
                  std::int64_t begin, std::int64_t rows, float* local) const override {
    device::gather_lse(global, B, H, S, begin, rows, local, stream_);
  }
  void scatter_lse(const float* local, std::int64_t rows, float* global, std::int64_t B,
                   std::int64_t H, std::int64_t S, std::int64_t begin) const override {
    device::scatter_lse(local, rows, global, B, H, S, begin, stream_);
  }
  void clear_merge(const MergeTarget& target) const override {
    device::clear_merge(target, stream_);
  }
  void merge_into(const MergeTarget& target, const TensorView& O_part,
                  const float* L_part) const override {
    device::merge_into(target, O_part, L_part, stream_);
  }
  void settle() const override {
    // Also where an earlier kernel's failure (the inner backend's or ours) surfaces.
    check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize (the rank's work)");
  }

 private:
  const DeviceRuntime& runtime_;
  cudaStream_t stream_;
};

}  // namespace

std::unique_ptr<RankMemory> device_memory(const DeviceRuntime& runtime, void* stream) {
  return std::make_unique<DeviceMemory>(runtime, stream);
}

std::function<void()> bind_to_current_device() {
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  return
      [device] { check(cudaSetDevice(device), "cudaSetDevice(" + std::to_string(device) + ")"); };
}

}  // namespace flashref::ring::detail

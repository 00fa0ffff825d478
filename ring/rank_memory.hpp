// Where a rank's buffers live and how it moves data between them: the one thing that differs
// between a rank on the host (the in-process ring over host backends) and a rank on a GPU
// (the NCCL ring, or the in-process ring over the cuda backend). The ring's schedule
// (ring_forward.cpp, ring_backward.cpp) is written once against this interface; the host side
// is shard.cpp and core's merge, the device side ring/cuda's kernels, with the same results
// bit for bit (docs/ring.md says where the merge may differ and why).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>

#include "flashref/backend.hpp"
#include "flashref/merge.hpp"
#include "flashref/tensor.hpp"

namespace flashref::ring::detail {

class RankMemory;

// A zeroed allocation in a RankMemory, released when it goes (move-only).
class RankBuffer {
 public:
  RankBuffer() = default;
  RankBuffer(std::byte* data, std::size_t bytes, const RankMemory* memory)
      : data_(data), bytes_(bytes), memory_(memory) {}
  ~RankBuffer();
  RankBuffer(RankBuffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), bytes_(o.bytes_), memory_(o.memory_) {}
  RankBuffer& operator=(RankBuffer&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(bytes_, o.bytes_);
    std::swap(memory_, o.memory_);
    return *this;
  }
  RankBuffer(const RankBuffer&) = delete;
  RankBuffer& operator=(const RankBuffer&) = delete;

  std::byte* data() const { return data_; }
  float* floats() const { return reinterpret_cast<float*>(data_); }
  std::size_t bytes() const { return bytes_; }

 private:
  std::byte* data_ = nullptr;
  std::size_t bytes_ = 0;
  const RankMemory* memory_ = nullptr;
};

// Every operation may run asynchronously (in order with the inner backend's calls, which get
// the same stream); settle() waits for all of them. Views are logically (B, S, H, d) with a
// contiguous last dim, L buffers (B, H, S) contiguous float32, as in the params.
class RankMemory {
 public:
  virtual ~RankMemory() = default;
  virtual RankBuffer allocate(std::size_t bytes) const = 0;  // zeroed
  virtual void release(std::byte* data) const noexcept = 0;
  virtual void zero(void* data, std::size_t bytes) const = 0;
  // local = rows [begin, begin + local.seq) of global, converted to local's dtype.
  virtual void gather_rows(const TensorView& global, std::int64_t begin,
                           const TensorView& local) const = 0;
  // global rows [begin, begin + local.seq) = local, rounded once to global's dtype.
  virtual void scatter_rows(const TensorView& local, const TensorView& global,
                            std::int64_t begin) const = 0;
  virtual void add_rows(const TensorView& acc, const TensorView& part) const = 0;  // f32 acc
  virtual void gather_lse(const float* global, std::int64_t B, std::int64_t H, std::int64_t S,
                          std::int64_t begin, std::int64_t rows, float* local) const = 0;
  virtual void scatter_lse(const float* local, std::int64_t rows, float* global, std::int64_t B,
                           std::int64_t H, std::int64_t S, std::int64_t begin) const = 0;
  // core/merge.hpp's clear_merge and merge_into, in this memory.
  virtual void clear_merge(const MergeTarget& target) const = 0;
  virtual void merge_into(const MergeTarget& target, const TensorView& O_part,
                          const float* L_part) const = 0;
  // Returns once every operation queued so far on this rank's stream (its own and the inner
  // backend's) is done: before a buffer is handed to the transport, and before returning.
  virtual void settle() const = 0;
};

inline RankBuffer::~RankBuffer() {
  if (data_ != nullptr) memory_->release(data_);
}

// Host memory: std::calloc, shard.cpp's copies and core/merge.cpp's merge.
std::unique_ptr<RankMemory> host_memory();
// Device memory of `runtime` (allocation and zeroing through it), ring/cuda's kernels on
// `stream` (a cudaStream_t; nullptr: the default stream). Throws Unsupported when this build
// has no CUDA.
std::unique_ptr<RankMemory> device_memory(const DeviceRuntime& runtime, void* stream);
// The memory that `inner`'s pointers live in: the rank's buffers go there too.
std::unique_ptr<RankMemory> memory_for(const Backend& inner, void* stream);

// What a rank's thread does first so that its calls reach the caller's memory: for a device
// backend, make the calling thread's current CUDA device the new thread's (a new thread starts
// on device 0); nothing for a host one. Call it on the calling thread.
std::function<void()> thread_setup_for(const Backend& inner);
// The device part of it: binds a thread to the current thread's device now. Throws
// Unsupported when this build has no CUDA.
std::function<void()> bind_to_current_device();

}  // namespace flashref::ring::detail

// The host side of RankMemory: the rank's buffers in host memory, moved by shard.cpp and
// merged by core/merge.cpp (the functions the host ring has always used, so its bits stay);
// and the choice of memory by the inner backend's.
#include <cstdlib>
#include <cstring>
#include <new>

#include "flashref/error.hpp"
#include "rank_memory.hpp"
#include "shard.hpp"

namespace flashref::ring::detail {
namespace {

class HostMemory final : public RankMemory {
 public:
  RankBuffer allocate(std::size_t bytes) const override {
    void* p = std::calloc(bytes > 0 ? bytes : 1, 1);
    if (p == nullptr) throw std::bad_alloc();
    return RankBuffer(static_cast<std::byte*>(p), bytes, this);
  }
  void release(std::byte* data) const noexcept override { std::free(data); }
  void zero(void* data, std::size_t bytes) const override {
    if (bytes > 0) std::memset(data, 0, bytes);
  }
  void gather_rows(const TensorView& global, std::int64_t begin,
                   const TensorView& local) const override {
    detail::gather_rows(global, begin, local);
  }
  void scatter_rows(const TensorView& local, const TensorView& global,
                    std::int64_t begin) const override {
    detail::scatter_rows(local, global, begin);
  }
  void add_rows(const TensorView& acc, const TensorView& part) const override {
    detail::add_rows(acc, part);
  }
  void gather_lse(const float* global, std::int64_t B, std::int64_t H, std::int64_t S,
                  std::int64_t begin, std::int64_t rows, float* local) const override {
    detail::gather_lse(global, B, H, S, begin, rows, local);
  }
  void scatter_lse(const float* local, std::int64_t rows, float* global, std::int64_t B,
                   std::int64_t H, std::int64_t S, std::int64_t begin) const override {
    detail::scatter_lse(local, rows, global, B, H, S, begin);
  }
  void clear_merge(const MergeTarget& target) const override { flashref::clear_merge(target); }
  void merge_into(const MergeTarget& target, const TensorView& O_part,
                  const float* L_part) const override {
    flashref::merge_into(target, O_part, L_part);
  }
  void settle() const override {}  // every operation above is done when it returns
};

}  // namespace

std::unique_ptr<RankMemory> host_memory() {
  return std::make_unique<HostMemory>();
}

std::unique_ptr<RankMemory> memory_for(const Backend& inner, void* stream) {
  if (inner.memory_space() == MemorySpace::host) return host_memory();
  const DeviceRuntime* runtime = inner.device_runtime();
  if (runtime == nullptr) {
    throw InvalidArgument("inner", inner.name() + " takes device memory but has no device runtime");
  }
  return device_memory(*runtime, stream);
}

std::function<void()> thread_setup_for(const Backend& inner) {
  if (inner.memory_space() == MemorySpace::host) return [] {};
  return bind_to_current_device();
}

}  // namespace flashref::ring::detail

// A zero-initialized, 64-byte aligned float buffer: the thread-local tile storage.
#pragma once

#include <algorithm>
#include <cstddef>
#include <memory>
#include <new>

namespace flashref::cpu::detail {

class FloatBuffer {
 public:
  FloatBuffer() = default;
  // Throws std::bad_alloc; callers allocate every buffer before writing any output.
  explicit FloatBuffer(std::size_t n)
      : data_(static_cast<float*>(::operator new[](std::max<std::size_t>(n, 1) * sizeof(float),
                                                   std::align_val_t{kAlign}))),
        size_(n) {
    std::fill(data_.get(), data_.get() + n, 0.0f);
  }

  float* data() { return data_.get(); }
  const float* data() const { return data_.get(); }
  std::size_t size() const { return size_; }

 private:
  // One cache line: vector loads of a row never straddle two lines at the row's start.
  static constexpr std::size_t kAlign = 64;
  struct Free {
    void operator()(float* p) const { ::operator delete[](p, std::align_val_t{kAlign}); }
  };
  std::unique_ptr<float[], Free> data_;
  std::size_t size_ = 0;
};

}  // namespace flashref::cpu::detail

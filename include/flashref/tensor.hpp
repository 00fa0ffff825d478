// Non-owning views of the attention tensors.
//
// Every Q/K/V/O/dO/dQ/dK/dV view is logically (batch, seq, head, dim) with int64 strides in
// elements for the first three dims and a contiguous last dim. The (B,S,H,d) and (B,H,S,d)
// memory layouts and the course's 3-D (B,S,d) (one head) are all just strides.
// L (the logsumexp) is always contiguous float32 of shape (B, H, S_q).
#pragma once

#include <cstdint>

#include "flashref/dtype.hpp"

namespace flashref {

struct TensorView {
  void* data = nullptr;  // host or device pointer, as the backend's memory_space() says
  DType dtype = DType::f32;
  std::int64_t batch = 0, seq = 0, heads = 0, dim = 0;               // logical shape
  std::int64_t batch_stride = 0, seq_stride = 0, head_stride = 0;  // elements

  std::int64_t offset(std::int64_t b, std::int64_t s, std::int64_t h) const {
    return b * batch_stride + s * seq_stride + h * head_stride;
  }
  std::int64_t offset(std::int64_t b, std::int64_t s, std::int64_t h, std::int64_t i) const {
    return offset(b, s, h) + i;
  }
  float load(std::int64_t b, std::int64_t s, std::int64_t h, std::int64_t i) const {
    return load_as_float(data, dtype, offset(b, s, h, i));
  }
  void store(std::int64_t b, std::int64_t s, std::int64_t h, std::int64_t i, float v) const {
    store_from_float(data, dtype, offset(b, s, h, i), v);
  }
};

// Memory laid out as (B, S, H, d), contiguous: FlashAttention's layout.
TensorView bshd_view(void* data, DType t, std::int64_t B, std::int64_t S, std::int64_t H,
                     std::int64_t d);
// Memory laid out as (B, H, S, d), contiguous: PyTorch SDPA's and the .npy files' layout.
TensorView bhsd_view(void* data, DType t, std::int64_t B, std::int64_t H, std::int64_t S,
                     std::int64_t d);
// The course's (B, S, d): one head.
TensorView bsd_view(void* data, DType t, std::int64_t B, std::int64_t S, std::int64_t d);

// The smallest and one-past-largest element offsets a view can touch (for overlap checks and
// for sizing allocations). Empty views return {0, 0}.
struct ElementSpan {
  std::int64_t lo = 0, hi = 0;
};
ElementSpan element_span(const TensorView& v);

}  // namespace flashref

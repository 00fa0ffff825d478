#include "flashref/tensor.hpp"

#include <algorithm>

namespace flashref {

TensorView bshd_view(void* data, DType t, std::int64_t B, std::int64_t S, std::int64_t H,
                     std::int64_t d) {
  return TensorView{data, t, B, S, H, d, S * H * d, H * d, d};
}

TensorView bhsd_view(void* data, DType t, std::int64_t B, std::int64_t H, std::int64_t S,
                     std::int64_t d) {
  return TensorView{data, t, B, S, H, d, H * S * d, d, S * d};
}

TensorView bsd_view(void* data, DType t, std::int64_t B, std::int64_t S, std::int64_t d) {
  return TensorView{data, t, B, S, 1, d, S * d, d, d};
}

ElementSpan element_span(const TensorView& v) {
  if (v.batch <= 0 || v.seq <= 0 || v.heads <= 0 || v.dim <= 0) return {};
  ElementSpan span;
  // Each dim contributes its extreme offset on the low or high side depending on stride sign.
  auto extend = [&span](std::int64_t extent, std::int64_t stride) {
    const std::int64_t far = (extent - 1) * stride;
    if (far < 0) span.lo += far; else span.hi += far;
  };
  extend(v.batch, v.batch_stride);
  extend(v.seq, v.seq_stride);
  extend(v.heads, v.head_stride);
  span.hi += v.dim;  // the contiguous last dim; hi is one past the last element
  return span;
}

}  // namespace flashref

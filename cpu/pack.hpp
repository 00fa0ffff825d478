// Moving tiles between the caller's tensors (any dtype, any strides) and the contiguous float
// buffers the kernels work on. Each element is converted exactly once per tile load.
#pragma once

#include <cstdint>

#include "flashref/tensor.hpp"

namespace flashref::cpu::detail {

// Rows [row0, row0 + n) of head h of batch b, as floats: dst[r * ld + c] for c < dim, with
// columns [dim, ld) and rows [n, n_pad) set to zero (the padding the kernels rely on).
void load_rows(const TensorView& v, std::int64_t b, std::int64_t h, std::int64_t row0,
               std::int64_t n, std::int64_t n_pad, float* dst, std::int64_t ld);

// The same rows transposed: dst[c * ld + r] for c < dim, r < n, with columns [n, ld) zero.
void load_rows_transposed(const TensorView& v, std::int64_t b, std::int64_t h, std::int64_t row0,
                          std::int64_t n, float* dst, std::int64_t ld);

// Writes src[r * ld + c] (r < n, c < dim) to rows [row0, row0 + n) of head h of batch b,
// rounded to the view's dtype.
void store_rows(const TensorView& v, std::int64_t b, std::int64_t h, std::int64_t row0,
                std::int64_t n, const float* src, std::int64_t ld);

// Rounds src (n rows, dim columns, stride ld) in place to the precision of dtype `t`, so a
// trace shows the values exactly as store_rows writes them.
void round_rows(float* x, std::int64_t ld, std::int64_t n, std::int64_t dim, DType t);

// dst[c * ld_dst + r] = src[r * ld_src + c] for r < rows, c < cols: the transposed tiles
// turned back for the trace.
void transpose(const float* src, std::int64_t ld_src, std::int64_t rows, std::int64_t cols,
               float* dst, std::int64_t ld_dst);

}  // namespace flashref::cpu::detail

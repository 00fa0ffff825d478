#include "pack.hpp"

#include <algorithm>
#include <cstring>

#include "vec_math.hpp"

namespace flashref::cpu::detail {
namespace {

// One row of `dim` elements of dtype `t` at `src`, converted to float.
void convert_row(const void* src, DType t, std::int64_t dim, float* dst) {
  switch (t) {
    case DType::f32:
      std::memcpy(dst, src, static_cast<std::size_t>(dim) * sizeof(float));
      return;
    case DType::bf16: {
      const auto* s = static_cast<const std::uint16_t*>(src);
      for (std::int64_t c = 0; c < dim; ++c) dst[c] = bf16_to_f32(s[c]);
      return;
    }
    case DType::f16: {
      const auto* s = static_cast<const std::uint16_t*>(src);
      for (std::int64_t c = 0; c < dim; ++c) dst[c] = f16_to_f32(s[c]);
      return;
    }
  }
}

const void* row_address(const TensorView& v, std::int64_t b, std::int64_t s, std::int64_t h) {
  return static_cast<const char*>(v.data) +
         v.offset(b, s, h) * static_cast<std::int64_t>(dtype_size(v.dtype));
}

}  // namespace

void load_rows(const TensorView& v, std::int64_t b, std::int64_t h, std::int64_t row0,
               std::int64_t n, std::int64_t n_pad, float* dst, std::int64_t ld) {
  for (std::int64_t r = 0; r < n; ++r) {
    float* out = dst + r * ld;
    convert_row(row_address(v, b, row0 + r, h), v.dtype, v.dim, out);
    std::fill(out + v.dim, out + ld, 0.0f);
  }
  std::fill(dst + n * ld, dst + n_pad * ld, 0.0f);
}

void load_rows_transposed(const TensorView& v, std::int64_t b, std::int64_t h, std::int64_t row0,
                          std::int64_t n, float* dst, std::int64_t ld) {
  // Blocks of 16 rows: each row is converted into a small staging block, then written out
  // column by column, so every destination cache line is filled by one burst of stores.
  constexpr std::int64_t kBlock = 16;
  float stage[kBlock * 256];
  for (std::int64_t r0 = 0; r0 < n; r0 += kBlock) {
    const std::int64_t rows = std::min(kBlock, n - r0);
    for (std::int64_t r = 0; r < rows; ++r) {
      convert_row(row_address(v, b, row0 + r0 + r, h), v.dtype, v.dim, stage + r * v.dim);
    }
    for (std::int64_t c = 0; c < v.dim; ++c) {
      float* out = dst + c * ld + r0;
      for (std::int64_t r = 0; r < rows; ++r) out[r] = stage[r * v.dim + c];
    }
  }
  for (std::int64_t c = 0; c < v.dim; ++c) std::fill(dst + c * ld + n, dst + c * ld + ld, 0.0f);
}

void store_rows(const TensorView& v, std::int64_t b, std::int64_t h, std::int64_t row0,
                std::int64_t n, const float* src, std::int64_t ld) {
  const std::int64_t elem = static_cast<std::int64_t>(dtype_size(v.dtype));
  for (std::int64_t r = 0; r < n; ++r) {
    const float* in = src + r * ld;
    void* out = static_cast<char*>(v.data) + v.offset(b, row0 + r, h) * elem;
    switch (v.dtype) {
      case DType::f32:
        std::memcpy(out, in, static_cast<std::size_t>(v.dim) * sizeof(float));
        break;
      case DType::bf16: {
        auto* o = static_cast<std::uint16_t*>(out);
        for (std::int64_t c = 0; c < v.dim; ++c) o[c] = float_to_bf16_bits(in[c]);
        break;
      }
      case DType::f16: {
        auto* o = static_cast<std::uint16_t*>(out);
        for (std::int64_t c = 0; c < v.dim; ++c) o[c] = float_to_f16_bits(in[c]);
        break;
      }
    }
  }
}

void round_rows(float* x, std::int64_t ld, std::int64_t n, std::int64_t dim, DType t) {
  if (t == DType::f32) return;
  for (std::int64_t r = 0; r < n; ++r) {
    float* row = x + r * ld;
    if (t == DType::bf16) {
      for (std::int64_t c = 0; c < dim; ++c) row[c] = round_bf16(row[c]);
    } else {
      for (std::int64_t c = 0; c < dim; ++c) row[c] = round_f16(row[c]);
    }
  }
}

void transpose(const float* src, std::int64_t ld_src, std::int64_t rows, std::int64_t cols,
               float* dst, std::int64_t ld_dst) {
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; ++c) dst[c * ld_dst + r] = src[r * ld_src + c];
  }
}

}  // namespace flashref::cpu::detail

// Host storage for one attention tensor (Q, K, V, O, dO, dQ, dK, dV) in its own dtype.
//
// The logical shape is always (B, H, S, d); the memory layout is either (B, H, S, d) or
// (B, S, H, d), so tests can hand backends either stride pattern. view() gives the
// TensorView the params expect (logically batch, seq, head, dim).
#pragma once

#include <cstdint>
#include <string_view>
#include <variant>

#include <xtensor/xarray.hpp>
#include <xtensor/xtensor.hpp>

#include "flashref/dtype.hpp"
#include "flashref/tensor.hpp"

namespace flashref::verify {

// The byte every output is filled with before a run: all-ones bits are a NaN in f32, f16 and
// bf16, so an element a backend never wrote shows up as NaN.
inline constexpr unsigned char kPoisonByte = 0xff;

enum class Layout : std::uint8_t {
  bshd,  // (B, S, H, d): FlashAttention's layout
  bhsd,  // (B, H, S, d): PyTorch SDPA's and the .npy files' layout
};

std::string_view layout_name(Layout l);
Layout parse_layout(std::string_view s);  // throws InvalidArgument("--layout", ...)

class HostTensor {
 public:
  HostTensor() = default;
  // A zero-filled tensor of logical shape (B, H, S, d) stored in `layout`.
  HostTensor(DType dtype, Layout layout, std::int64_t B, std::int64_t H, std::int64_t S,
             std::int64_t d);
  // Canonical (B, H, S, d) values stored in `dtype` and `layout`: each value is converted to
  // float, then rounded to `dtype` (nearest even), as set() does. Exact for values that are
  // already float32, f16 or bf16 numbers. Throws InvalidArgument unless `values` is 4-D.
  static HostTensor from_canonical(const xt::xarray<double>& values, DType dtype,
                                   Layout layout = Layout::bhsd);

  DType dtype() const { return dtype_; }
  Layout layout() const { return layout_; }
  std::int64_t B() const { return B_; }
  std::int64_t H() const { return H_; }
  std::int64_t S() const { return S_; }
  std::int64_t d() const { return d_; }
  std::int64_t size() const { return B_ * H_ * S_ * d_; }
  std::size_t bytes() const { return static_cast<std::size_t>(size()) * dtype_size(dtype_); }
  bool empty() const { return size() == 0; }

  void* data();
  const void* data() const;

  // The params view of this storage. The const overload is for inputs, which backends only
  // read; the params type has a single non-const pointer for both.
  TensorView view();
  TensorView view() const;

  // Element (b, h, s, i) as float (exact), and assignment rounded to this dtype.
  float get(std::int64_t b, std::int64_t h, std::int64_t s, std::int64_t i) const;
  void set(std::int64_t b, std::int64_t h, std::int64_t s, std::int64_t i, float v);

  // Every byte set to `value` (kPoisonByte: every element NaN).
  void fill_bytes(unsigned char value);

  // The values, exactly, in the canonical (B, H, S, d) layout.
  xt::xtensor<double, 4> to_double() const;

  // A copy stored in `layout` (bit-identical values).
  HostTensor with_layout(Layout layout) const;

 private:
  using Storage =
      std::variant<xt::xtensor<float, 4>, xt::xtensor<float16, 4>, xt::xtensor<bfloat16, 4>>;
  DType dtype_ = DType::f32;
  Layout layout_ = Layout::bhsd;
  std::int64_t B_ = 0, H_ = 0, S_ = 0, d_ = 0;
  Storage storage_;
};

}  // namespace flashref::verify

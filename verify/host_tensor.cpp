#include "flashref/verify/host_tensor.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <string>

#include "flashref/error.hpp"

namespace flashref::verify {

std::string_view layout_name(Layout l) {
  return l == Layout::bshd ? "bshd" : "bhsd";
}

Layout parse_layout(std::string_view s) {
  if (s == "bshd") return Layout::bshd;
  if (s == "bhsd") return Layout::bhsd;
  throw InvalidArgument("--layout",
                        "unknown layout '" + std::string(s) + "' (expected bshd or bhsd)");
}

namespace {

template <typename T>
xt::xtensor<T, 4> zeros(const std::array<std::size_t, 4>& shape) {
  xt::xtensor<T, 4> t(shape);
  // The 16-bit storage types have no zero-initializing constructor; all-zero bits is +0.
  std::memset(static_cast<void*>(t.data()), 0, t.size() * sizeof(T));
  return t;
}

}  // namespace

HostTensor::HostTensor(DType dtype, Layout layout, std::int64_t B, std::int64_t H, std::int64_t S,
                       std::int64_t d)
    : dtype_(dtype), layout_(layout), B_(B), H_(H), S_(S), d_(d) {
  if (B < 0 || H < 0 || S < 0 || d < 0) {
    throw InvalidArgument("HostTensor", "negative extent in (B, H, S, d) = (" + std::to_string(B) +
                                            ", " + std::to_string(H) + ", " + std::to_string(S) +
                                            ", " + std::to_string(d) + ")");
  }
  const auto u = [](std::int64_t x) { return static_cast<std::size_t>(x); };
  const std::array<std::size_t, 4> shape = layout == Layout::bhsd
                                               ? std::array{u(B), u(H), u(S), u(d)}
                                               : std::array{u(B), u(S), u(H), u(d)};
  switch (dtype) {
    case DType::f32:
      storage_ = zeros<float>(shape);
      break;
    case DType::f16:
      storage_ = zeros<float16>(shape);
      break;
    case DType::bf16:
      storage_ = zeros<bfloat16>(shape);
      break;
  }
}

HostTensor HostTensor::from_canonical(const xt::xarray<double>& values, DType dtype,
                                      Layout layout) {
  if (values.dimension() != 4) {
    throw InvalidArgument("HostTensor", "canonical values must be 4-D (B, H, S, d), got " +
                                            std::to_string(values.dimension()) + " dimensions");
  }
  const auto& shape = values.shape();
  const auto i = [](std::size_t x) { return static_cast<std::int64_t>(x); };
  HostTensor t(dtype, layout, i(shape[0]), i(shape[1]), i(shape[2]), i(shape[3]));
  std::size_t n = 0;
  for (std::int64_t b = 0; b < t.B_; ++b)
    for (std::int64_t h = 0; h < t.H_; ++h)
      for (std::int64_t s = 0; s < t.S_; ++s)
        for (std::int64_t e = 0; e < t.d_; ++e) {
          t.set(b, h, s, e, static_cast<float>(values.flat(n++)));
        }
  return t;
}

void* HostTensor::data() {
  return std::visit([](auto& t) { return static_cast<void*>(t.data()); }, storage_);
}

const void* HostTensor::data() const {
  return std::visit([](const auto& t) { return static_cast<const void*>(t.data()); }, storage_);
}

TensorView HostTensor::view() {
  return layout_ == Layout::bhsd ? bhsd_view(data(), dtype_, B_, H_, S_, d_)
                                 : bshd_view(data(), dtype_, B_, S_, H_, d_);
}

TensorView HostTensor::view() const {
  return const_cast<HostTensor*>(this)->view();
}

float HostTensor::get(std::int64_t b, std::int64_t h, std::int64_t s, std::int64_t i) const {
  return view().load(b, s, h, i);
}

void HostTensor::set(std::int64_t b, std::int64_t h, std::int64_t s, std::int64_t i, float v) {
  view().store(b, s, h, i, v);
}

void HostTensor::fill_bytes(unsigned char value) {
  std::memset(data(), value, bytes());
}

xt::xtensor<double, 4> HostTensor::to_double() const {
  const auto u = [](std::int64_t x) { return static_cast<std::size_t>(x); };
  xt::xtensor<double, 4> out(std::array{u(B_), u(H_), u(S_), u(d_)});
  const TensorView v = view();
  double* dst = out.data();
  for (std::int64_t b = 0; b < B_; ++b)
    for (std::int64_t h = 0; h < H_; ++h)
      for (std::int64_t s = 0; s < S_; ++s)
        for (std::int64_t i = 0; i < d_; ++i) *dst++ = static_cast<double>(v.load(b, s, h, i));
  return out;
}

HostTensor HostTensor::with_layout(Layout layout) const {
  HostTensor out(dtype_, layout, B_, H_, S_, d_);
  const TensorView src = view();
  const TensorView dst = out.view();
  const std::size_t row_bytes = static_cast<std::size_t>(d_) * dtype_size(dtype_);
  const auto* from = static_cast<const unsigned char*>(src.data);
  auto* to = static_cast<unsigned char*>(dst.data);
  // Rows of d elements are contiguous in both layouts: copy bytes, so NaN payloads survive.
  for (std::int64_t b = 0; b < B_; ++b)
    for (std::int64_t h = 0; h < H_; ++h)
      for (std::int64_t s = 0; s < S_; ++s) {
        const auto size = static_cast<std::int64_t>(dtype_size(dtype_));
        std::memcpy(to + dst.offset(b, s, h) * size, from + src.offset(b, s, h) * size, row_bytes);
      }
  return out;
}

}  // namespace flashref::verify

#include "arrays.hpp"

#include <cstdint>
#include <vector>

#include "flashref/error.hpp"

namespace flashref::python {
namespace {

bool is_host(const AnyArray& a) { return a.device_type() == nb::device::cpu::value; }

std::string dtype_text(nb::dlpack::dtype t) {
  const char* kind = t.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::Float)    ? "float"
                     : t.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::Bfloat) ? "bfloat"
                     : t.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::Int)    ? "int"
                     : t.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::UInt)   ? "uint"
                                                                                           : "other";
  return std::string(kind) + std::to_string(t.bits);
}

// The element's source type: the three storage dtypes or float64.
enum class Source : std::uint8_t { f32, f16, bf16, f64, other };
Source source_of(nb::dlpack::dtype t) {
  if (t.lanes != 1) return Source::other;
  if (t.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::Float)) {
    if (t.bits == 32) return Source::f32;
    if (t.bits == 16) return Source::f16;
    if (t.bits == 64) return Source::f64;
  }
  if (t.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::Bfloat) && t.bits == 16) {
    return Source::bf16;
  }
  return Source::other;
}

template <class Array>
TensorView make_view(const Array& a, void* data, const std::string& name) {
  if (a.ndim() != 4) {
    throw InvalidArgument(name, "must be 4-D (B, H, S, d) here, got " + std::to_string(a.ndim()) +
                                    "-D");
  }
  if (a.shape(3) > 1 && a.stride(3) != 1) {
    throw InvalidArgument(name, "the last axis (d) must be contiguous (stride 1), got stride " +
                                    std::to_string(a.stride(3)));
  }
  TensorView v;
  v.data = data;
  v.dtype = array_dtype(a.dtype(), name);
  v.batch = static_cast<std::int64_t>(a.shape(0));
  v.heads = static_cast<std::int64_t>(a.shape(1));
  v.seq = static_cast<std::int64_t>(a.shape(2));
  v.dim = static_cast<std::int64_t>(a.shape(3));
  v.batch_stride = a.stride(0);
  v.head_stride = a.stride(1);
  v.seq_stride = a.stride(2);
  return v;
}

}  // namespace

DType array_dtype(nb::dlpack::dtype t, const std::string& name) {
  switch (source_of(t)) {
    case Source::f32: return DType::f32;
    case Source::f16: return DType::f16;
    case Source::bf16: return DType::bf16;
    default:
      throw nb::type_error((name + ": dtype must be float32, float16 or bfloat16, got " +
                            dtype_text(t))
                               .c_str());
  }
}

xt::xarray<double> to_double(const AnyArray& a, const std::string& name) {
  if (!is_host(a)) {
    throw nb::type_error((name + ": must be a host (CPU) array here").c_str());
  }
  const Source source = source_of(a.dtype());
  if (source == Source::other) {
    throw nb::type_error((name + ": dtype must be float16, bfloat16, float32 or float64, got " +
                          dtype_text(a.dtype()))
                             .c_str());
  }
  const std::size_t rank = a.ndim();
  std::vector<std::size_t> shape(rank);
  for (std::size_t i = 0; i < rank; ++i) shape[i] = a.shape(i);
  xt::xarray<double> out = xt::xarray<double>::from_shape(shape);
  const void* data = a.data();
  // Walk the elements in row-major order, turning the flat index into a strided offset.
  std::vector<std::size_t> index(rank, 0);
  const std::size_t count = out.size();
  for (std::size_t n = 0; n < count; ++n) {
    std::int64_t offset = 0;
    for (std::size_t i = 0; i < rank; ++i) offset += static_cast<std::int64_t>(index[i]) * a.stride(i);
    double value = 0.0;
    switch (source) {
      case Source::f64: value = static_cast<const double*>(data)[offset]; break;
      case Source::f32: value = load_as_float(data, DType::f32, offset); break;
      case Source::f16: value = load_as_float(data, DType::f16, offset); break;
      case Source::bf16: value = load_as_float(data, DType::bf16, offset); break;
      case Source::other: break;
    }
    out.data()[n] = value;
    for (std::size_t i = rank; i-- > 0;) {
      if (++index[i] < shape[i]) break;
      index[i] = 0;
    }
  }
  return out;
}

verify::HostTensor to_host_tensor(const AnyArray& a, DType dtype, const std::string& name) {
  if (a.ndim() != 4) {
    throw InvalidArgument(name, "must be 4-D (B, H, S, d) here, got " + std::to_string(a.ndim()) +
                                    "-D");
  }
  return verify::HostTensor::from_canonical(to_double(a, name), dtype, verify::Layout::bhsd);
}

TensorView view_of(const AnyArray& a, const std::string& name) {
  return make_view(a, const_cast<void*>(a.data()), name);
}
TensorView view_of(const OutArray& a, const std::string& name) {
  return make_view(a, a.data(), name);
}

nb::object to_numpy(xt::xarray<double>&& values) {
  auto* owned = new xt::xarray<double>(std::move(values));
  nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<xt::xarray<double>*>(p); });
  std::vector<std::size_t> shape(owned->shape().begin(), owned->shape().end());
  return nb::cast(nb::ndarray<nb::numpy, double>(owned->data(), shape.size(), shape.data(), owner));
}

nb::object to_numpy_f32(const xt::xarray<double>& values) {
  auto* owned = new xt::xarray<float>(xt::cast<float>(values));
  nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<xt::xarray<float>*>(p); });
  std::vector<std::size_t> shape(owned->shape().begin(), owned->shape().end());
  return nb::cast(nb::ndarray<nb::numpy, float>(owned->data(), shape.size(), shape.data(), owner));
}

}  // namespace flashref::python

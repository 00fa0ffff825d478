// Arrays crossing the Python boundary through DLPack (nanobind's ndarray): numpy arrays and
// torch tensors, any strides. Conversions name the argument they were given as, so a bad
// array raises ValueError/TypeError saying which one.
#pragma once

#include <string>

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <xtensor/xarray.hpp>

#include "flashref/dtype.hpp"
#include "flashref/tensor.hpp"
#include "flashref/verify/host_tensor.hpp"

namespace flashref::python {

namespace nb = nanobind;

// Any array, read-only (inputs and candidates) or written (outputs of flashref.attention).
using AnyArray = nb::ndarray<nb::ro>;
using OutArray = nb::ndarray<>;

// f32, f16 or bf16; TypeError naming `name` for anything else.
DType array_dtype(nb::dlpack::dtype t, const std::string& name);

// The values of a host array of float16, bfloat16, float32 or float64, in its own shape,
// exactly, whatever its strides. TypeError for a device array or another dtype.
xt::xarray<double> to_double(const AnyArray& a, const std::string& name);

// A host array's values as a HostTensor of `dtype` ((B, H, S, d), 4-D), rounded to it.
verify::HostTensor to_host_tensor(const AnyArray& a, DType dtype, const std::string& name);

// A TensorView over the array's own memory: logically (B, H, S, d) in the array's axis order,
// any strides for the first three axes; the last must be contiguous (ValueError otherwise).
TensorView view_of(const AnyArray& a, const std::string& name);
TensorView view_of(const OutArray& a, const std::string& name);

// A new numpy float64 array owning `values`.
nb::object to_numpy(xt::xarray<double>&& values);
// A new numpy float32 array (exact for every f16/bf16/f32 value).
nb::object to_numpy_f32(const xt::xarray<double>& values);

}  // namespace flashref::python

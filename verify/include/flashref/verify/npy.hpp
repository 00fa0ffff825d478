// NumPy .npy files in and out: float32 and float16, little-endian, C order.
//
// This is how tensors cross from another kernel (PyTorch, Triton, JAX, ...) into flashref and
// back: `numpy.save("q.npy", t.float().cpu().numpy())`. xtensor's xnpy.hpp parses the header
// dictionary and writes headers; what it lacks is added here: float16, checks of every field,
// detection of truncated or oversized data, and errors that name the file and say what to fix.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include <xtensor/xarray.hpp>

#include "flashref/dtype.hpp"

namespace flashref::verify {

// An array read from a .npy file. Values are held as float32 whatever the file stored: every
// float16 value is exactly representable in float32, so nothing is lost.
struct NpyArray {
  DType dtype = DType::f32;  // what the file stored: f32 or f16
  xt::xarray<float> values;  // the file's shape, C order
};

// Reads a .npy file. Anything but float32/float16, little-endian, C order, format version
// 1.0-3.0 and exactly the bytes the header promises throws InvalidArgument whose field is
// `path` and whose message says what is wrong and how to save the array instead.
NpyArray read_npy(const std::string& path);
// The same from a stream; `name` stands for the file in error messages.
NpyArray read_npy(std::istream& in, const std::string& name);

// Writes `values` as a .npy file of dtype f32 or f16 (values rounded to nearest even for f16).
// Throws InvalidArgument(path, ...) when the file cannot be written or for dtype bf16, which
// NumPy lacks.
void write_npy(const std::string& path, const xt::xarray<float>& values, DType dtype = DType::f32);
void write_npy(std::ostream& out, const xt::xarray<float>& values, DType dtype,
               const std::string& name);

// Writes `values` as a float64 .npy file (the gold states of `flashref trace`). Reading stays
// float32/float16 only: candidates are never float64.
void write_npy_f64(const std::string& path, const xt::xarray<double>& values);

// "(2, 4, 128, 64)": a shape as NumPy prints it, for messages.
std::string shape_string(const std::vector<std::size_t>& shape);

}  // namespace flashref::verify

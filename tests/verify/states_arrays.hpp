// Arrays for the states tests and the walkthrough's example writer: inputs as the .npy files a
// user gives (float32, (B, H, S, d)), states as the float32 arrays a kernel writes, and an
// equality of such arrays bit for bit (NaN equal to NaN: rows past S_q hold NaN).
#pragma once

#include <cmath>
#include <cstddef>
#include <vector>

#include <xtensor/xarray.hpp>

#include "flashref/verify/host_tensor.hpp"

namespace flashref::verify::testing {

template <class T>
xt::xarray<float> as_float(const T& values) {
  xt::xarray<float> f = xt::xarray<float>::from_shape(
      std::vector<std::size_t>(values.shape().begin(), values.shape().end()));
  for (std::size_t n = 0; n < values.size(); ++n) f.flat(n) = static_cast<float>(values.flat(n));
  return f;
}

// A tensor's values in the canonical (B, H, S, d) layout as float32 (exact: every dtype's
// values are floats).
inline xt::xarray<float> as_array(const HostTensor& t) { return as_float(t.to_double()); }

inline bool same_bits(const xt::xarray<float>& a, const xt::xarray<float>& b) {
  if (a.shape() != b.shape()) return false;
  for (std::size_t n = 0; n < a.size(); ++n) {
    const float x = a.flat(n), y = b.flat(n);
    if (!(x == y || (std::isnan(x) && std::isnan(y)))) return false;
  }
  return true;
}

}  // namespace flashref::verify::testing

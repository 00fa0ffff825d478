// Reading caller tensors, through their views, into the canonical (B, H, S, d) xtensors the
// naive kernels work on. Each input is read exactly once; any strides and layouts work.
#pragma once

#include <omp.h>

#include <cstddef>
#include <cstdint>

#include <xtensor/xtensor.hpp>

#include "flashref/params.hpp"

namespace flashref::reference {

// OpenMP threads to use: the caller's choice, or OpenMP's default when it left 0.
inline int thread_count(const ExecutionOptions& options) {
  return options.num_threads > 0 ? options.num_threads : omp_get_max_threads();
}

// Copies view `v` (logically (batch, seq, head, dim)) into a (batch, head, seq, dim) tensor of T.
// Converting a float, or a 16-bit value read as float, to T = float or double is exact.
template <class T>
xt::xtensor<T, 4> gather_bhsd(const TensorView& v, int threads) {
  xt::xtensor<T, 4> t(std::array<std::size_t, 4>{
      static_cast<std::size_t>(v.batch), static_cast<std::size_t>(v.heads),
      static_cast<std::size_t>(v.seq), static_cast<std::size_t>(v.dim)});
#pragma omp parallel for collapse(2) num_threads(threads)
  for (std::int64_t b = 0; b < v.batch; ++b) {
    for (std::int64_t h = 0; h < v.heads; ++h) {
      T* out = t.data() + (b * v.heads + h) * v.seq * v.dim;
      for (std::int64_t s = 0; s < v.seq; ++s) {
        for (std::int64_t c = 0; c < v.dim; ++c)
          out[s * v.dim + c] = static_cast<T>(v.load(b, s, h, c));
      }
    }
  }
  return t;
}

}  // namespace flashref::reference

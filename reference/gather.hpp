// Reading caller tensors, through their views, into the canonical (B, H, S, d) xtensors the
// naive kernels work on. Each input is read exactly once; any strides and layouts work.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include <xtensor/xtensor.hpp>

#include "flashref/detail/parallel_errors.hpp"
#include "flashref/limits.hpp"
#include "flashref/params.hpp"

namespace flashref::reference {

// OpenMP threads to use: the caller's choice, or OpenMP's default when it left 0; at most
// kMaxThreads (limits.hpp) and at most one per task.
inline int thread_count(const ExecutionOptions& options, std::int64_t tasks) {
  const int wanted = options.num_threads > 0 ? options.num_threads : omp_get_max_threads();
  return static_cast<int>(std::clamp<std::int64_t>(std::min<std::int64_t>(wanted, tasks), 1,
                                                   kMaxThreads));
}

// Copies view `v` (logically (batch, seq, head, dim)) into a (batch, head, seq, dim) tensor of T.
// Converting a float, or a 16-bit value read as float, to T = float or double is exact.
template <class T>
xt::xtensor<T, 4> gather_bhsd(const TensorView& v, int threads) {
  xt::xtensor<T, 4> t(std::array<std::size_t, 4>{
      static_cast<std::size_t>(v.batch), static_cast<std::size_t>(v.heads),
      static_cast<std::size_t>(v.seq), static_cast<std::size_t>(v.dim)});
  detail::ParallelErrors errors;
  const int team = std::clamp(threads, 1, static_cast<int>(std::min<std::int64_t>(
                                              std::max<std::int64_t>(v.batch * v.heads, 1),
                                              kMaxThreads)));
#pragma omp parallel for collapse(2) num_threads(team)
  for (std::int64_t b = 0; b < v.batch; ++b) {
    for (std::int64_t h = 0; h < v.heads; ++h) {
      errors.run([&] {
        T* out = t.data() + (b * v.heads + h) * v.seq * v.dim;
        for (std::int64_t s = 0; s < v.seq; ++s) {
          for (std::int64_t c = 0; c < v.dim; ++c)
            out[s * v.dim + c] = static_cast<T>(v.load(b, s, h, c));
        }
      });
    }
  }
  errors.rethrow();
  return t;
}

}  // namespace flashref::reference

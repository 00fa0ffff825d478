// Shared helpers of the cpu backend's tests: host tensors in any dtype and layout, seeded
// random inputs, running a backend, and the baseline-relative rule of docs/verification.md.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <xtensor/xtensor.hpp>

#include "flashref/backend.hpp"
#include "flashref/cpu/backend.hpp"
#include "flashref/error.hpp"
#include "flashref/params.hpp"
#include "flashref/reference/backend.hpp"
#include "flashref/reference/gold.hpp"

namespace flashref::cputest {

enum class Layout { bshd, bhsd };

// An owned tensor of logical shape (batch, seq, heads, dim), in either memory layout.
struct HostTensor {
  DType dtype = DType::f32;
  std::int64_t B = 0, S = 0, H = 0, d = 0;
  Layout layout = Layout::bshd;
  std::vector<unsigned char> bytes;

  HostTensor() = default;
  HostTensor(DType t, std::int64_t B_, std::int64_t S_, std::int64_t H_, std::int64_t d_,
             Layout l = Layout::bshd)
      : dtype(t),
        B(B_),
        S(S_),
        H(H_),
        d(d_),
        layout(l),
        bytes(static_cast<std::size_t>(B_ * S_ * H_ * d_) * dtype_size(t)) {}

  TensorView view() const {
    void* data = const_cast<unsigned char*>(bytes.data());
    return layout == Layout::bshd ? bshd_view(data, dtype, B, S, H, d)
                                  : bhsd_view(data, dtype, B, H, S, d);
  }
  float at(std::int64_t b, std::int64_t s, std::int64_t h, std::int64_t c) const {
    return view().load(b, s, h, c);
  }
  void set(std::int64_t b, std::int64_t s, std::int64_t h, std::int64_t c, float x) {
    view().store(b, s, h, c, x);
  }
  std::int64_t elements() const { return B * S * H * d; }
};

inline void fill_random(HostTensor& t, std::mt19937_64& rng, float stddev) {
  std::normal_distribution<float> normal(0.0f, stddev);
  for (std::int64_t b = 0; b < t.B; ++b)
    for (std::int64_t s = 0; s < t.S; ++s)
      for (std::int64_t h = 0; h < t.H; ++h)
        for (std::int64_t c = 0; c < t.d; ++c) t.set(b, s, h, c, normal(rng));
}

struct Inputs {
  Problem problem;
  HostTensor q, k, v, dO;
};

// Seeded N(0, stddev^2) inputs, rounded to the problem's dtype.
inline Inputs make_inputs(const Problem& p, std::uint64_t seed, Layout layout = Layout::bshd,
                          float stddev = 1.0f) {
  Inputs in{p, HostTensor(p.dtype, p.B, p.S_q, p.H, p.d, layout),
            HostTensor(p.dtype, p.B, p.S_k, p.H_kv, p.d, layout),
            HostTensor(p.dtype, p.B, p.S_k, p.H_kv, p.d, layout),
            HostTensor(p.dtype, p.B, p.S_q, p.H, p.d, layout)};
  std::mt19937_64 rng(seed);
  fill_random(in.q, rng, stddev);
  fill_random(in.k, rng, stddev);
  fill_random(in.v, rng, stddev);
  fill_random(in.dO, rng, 1.0f);
  return in;
}

struct ForwardResult {
  HostTensor o;
  std::vector<float> lse;  // (B, H, S_q)
  float L(const Problem& p, std::int64_t b, std::int64_t h, std::int64_t q) const {
    return lse[static_cast<std::size_t>((b * p.H + h) * p.S_q + q)];
  }
};

struct BackwardResult {
  HostTensor dq, dk, dv;
};

inline ForwardResult empty_forward(const Inputs& in) {
  const Problem& p = in.problem;
  return {HostTensor(p.dtype, p.B, p.S_q, p.H, p.d, in.q.layout),
          std::vector<float>(static_cast<std::size_t>(p.B * p.H * p.S_q))};
}

inline BackwardResult empty_backward(const Inputs& in) {
  const Problem& p = in.problem;
  return {HostTensor(p.grad_dtype, p.B, p.S_q, p.H, p.d, in.q.layout),
          HostTensor(p.grad_dtype, p.B, p.S_k, p.H_kv, p.d, in.k.layout),
          HostTensor(p.grad_dtype, p.B, p.S_k, p.H_kv, p.d, in.k.layout)};
}

inline ForwardParams forward_params(const Inputs& in, ForwardResult& out,
                                    const ExecutionOptions& options = {}) {
  ForwardParams fp;
  fp.problem = in.problem;
  fp.q = in.q.view();
  fp.k = in.k.view();
  fp.v = in.v.view();
  fp.o = out.o.view();
  fp.lse = out.lse.data();
  fp.options = options;
  return fp;
}

inline BackwardParams backward_params(const Inputs& in, const ForwardResult& fwd,
                                      BackwardResult& out, const ExecutionOptions& options = {}) {
  BackwardParams bp;
  bp.problem = in.problem;
  bp.q = in.q.view();
  bp.k = in.k.view();
  bp.v = in.v.view();
  bp.o = fwd.o.view();
  bp.dO = in.dO.view();
  bp.lse = fwd.lse.data();
  bp.dq = out.dq.view();
  bp.dk = out.dk.view();
  bp.dv = out.dv.view();
  bp.options = options;
  return bp;
}

inline ForwardResult run_forward(const Backend& backend, const Inputs& in,
                                 const ExecutionOptions& options = {}) {
  ForwardResult out = empty_forward(in);
  backend.forward(forward_params(in, out, options));
  return out;
}

inline BackwardResult run_backward(const Backend& backend, const Inputs& in,
                                   const ForwardResult& fwd, const ExecutionOptions& options = {}) {
  BackwardResult out = empty_backward(in);
  backend.backward(backward_params(in, fwd, out, options));
  return out;
}

inline ExecutionOptions tiles(int tile_q, int tile_k, int threads = 0) {
  ExecutionOptions o;
  o.tile_q = tile_q;
  o.tile_k = tile_k;
  o.num_threads = threads;
  return o;
}

// Max |x - gold| over a (B, S, H, d) tensor against a gold (B, H, S, d) xtensor; a NaN or an
// infinity where the gold is finite counts as an infinite error.
inline double max_abs_error(const HostTensor& x, const xt::xtensor<double, 4>& gold) {
  double worst = 0.0;
  for (std::int64_t b = 0; b < x.B; ++b)
    for (std::int64_t h = 0; h < x.H; ++h)
      for (std::int64_t s = 0; s < x.S; ++s)
        for (std::int64_t c = 0; c < x.d; ++c) {
          const double g = gold(b, h, s, c);
          const double e = std::fabs(static_cast<double>(x.at(b, s, h, c)) - g);
          worst = std::max(worst, std::isfinite(e) ? e : INFINITY);
        }
  return worst;
}

// The same for L, where a -inf of the gold must be matched exactly.
inline double max_abs_error(const std::vector<float>& L, const xt::xtensor<double, 3>& gold) {
  double worst = 0.0;
  std::size_t n = 0;
  for (double g : gold) {
    const double x = L[n++];
    if (std::isinf(g) && g < 0) {
      if (!(std::isinf(x) && x < 0)) worst = INFINITY;
      continue;
    }
    const double e = std::fabs(x - g);
    worst = std::max(worst, std::isfinite(e) ? e : INFINITY);
  }
  return worst;
}

template <class E>
double max_finite_magnitude(const E& gold) {
  double m = 0.0;
  for (double g : gold) {
    if (std::isfinite(g)) m = std::max(m, std::fabs(g));
  }
  return m;
}

// The rule of docs/verification.md: the candidate's max error at most k times the baseline's
// plus twice one rounding step of the output dtype at the gold's largest magnitude.
struct RuleCheck {
  std::string tensor;
  double candidate = 0, baseline = 0, limit = 0;
  bool pass() const { return candidate <= limit; }
  std::string describe() const {
    std::ostringstream o;
    o << tensor << ": candidate max err " << candidate << ", baseline " << baseline << ", limit "
      << limit;
    return o.str();
  }
};

template <class Gold>
RuleCheck rule(const std::string& tensor, double candidate, double baseline, double k,
               DType out_dtype, const Gold& gold) {
  const double floor = 2.0 * rounding_step(out_dtype, max_finite_magnitude(gold));
  return {tensor, candidate, baseline, k * baseline + floor};
}

}  // namespace flashref::cputest

// Host tensors for one attention problem, in a chosen memory layout, filled with seeded random
// values, plus helpers to read results back in the gold's (B, H, S, d) order and measure errors.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <xtensor/xtensor.hpp>

#include "flashref/params.hpp"

namespace flashref::test {

enum class Layout {
  bshd,    // FlashAttention's
  bhsd,    // PyTorch's and the .npy files'
  bsd,     // the course's 3-D layout (one head only)
  padded,  // (B, H, S, d) order with gaps after every row, head and batch
};

// One tensor's storage and its logical (B, S, H, d) view. Movable, not copyable (the view
// points into the storage).
struct HostTensor {
  std::vector<float> storage;  // float-aligned bytes holding elements of view.dtype
  TensorView view;

  HostTensor() = default;
  HostTensor(DType t, Layout layout, std::int64_t B, std::int64_t S, std::int64_t H,
             std::int64_t d) {
    const std::int64_t row = d + 3, head = S * row + 5, batch = H * head + 7;
    std::int64_t elements = B * S * H * d;
    if (layout == Layout::padded) elements = B * batch;
    storage.assign(
        static_cast<std::size_t>((elements * static_cast<std::int64_t>(dtype_size(t)) + 3) / 4),
        0.0f);
    void* data = storage.data();
    switch (layout) {
      case Layout::bshd:
        view = bshd_view(data, t, B, S, H, d);
        break;
      case Layout::bhsd:
        view = bhsd_view(data, t, B, H, S, d);
        break;
      case Layout::bsd:
        view = bsd_view(data, t, B, S, d);
        break;
      case Layout::padded:
        view = TensorView{data, t, B, S, H, d, batch, row, head};
        break;
    }
  }
  HostTensor(HostTensor&&) = default;
  HostTensor& operator=(HostTensor&&) = default;
  HostTensor(const HostTensor&) = delete;
  HostTensor& operator=(const HostTensor&) = delete;

  void fill_bytes(unsigned char byte) {
    auto* p = reinterpret_cast<unsigned char*>(storage.data());
    std::fill(p, p + storage.size() * sizeof(float), byte);
  }
  bool all_bytes_are(unsigned char byte) const {
    const auto* p = reinterpret_cast<const unsigned char*>(storage.data());
    return std::all_of(p, p + storage.size() * sizeof(float),
                       [byte](unsigned char x) { return x == byte; });
  }
  // Calls f(b, s, h, c) for every logical element, in (b, s, h, c) order.
  template <class F>
  void for_each(F f) const {
    for (std::int64_t b = 0; b < view.batch; ++b)
      for (std::int64_t s = 0; s < view.seq; ++s)
        for (std::int64_t h = 0; h < view.heads; ++h)
          for (std::int64_t c = 0; c < view.dim; ++c) f(b, s, h, c);
  }
};

// Everything a forward and a backward call need. Inputs are random; outputs are zero.
struct AttentionData {
  Problem problem;
  HostTensor q, k, v, o, dO, dq, dk, dv;
  std::vector<float> lse;
  ExecutionOptions options;

  AttentionData(const Problem& p, Layout layout)
      : problem(p),
        q(p.dtype, layout, p.B, p.S_q, p.H, p.d),
        k(p.dtype, layout, p.B, p.S_k, p.H_kv, p.d),
        v(p.dtype, layout, p.B, p.S_k, p.H_kv, p.d),
        o(p.dtype, layout, p.B, p.S_q, p.H, p.d),
        dO(p.dtype, layout, p.B, p.S_q, p.H, p.d),
        dq(p.grad_dtype, layout, p.B, p.S_q, p.H, p.d),
        dk(p.grad_dtype, layout, p.B, p.S_k, p.H_kv, p.d),
        dv(p.grad_dtype, layout, p.B, p.S_k, p.H_kv, p.d),
        lse(static_cast<std::size_t>(p.B * p.H * p.S_q), 0.0f) {}

  ForwardParams forward_params() const {
    ForwardParams f;
    f.problem = problem;
    f.q = q.view;
    f.k = k.view;
    f.v = v.view;
    f.o = o.view;
    f.lse = const_cast<float*>(lse.data());
    f.options = options;
    return f;
  }
  BackwardParams backward_params() const {
    BackwardParams b;
    b.problem = problem;
    b.q = q.view;
    b.k = k.view;
    b.v = v.view;
    b.o = o.view;
    b.dO = dO.view;
    b.lse = lse.data();
    b.dq = dq.view;
    b.dk = dk.view;
    b.dv = dv.view;
    b.options = options;
    return b;
  }
};

// Fills a tensor with N(0, magnitude^2) values rounded to its dtype, drawn in logical
// (b, s, h, c) order so that every layout holds the same values for the same seed.
inline void fill_normal(HostTensor& t, std::mt19937_64& rng, float magnitude = 1.0f) {
  std::normal_distribution<float> normal(0.0f, magnitude);
  t.for_each([&](auto b, auto s, auto h, auto c) { t.view.store(b, s, h, c, normal(rng)); });
}

// Q, K, V and dO filled with fill_normal from one seed.
inline AttentionData random_data(const Problem& p, Layout layout, std::uint64_t seed,
                                 float magnitude = 1.0f) {
  AttentionData data(p, layout);
  std::mt19937_64 rng(seed);
  for (HostTensor* t : {&data.q, &data.k, &data.v, &data.dO}) fill_normal(*t, rng, magnitude);
  return data;
}

// A view's contents as doubles in (B, H, S, d) order: the gold's layout.
inline xt::xtensor<double, 4> to_bhsd(const TensorView& v) {
  xt::xtensor<double, 4> t(std::array<std::size_t, 4>{
      static_cast<std::size_t>(v.batch), static_cast<std::size_t>(v.heads),
      static_cast<std::size_t>(v.seq), static_cast<std::size_t>(v.dim)});
  for (std::int64_t b = 0; b < v.batch; ++b)
    for (std::int64_t s = 0; s < v.seq; ++s)
      for (std::int64_t h = 0; h < v.heads; ++h)
        for (std::int64_t c = 0; c < v.dim; ++c)
          t(static_cast<std::size_t>(b), static_cast<std::size_t>(h), static_cast<std::size_t>(s),
            static_cast<std::size_t>(c)) = v.load(b, s, h, c);
  return t;
}

// L as doubles, (B, H, S_q).
inline xt::xtensor<double, 3> lse_tensor(const AttentionData& data) {
  const Problem& p = data.problem;
  xt::xtensor<double, 3> t(std::array<std::size_t, 3>{static_cast<std::size_t>(p.B),
                                                      static_cast<std::size_t>(p.H),
                                                      static_cast<std::size_t>(p.S_q)});
  std::copy(data.lse.begin(), data.lse.end(), t.begin());
  return t;
}

// ||candidate - gold||_2 / ||gold||_2 over the entries where the gold is finite.
template <class A, class B>
double relative_l2(const A& candidate, const B& gold) {
  double diff = 0, norm = 0;
  auto c = candidate.begin();
  for (auto g = gold.begin(); g != gold.end(); ++g, ++c) {
    if (!std::isfinite(*g)) continue;
    diff += (*c - *g) * (*c - *g);
    norm += *g * *g;
  }
  return std::sqrt(diff) / std::sqrt(norm);
}

// max |candidate - gold| over the entries where the gold is finite.
template <class A, class B>
double max_abs_error(const A& candidate, const B& gold) {
  double worst = 0;
  auto c = candidate.begin();
  for (auto g = gold.begin(); g != gold.end(); ++g, ++c) {
    if (std::isfinite(*g)) worst = std::max(worst, std::fabs(*c - *g));
  }
  return worst;
}

// Whether every entry is bit-for-bit the same value (NaN never is).
template <class A, class B>
bool identical(const A& a, const B& b) {
  if (a.shape() != b.shape()) return false;
  auto y = b.begin();
  for (auto x = a.begin(); x != a.end(); ++x, ++y) {
    if (!(*x == *y) || std::signbit(*x) != std::signbit(*y)) return false;
  }
  return true;
}

// "1.234e-05": for RecordProperty, whose std::to_string would print 0.000012.
inline std::string scientific(double x) {
  std::ostringstream o;
  o.precision(3);
  o << std::scientific << x;
  return o.str();
}

}  // namespace flashref::test

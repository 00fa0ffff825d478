#include "flashref/verify/sum_magnitude.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include <xtensor/xtensor.hpp>

#include "flashref/detail/parallel_errors.hpp"
#include "flashref/error.hpp"

namespace flashref::verify {
namespace {

std::size_t size(std::int64_t n) {
  return static_cast<std::size_t>(n);
}

// max that keeps `m` when `x` is NaN, so one non-finite row does not hide the others.
void raise(double& m, double x) {
  if (x > m) m = x;
}

// The sums of one (batch, key/value head): every query head of its group against its keys.
struct HeadSums {
  std::vector<double> S, P, dS, O;  // one query row's, over its visible keys (O: d values)
  std::vector<double> dK, dV;       // M_dK and M_dV of the head's key rows, (S_k, d)
  std::array<double, 5> max{};
  double max_abs_score = 0.0;

  HeadSums(std::int64_t S_k, std::int64_t d)
      : S(size(S_k)), P(size(S_k)), dS(size(S_k)), O(size(d)), dK(size(S_k * d)),
        dV(size(S_k * d)) {}
};

void add(std::array<double, 5>& max, TensorId t, double x) {
  raise(max[static_cast<std::size_t>(t)], x);
}

// Query row `q` against keys 0..last: M_O, M_L, M_dQ of the row and its share of M_dK, M_dV.
void row(HeadSums& h, const double* q, const double* K, const double* V, const double* dO,
         std::int64_t last, std::int64_t d, double scale) {
  double m = -INFINITY, s_min = INFINITY;
  for (std::int64_t j = 0; j <= last; ++j) {
    double dot = 0.0;
    for (std::int64_t c = 0; c < d; ++c) dot += q[c] * K[j * d + c];
    h.S[size(j)] = scale * dot;
    m = std::max(m, h.S[size(j)]);
    s_min = std::min(s_min, h.S[size(j)]);
    raise(h.max_abs_score, std::fabs(h.S[size(j)]));
  }
  double l = 0.0;
  for (std::int64_t j = 0; j <= last; ++j) l += std::exp(h.S[size(j)] - m);
  const double L = m + std::log(l);
  // A kept running max is the max of some of the row's scores: it lags m by at most m - s_min.
  const double lag = std::min(kConditionalRescale, m - s_min);
  add(h.max, TensorId::L, std::fabs(m) + std::log(l) + 2.0 * lag);
  std::fill(h.O.begin(), h.O.end(), 0.0);
  for (std::int64_t j = 0; j <= last; ++j) {
    h.P[size(j)] = std::exp(h.S[size(j)] - L);
    for (std::int64_t c = 0; c < d; ++c) h.O[size(c)] += h.P[size(j)] * V[j * d + c];
  }
  for (std::int64_t c = 0; c < d; ++c) {
    double terms = 0.0;
    for (std::int64_t j = 0; j <= last; ++j) terms += h.P[size(j)] * std::fabs(V[j * d + c]);
    add(h.max, TensorId::O, terms);
  }
  if (dO == nullptr) return;
  double D = 0.0;
  for (std::int64_t c = 0; c < d; ++c) D += dO[c] * h.O[size(c)];
  for (std::int64_t j = 0; j <= last; ++j) {
    double dP = 0.0;
    for (std::int64_t c = 0; c < d; ++c) dP += dO[c] * V[j * d + c];
    h.dS[size(j)] = std::fabs(h.P[size(j)] * (dP - D));
  }
  const double abs_scale = std::fabs(scale);
  for (std::int64_t c = 0; c < d; ++c) {
    double terms = 0.0;
    for (std::int64_t j = 0; j <= last; ++j) terms += h.dS[size(j)] * std::fabs(K[j * d + c]);
    add(h.max, TensorId::dQ, abs_scale * terms);
  }
  for (std::int64_t j = 0; j <= last; ++j) {
    for (std::int64_t c = 0; c < d; ++c) {
      h.dK[size(j * d + c)] += abs_scale * h.dS[size(j)] * std::fabs(q[c]);
      h.dV[size(j * d + c)] += h.P[size(j)] * std::fabs(dO[c]);
    }
  }
}

// Every query row of (batch, key/value head) `t`, then the max of its key rows' sums.
void head(HeadSums& h, const Problem& p, const xt::xtensor<double, 4>& Q,
          const xt::xtensor<double, 4>& K, const xt::xtensor<double, 4>& V,
          const xt::xtensor<double, 4>& dO, std::int64_t t, bool backward) {
  const std::size_t bs = size(t / p.H_kv), kvs = size(t % p.H_kv);
  const double* K_j = &K(bs, kvs, 0, 0);
  const double* V_j = &V(bs, kvs, 0, 0);
  std::fill(h.dK.begin(), h.dK.end(), 0.0);
  std::fill(h.dV.begin(), h.dV.end(), 0.0);
  const std::int64_t h_kv = t % p.H_kv;
  for (std::int64_t hq = h_kv * p.group_size(); hq < (h_kv + 1) * p.group_size(); ++hq) {
    for (std::int64_t i = 0; i < p.S_q; ++i) {
      const std::int64_t last = std::min(p.last_visible_key(i), p.S_k - 1);
      if (last < 0) continue;  // a fully masked row: its outputs are exact zeros and -inf
      const double* dO_i = backward ? &dO(bs, size(hq), size(i), 0) : nullptr;
      row(h, &Q(bs, size(hq), size(i), 0), K_j, V_j, dO_i, last, p.d, p.scale);
    }
  }
  if (!backward) return;
  for (std::size_t e = 0; e < h.dK.size(); ++e) {
    add(h.max, TensorId::dK, h.dK[e]);
    add(h.max, TensorId::dV, h.dV[e]);
  }
}

}  // namespace

double cancellation_floor(double max_magnitude) {
  return kSumEpsilon * max_magnitude;
}

SumMagnitudes sum_magnitudes(const ProblemData& data, bool backward) {
  const Problem& p = data.problem;
  if (backward && data.dO.empty()) {
    throw InvalidArgument("dO", "the gradients' sum magnitudes need dO, the gradient of the output");
  }
  const xt::xtensor<double, 4> Q = data.q.to_double(), K = data.k.to_double(),
                               V = data.v.to_double();
  const xt::xtensor<double, 4> dO = backward ? data.dO.to_double() : xt::xtensor<double, 4>();

  SumMagnitudes out;
  detail::ParallelErrors errors;  // none may cross the region (parallel_errors.hpp)
  // One task per (batch, kv head), as in the noise floor: it owns its keys' dK and dV sums.
#pragma omp parallel
  {
    std::optional<HeadSums> scratch;
    errors.run([&] { scratch.emplace(p.S_k, p.d); });
#pragma omp for schedule(dynamic)
    for (std::int64_t t = 0; t < p.B * p.H_kv; ++t) {
      errors.run([&] { head(*scratch, p, Q, K, V, dO, t, backward); });
    }
    if (scratch) {
#pragma omp critical(flashref_sum_magnitudes)
      for (std::size_t e = 0; e < out.max_by_tensor.size(); ++e) {
        raise(out.max_by_tensor[e], scratch->max[e]);
      }
      raise(out.max_abs_score, scratch->max_abs_score);
    }
  }
  errors.rethrow();
  return out;
}

}  // namespace flashref::verify

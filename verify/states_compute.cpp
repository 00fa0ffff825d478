// The states of Algorithm 1 on given inputs: the cpu mirror's (baseline) through its trace
// observer, and the gold's, the recurrence of lines 10-13 in double with each state's
// score-rounding noise (states.hpp).
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>

#include "flashref/cpu/backend.hpp"
#include "flashref/cpu/isa.hpp"
#include "flashref/detail/parallel_errors.hpp"
#include "flashref/error.hpp"
#include "flashref/verify/noise_floor.hpp"
#include "flashref/verify/runner.hpp"
#include "flashref/verify/states.hpp"
#include "states_internal.hpp"

namespace flashref::verify {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kNegInf = -std::numeric_limits<double>::infinity();

std::size_t z(std::int64_t n) { return static_cast<std::size_t>(n); }

// Records each forward step of query tiles [i0, i0 + nq) into (a, b, ·) of the arrays.
class StateRecorder : public cpu::TraceObserver {
 public:
  StateRecorder(ForwardStates& out, const StatesShape& shape, std::size_t a, std::size_t bh)
      : out_(out), shape_(shape), a_(a), bh_(bh) {}

  void forward_step(const cpu::ForwardStep& step) override {
    const std::int64_t i = step.tile.i - shape_.i0;
    if (i < 0 || i >= shape_.nq) return;
    const std::size_t j = z(step.tile.j);
    for (std::size_t r = 0; r < step.m_new.size(); ++r) {
      out_.m(a_, bh_, z(i), j, r) = step.m_new[r];
      out_.l(a_, bh_, z(i), j, r) = step.l[r];
      for (std::int64_t c = 0; c < step.O.cols; ++c)
        out_.acc(a_, bh_, z(i), j, r, z(c)) = step.O(static_cast<std::int64_t>(r), c);
    }
  }

 private:
  ForwardStates& out_;
  const StatesShape& shape_;
  std::size_t a_, bh_;
};

// Skipped tiles hold the state of the last visited one; rows past S_q hold NaN.
template <class States>
void carry_over_skipped(States& s, const Problem& p, const StatesShape& shape, std::size_t a,
                        std::size_t bh) {
  for (std::int64_t iq = 0; iq < shape.nq; ++iq) {
    const std::int64_t i = shape.i0 + iq;
    const std::int64_t rows = std::min(shape.B_q, p.S_q - i * shape.B_q);
    for (std::int64_t j = 0; j < shape.T_k; ++j) {
      for (std::int64_t r = 0; r < shape.B_q; ++r) {
        const bool real = r < rows;
        const bool skipped = !visits(p, shape, i, j);
        if (real && !skipped) continue;
        const auto from = [&](auto& arr, auto... rest) -> double {
          if (!real) return kNaN;
          if (j == 0) return 0.0;
          return arr(a, bh, z(iq), z(j - 1), z(r), rest...);
        };
        s.m(a, bh, z(iq), z(j), z(r)) = real && j == 0 ? kNegInf : from(s.m);
        s.l(a, bh, z(iq), z(j), z(r)) = from(s.l);
        for (std::int64_t c = 0; c < shape.d; ++c)
          s.acc(a, bh, z(iq), z(j), z(r), z(c)) = from(s.acc, z(c));
      }
    }
  }
}

ForwardStates make_states(const StatesShape& shape) {
  ForwardStates s;
  s.m = xt::xtensor<double, 5>::from_shape(shape.vector_shape());
  s.l = xt::xtensor<double, 5>::from_shape(shape.vector_shape());
  s.acc = xt::xtensor<double, 6>::from_shape(shape.matrix_shape());
  s.m.fill(kNaN);
  s.l.fill(kNaN);
  s.acc.fill(kNaN);
  return s;
}

}  // namespace

std::vector<std::size_t> StatesShape::vector_shape() const {
  return {z(nb), z(nh), z(nq), z(T_k), z(B_q)};
}
std::vector<std::size_t> StatesShape::matrix_shape() const {
  return {z(nb), z(nh), z(nq), z(T_k), z(B_q), z(d)};
}
std::vector<std::size_t> StatesShape::row_shape() const { return {z(nb), z(nh), z(nq), z(B_q)}; }
std::vector<std::size_t> StatesShape::pair_shape() const {
  return {z(nb), z(nh), z(nq), z(T_k), z(B_q), z(B_k)};
}
std::vector<std::size_t> StatesShape::key_shape() const {
  return {z(nb), z(nh), z(T_k), z(nq), z(B_k), z(d)};
}
double StatesShape::backward_elements() const {
  const auto product = [](const std::vector<std::size_t>& shape) {
    double n = 1.0;
    for (std::size_t x : shape) n *= static_cast<double>(x);
    return n;
  };
  return product(row_shape()) + 3.0 * product(pair_shape()) + product(matrix_shape()) +
         2.0 * product(key_shape());
}
double StatesShape::elements() const {
  return static_cast<double>(nb) * static_cast<double>(nh) * static_cast<double>(nq) *
         static_cast<double>(T_k) * static_cast<double>(B_q) * static_cast<double>(d);
}

StatesShape states_shape(const Problem& p, const StatesGrid& g) {
  if (g.B_q < 1 || g.B_k < 1) {
    throw InvalidArgument("--tile", "the states need the kernel's tiles B_q,B_k, each >= 1, got " +
                                        std::to_string(g.B_q) + "," + std::to_string(g.B_k));
  }
  StatesShape s;
  s.B_q = g.B_q;
  s.B_k = g.B_k;
  s.d = p.d;
  s.T_q = (p.S_q + g.B_q - 1) / g.B_q;
  s.T_k = (p.S_k + g.B_k - 1) / g.B_k;
  const auto pick = [](std::int64_t index, std::int64_t count, const char* what,
                       std::int64_t& first, std::int64_t& n) {
    if (index < -1 || index >= count) {
      throw InvalidArgument("--select", std::string(what) + " " + std::to_string(index) +
                                            " is out of range: there are " +
                                            std::to_string(count));
    }
    first = index < 0 ? 0 : index;
    n = index < 0 ? count : 1;
  };
  if ((g.h >= 0 && g.b < 0) || (g.i >= 0 && g.h < 0)) {
    throw InvalidArgument("--select", "give b,h or b,h,i: a head needs its batch, a query tile "
                                      "its head");
  }
  pick(g.b, p.B, "batch", s.b0, s.nb);
  pick(g.h, p.H, "head", s.h0, s.nh);
  pick(g.i, s.T_q, "query tile", s.i0, s.nq);
  return s;
}

bool visits(const Problem& p, const StatesShape& shape, std::int64_t i, std::int64_t j) {
  const std::int64_t last_row = std::min(p.S_q, (i + 1) * shape.B_q) - 1;
  return p.last_visible_key(last_row) >= j * shape.B_k;
}

ForwardStates baseline_forward_states(const ProblemData& data, const StatesGrid& grid) {
  const Problem& p = data.problem;
  const StatesShape shape = states_shape(p, grid);
  ForwardStates out = make_states(shape);
  const detail::PortableIsa portable;
  RunOptions run;
  run.exec.tile_q = static_cast<int>(grid.B_q);
  run.exec.tile_k = static_cast<int>(grid.B_k);
  for (std::int64_t a = 0; a < shape.nb; ++a)
    for (std::int64_t bh = 0; bh < shape.nh; ++bh) {
      StateRecorder recorder(out, shape, z(a), z(bh));
      const std::unique_ptr<Backend> mirror = cpu::make_backend({.trace = &recorder});
      run_backend(*mirror, detail::head_slice(data, shape.b0 + a, shape.h0 + bh), run);
      carry_over_skipped(out, p, shape, z(a), z(bh));
    }
  return out;
}

namespace detail {

ProblemData head_slice(const ProblemData& data, std::int64_t b, std::int64_t h) {
  const Problem& p = data.problem;
  ProblemData s;
  s.problem = p;
  s.problem.B = 1;
  s.problem.H = 1;
  s.problem.H_kv = 1;
  const std::int64_t h_kv = h / p.group_size();
  const auto copy = [](const HostTensor& from, std::int64_t fb, std::int64_t fh) {
    HostTensor to(from.dtype(), Layout::bhsd, 1, 1, from.S(), from.d());
    for (std::int64_t r = 0; r < from.S(); ++r)
      for (std::int64_t c = 0; c < from.d(); ++c) to.set(0, 0, r, c, from.get(fb, fh, r, c));
    return to;
  };
  s.q = copy(data.q, b, h);
  s.k = copy(data.k, b, h_kv);
  s.v = copy(data.v, b, h_kv);
  if (!data.dO.empty()) s.dO = copy(data.dO, b, h);
  return s;
}

PortableIsa::PortableIsa() : saved_(static_cast<int>(cpu::active_isa())) {
  cpu::select_isa(cpu::Isa::generic);
}
PortableIsa::~PortableIsa() { cpu::select_isa(static_cast<cpu::Isa>(saved_)); }

// Lines 9-13 for query row q in double, over key tiles 0..T_k-1 of B_k keys. `last_key` is
// the last key the row sees (the mask); keys [S_k, keys_end) are padding: score 0, V = 0, seen
// when `last_key` reaches them. `with_noise` also accumulates the noise model (states.hpp).
RowStates gold_row(const ProblemData& data, std::int64_t b, std::int64_t h, std::int64_t q,
                   std::int64_t B_k, std::int64_t last_key, std::int64_t keys_end,
                   bool with_noise) {
  const Problem& p = data.problem;
  const std::int64_t d = p.d, h_kv = h / p.group_size();
  const std::int64_t T_k = (p.S_k + B_k - 1) / B_k;
  RowStates s;
  s.m.assign(z(T_k), kNegInf);
  s.l.assign(z(T_k), 0.0);
  s.acc.assign(z(T_k * d), 0.0);
  if (with_noise) {
    s.sigma_m.assign(z(T_k), 0.0);
    s.sigma_l.assign(z(T_k), 0.0);
    s.sigma_acc.assign(z(T_k * d), 0.0);
    s.sigma_acc_normalized.assign(z(T_k * d), 0.0);
    s.acc_terms.assign(z(T_k * d), 0.0);
  }
  std::vector<double> qv(z(d)), acc(z(d), 0.0), terms(z(d), 0.0), A2(z(d), 0.0), B2(z(d), 0.0), v_star(z(d), 0.0);
  for (std::int64_t c = 0; c < d; ++c) qv[z(c)] = data.q.get(b, h, q, c);
  double m = kNegInf, l = 0.0, Q2 = 0.0, eps_star = 0.0;
  std::vector<double> score, eps;
  for (std::int64_t j = 0; j < T_k; ++j) {
    const std::int64_t k0 = j * B_k, k1 = std::min(keys_end, (j + 1) * B_k);
    const std::int64_t k_last = std::min(k1 - 1, last_key);
    // Line 9: the tile's visible scores (and their float32 rounding size).
    score.clear();
    eps.clear();
    double tile_max = kNegInf;
    std::int64_t argmax = -1;
    for (std::int64_t k = k0; k <= k_last; ++k) {
      double dot = 0.0, mag = 0.0;
      if (k < p.S_k) {
        for (std::int64_t c = 0; c < d; ++c) {
          const double t = qv[z(c)] * static_cast<double>(data.k.get(b, h_kv, k, c));
          dot += t;
          mag += std::fabs(t);
        }
      }
      score.push_back(p.scale * dot);
      eps.push_back(kFloat32UnitRoundoff * std::fabs(p.scale) * mag);
      if (score.back() > tile_max) {
        tile_max = score.back();
        argmax = k;
      }
    }
    // Line 10.
    const double m_new = std::max(m, tile_max);
    if (m_new != kNegInf) {
      // Lines 12-13: rescale by exp(m_old - m_new) (0 from m_old = -inf), add the tile.
      const double alpha = m == kNegInf ? 0.0 : std::exp(m - m_new);
      l *= alpha;
      Q2 *= alpha * alpha;
      for (std::int64_t c = 0; c < d; ++c) {
        acc[z(c)] *= alpha;
        terms[z(c)] *= alpha;
        A2[z(c)] *= alpha * alpha;
        B2[z(c)] *= alpha * alpha;
      }
      for (std::size_t n = 0; n < score.size(); ++n) {
        const std::int64_t k = k0 + static_cast<std::int64_t>(n);
        const double P = std::exp(score[n] - m_new);
        const double e2 = eps[n] * eps[n];
        l += P;
        Q2 += P * P * e2;
        for (std::int64_t c = 0; c < d; ++c) {
          const double v = k < p.S_k ? static_cast<double>(data.v.get(b, h_kv, k, c)) : 0.0;
          acc[z(c)] += P * v;
          terms[z(c)] += P * std::fabs(v);
          A2[z(c)] += P * P * v * v * e2;
          B2[z(c)] += P * P * v * e2;
        }
      }
      if (tile_max > m) {
        eps_star = eps[z(argmax - k0)];
        for (std::int64_t c = 0; c < d; ++c)
          v_star[z(c)] = argmax < p.S_k ? static_cast<double>(data.v.get(b, h_kv, argmax, c)) : 0.0;
      }
      m = m_new;
    }
    s.m[z(j)] = m;
    s.l[z(j)] = l;
    for (std::int64_t c = 0; c < d; ++c) s.acc[z(j * d + c)] = acc[z(c)];
    if (!with_noise || m == kNegInf) continue;
    // The max's own key moves m and, through P~ = exp(S - m), every other term the opposite
    // way; the other keys move only their own term (docs/verification.md, "Judging states").
    const double es2 = eps_star * eps_star;
    s.sigma_m[z(j)] = eps_star;
    s.sigma_l[z(j)] = std::sqrt(std::max(0.0, Q2 - es2 + (l - 1.0) * (l - 1.0) * es2));
    for (std::int64_t c = 0; c < d; ++c) {
      s.acc_terms[z(j * d + c)] = terms[z(c)];
      const double vs = v_star[z(c)], a = acc[z(c)], o = a / l;
      s.sigma_acc[z(j * d + c)] =
          std::sqrt(std::max(0.0, A2[z(c)] - vs * vs * es2 + (a - vs) * (a - vs) * es2));
      s.sigma_acc_normalized[z(j * d + c)] =
          std::sqrt(std::max(0.0, A2[z(c)] - 2.0 * o * B2[z(c)] + o * o * Q2)) / l;
    }
  }
  return s;
}

}  // namespace detail

GoldForwardStates gold_forward_states(const ProblemData& data, const StatesGrid& grid) {
  const Problem& p = data.problem;
  const StatesShape shape = states_shape(p, grid);
  GoldForwardStates g;
  g.value = make_states(shape);
  g.sigma_m = xt::zeros<double>(shape.vector_shape());
  g.sigma_l = xt::zeros<double>(shape.vector_shape());
  g.sigma_acc = xt::zeros<double>(shape.matrix_shape());
  g.sigma_acc_normalized = xt::zeros<double>(shape.matrix_shape());
  g.acc_terms = xt::zeros<double>(shape.matrix_shape());
  // Rows are independent: one task per (batch, head, query tile, row) of the arrays.
  const std::int64_t n_rows = shape.nb * shape.nh * shape.nq * shape.B_q;
  flashref::detail::ParallelErrors errors;
#pragma omp parallel for schedule(dynamic, 16)
  for (std::int64_t n = 0; n < n_rows; ++n) {
    errors.run([&] {
      const std::int64_t r = n % shape.B_q, iq = n / shape.B_q % shape.nq;
      const std::int64_t bh = n / (shape.B_q * shape.nq) % shape.nh;
      const std::int64_t a = n / (shape.B_q * shape.nq * shape.nh);
      const std::int64_t b = shape.b0 + a, h = shape.h0 + bh, i = shape.i0 + iq;
      const std::int64_t q = i * shape.B_q + r;
      if (q >= p.S_q) return;  // rows past S_q stay NaN
      const detail::RowStates row =
          detail::gold_row(data, b, h, q, shape.B_k, p.last_visible_key(q), p.S_k, true);
      for (std::int64_t j = 0; j < shape.T_k; ++j) {
        const auto at = [&](auto& arr) -> double& { return arr(z(a), z(bh), z(iq), z(j), z(r)); };
        at(g.value.m) = row.m[z(j)];
        at(g.value.l) = row.l[z(j)];
        at(g.sigma_m) = row.sigma_m[z(j)];
        at(g.sigma_l) = row.sigma_l[z(j)];
        for (std::int64_t c = 0; c < shape.d; ++c) {
          const std::size_t e = z(j * shape.d + c);
          g.value.acc(z(a), z(bh), z(iq), z(j), z(r), z(c)) = row.acc[e];
          g.sigma_acc(z(a), z(bh), z(iq), z(j), z(r), z(c)) = row.sigma_acc[e];
          g.sigma_acc_normalized(z(a), z(bh), z(iq), z(j), z(r), z(c)) =
              row.sigma_acc_normalized[e];
          g.acc_terms(z(a), z(bh), z(iq), z(j), z(r), z(c)) = row.acc_terms[e];
        }
      }
    });
  }
  errors.rethrow();
  return g;
}

}  // namespace flashref::verify

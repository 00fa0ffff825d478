#include "flashref/verify/noise_floor.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include "flashref/detail/parallel_errors.hpp"
#include "flashref/error.hpp"

namespace flashref::verify {
namespace {

using Shape3 = std::array<std::size_t, 3>;
using Shape4 = std::array<std::size_t, 4>;

std::size_t size(std::int64_t n) {
  return static_cast<std::size_t>(n);
}

// One query row's visible scores, in double: S_j = scale Q_i . K_j, the score's rounding size
// eps_j = u |scale| sum_c |Q_ic K_jc| (with product_sigma r: eps_j^2 += (r scale)^2
// sum_c (Q_ic K_jc)^2, each product's own error), and P_j = exp(S_j - L), L = log sum_j exp(S_j).
struct RowScores {
  std::vector<double> S, eps, P;
  double L = 0.0;

  explicit RowScores(std::int64_t S_k) : S(size(S_k)), eps(size(S_k)), P(size(S_k)) {}

  // Keys 0..last of K (row stride d) against the query row q.
  void compute(const double* q, const double* K, std::int64_t last, std::int64_t d, double scale,
               double product_sigma) {
    double m = -INFINITY;
    for (std::int64_t j = 0; j <= last; ++j) {
      const double* k = K + j * d;
      double dot = 0.0, magnitude = 0.0;
      for (std::int64_t c = 0; c < d; ++c) {
        dot += q[c] * k[c];
        magnitude += std::fabs(q[c] * k[c]);
      }
      S[size(j)] = scale * dot;
      eps[size(j)] = kFloat32UnitRoundoff * std::fabs(scale) * magnitude;
      if (product_sigma > 0.0) {
        double squares = 0.0;
        for (std::int64_t c = 0; c < d; ++c) squares += (q[c] * k[c]) * (q[c] * k[c]);
        eps[size(j)] =
            std::hypot(eps[size(j)], product_sigma * std::fabs(scale) * std::sqrt(squares));
      }
      m = std::max(m, S[size(j)]);
    }
    double l = 0.0;
    for (std::int64_t j = 0; j <= last; ++j) l += std::exp(S[size(j)] - m);
    // A row that sees one key gets L = S_0 and P_0 = exp(0) = 1 exactly, so its O is V_0 and
    // its dS is 0 exactly below: the zero sigmas that such a row must have.
    L = m + std::log(l);
    for (std::int64_t j = 0; j <= last; ++j) P[size(j)] = std::exp(S[size(j)] - L);
  }
};

// The forward of one row: O_i = sum_j P_j V_j into `O`, and the squared sigmas of O_i and L_i.
// A score error delta_j moves L by sum_j P_j delta_j and P_j by P_j (delta_j - dL), so
// dO_c = sum_j P_j delta_j (V_jc - O_c).
//
// `operand` (16-bit inputs, or TF32 products) adds the rounding of P~ as the P~V product's
// operand: each kernel rounds it in its own way (before or after the division by l), so P_j
// moves by an independent error of at most half a step, max(u P_j, h) (h: below the dtype's
// normal range), modelled as uniform (standard deviation half a step / sqrt(3)), and O by
// sum_j P_j theta_j V_jc. A row that sees one key has P_0 = 1, exact in every kernel.
//
// `product_sigma` (3xTF32 products) adds each P~_j V_jc product's own error, of relative size r:
// sum_j (r P_j V_jc)^2.
void forward_row(const RowScores& r, const double* V, std::int64_t last, std::int64_t d, double* O,
                 double* var_O, double* var_L, const OperandRounding& operand,
                 double product_sigma) {
  std::fill(O, O + d, 0.0);
  std::fill(var_O, var_O + d, 0.0);
  double vL = 0.0;
  for (std::int64_t j = 0; j <= last; ++j) {
    const double P = r.P[size(j)];
    for (std::int64_t c = 0; c < d; ++c) O[c] += P * V[j * d + c];
    vL += (P * r.eps[size(j)]) * (P * r.eps[size(j)]);
  }
  for (std::int64_t j = 0; j <= last; ++j) {
    const double w = r.P[size(j)] * r.eps[size(j)];
    const double operand_sd = last > 0 ? operand.half_step(r.P[size(j)]) / std::sqrt(3.0) : 0.0;
    const double product_sd = product_sigma * r.P[size(j)];
    for (std::int64_t c = 0; c < d; ++c) {
      const double t = w * (V[j * d + c] - O[c]);
      const double rounding = operand_sd * V[j * d + c];
      var_O[c] += t * t + rounding * rounding;
      if (product_sd > 0.0) var_O[c] += (product_sd * V[j * d + c]) * (product_sd * V[j * d + c]);
    }
  }
  *var_L = vL;
}

// The variance that dS_ij's rounding as the operand of dQ = dS K and dK = dS^T Q adds to dS_ij,
// before the scale. Kernels round different numbers: the course's Algorithm 2 (and many Triton
// backwards) rounds dS * scale, the baseline, the cpu and FlashAttention-2 round dS and scale the
// finished product, so unless the scale is a power of 2 the two roundings are independent: an
// error uniform within half a step, standard deviation half_step(|dS|) / sqrt(3)
// (docs/verification.md, "The gradients under TF32" and "The P~ operand under cancellation").
double ds_operand_variance(double dS, const OperandRounding& operand) {
  const double sd = operand.half_step(std::fabs(dS)) / std::sqrt(3.0);
  return sd * sd;
}

// The backward of one row, given L and D as inputs (as every recomputation backward is): a
// score error delta_j scales P_j and dS_j = P_j (dP_j - D) by (1 + delta_j), and nothing else
// moves. Adds the row's squared contributions to dQ (this row), dK and dV (the key rows).
// `product_sigma` r adds each product's own error: of dP_j = dO . V_j (r^2 sum_c (dO_c V_jc)^2 to
// dP - D's variance), and of the terms of dV_jc = sum_i P_ij dO_ic, dQ_ic = scale sum_j dS_ij
// K_jc and dK_jc = scale sum_i dS_ij Q_ic ((r P_ij dO_ic)^2, (r dS_ij)^2 with K or Q).
void backward_row(const RowScores& r, const double* O, const double* dO, const double* Q,
                  const double* K, const double* V, std::int64_t last, std::int64_t d, double scale,
                  std::vector<double>& w2, double* var_dQ, double* var_dK, double* var_dV,
                  const OperandRounding& operand, double product_sigma) {
  // D summed in the same order as dP below, so a row that sees one key (O = V_0) gets
  // dP_0 - D = 0 exactly, as in exact arithmetic.
  double D = 0.0, D_terms = 0.0;
  for (std::int64_t c = 0; c < d; ++c) {
    D += dO[c] * O[c];
    D_terms += std::fabs(dO[c] * O[c]);
  }
  for (std::int64_t j = 0; j <= last; ++j) {
    const double* v = V + j * d;
    double dP = 0.0, dP_terms = 0.0;
    for (std::int64_t c = 0; c < d; ++c) {
      dP += dO[c] * v[c];
      dP_terms += std::fabs(dO[c] * v[c]);
    }
    const double P = r.P[size(j)], dS = P * (dP - D);
    // dP - D is a difference of two float32 sums, each rounded by about one unit roundoff at
    // the magnitude of its terms. Not capped by how far apart the terms are: only a kernel
    // that sums D in dP's exact order rounds the two alike (the cpu does; a GPU kernel that
    // takes D from a separate preprocess pass does not), and the floor must cover any correct
    // kernel, not the ones that share our summation order.
    const double eta = kFloat32UnitRoundoff * (dP_terms + D_terms);
    // dS_ij's variance: the score's rounding scales it by (1 + delta_ij); dP - D's adds
    // P_ij * eta_ij, and dP's products their own errors; the products dS_ij K_jc and dS_ij Q_ic
    // err by r dS_ij of each.
    w2[size(j)] = (dS * r.eps[size(j)]) * (dS * r.eps[size(j)]) + (P * eta) * (P * eta);
    w2[size(j)] += ds_operand_variance(dS, operand);
    // Only when asked: 0 times a non-finite input's square would be NaN, where the floor is inf.
    if (product_sigma > 0.0) {
      double dP_squares = 0.0;
      for (std::int64_t c = 0; c < d; ++c) dP_squares += (dO[c] * v[c]) * (dO[c] * v[c]);
      w2[size(j)] += (P * product_sigma) * (P * product_sigma) * dP_squares +
                     (product_sigma * dS) * (product_sigma * dS);
    }
  }
  const double scale2 = scale * scale;
  for (std::int64_t j = 0; j <= last; ++j) {
    const double wS2 = scale2 * w2[size(j)];
    const double wP = r.P[size(j)] * r.eps[size(j)], product = product_sigma * r.P[size(j)];
    const double wP2 = product > 0.0 ? wP * wP + product * product : wP * wP;
    const double* k = K + j * d;
    double* vK = var_dK + j * d;
    double* vV = var_dV + j * d;
    for (std::int64_t c = 0; c < d; ++c) {
      var_dQ[c] += wS2 * k[c] * k[c];
      vK[c] += wS2 * Q[c] * Q[c];
      vV[c] += wP2 * dO[c] * dO[c];
    }
  }
}

double sqrt_in_place_and_max(double* v, std::size_t n) {
  double m = 0.0;
  for (std::size_t e = 0; e < n; ++e) {
    v[e] = std::sqrt(v[e]);
    m = std::max(m, v[e]);
  }
  return m;
}

}  // namespace

OperandRounding product_operand_rounding(DType dtype, bool allow_tf32) {
  // A format with p significant bits (explicit + 1) rounds to nearest with a relative error of
  // at most u = 2^-p in its normal range, and an absolute one of at most half its smallest
  // step, 2^(e_min - p), below it (e_min: the smallest normal exponent).
  switch (dtype) {
    case DType::bf16:
      return {0x1p-8, 0x1p-134};  // 8 bits, e_min = -126 (float32's range)
    case DType::f16:
      return {0x1p-11, 0x1p-25};  // 11 bits, e_min = -14: P~ < 6.1e-5 is subnormal
    case DType::f32:
      if (allow_tf32) return {kTf32UnitRoundoff, 0x1p-137};  // 11 bits, float32's range
      return {};  // float32 P~ is exact as the operand: the product rounds nothing more
  }
  return {};
}

ScoreNoise score_rounding_noise(const ProblemData& data, bool backward,
                                const OperandRounding& operand, double product_sigma) {
  const Problem& p = data.problem;
  if (backward && data.dO.empty()) {
    throw InvalidArgument("dO", "the gradients' noise needs dO, the gradient of the output");
  }
  const xt::xtensor<double, 4> Q = data.q.to_double(), K = data.k.to_double(),
                               V = data.v.to_double();
  const xt::xtensor<double, 4> dO = backward ? data.dO.to_double() : xt::xtensor<double, 4>();

  ScoreNoise n;
  n.has_backward = backward;
  const Shape4 q_shape{size(p.B), size(p.H), size(p.S_q), size(p.d)};
  const Shape4 kv_shape{size(p.B), size(p.H_kv), size(p.S_k), size(p.d)};
  n.O = xt::zeros<double>(q_shape);
  n.L = xt::zeros<double>(Shape3{size(p.B), size(p.H), size(p.S_q)});
  if (backward) {
    n.dQ = xt::zeros<double>(q_shape);
    n.dK = xt::zeros<double>(kv_shape);
    n.dV = xt::zeros<double>(kv_shape);
  }
  const std::int64_t d = p.d;

  detail::ParallelErrors errors;  // none may cross the region (parallel_errors.hpp)
  // One task per (batch, kv head): it owns that head's dK and dV variances and adds its group's
  // query heads into them, without atomics.
#pragma omp parallel
  {
    std::optional<RowScores> row;
    std::vector<double> O, w2;
    errors.run([&] {
      row.emplace(p.S_k);
      O.resize(size(d));
      w2.resize(size(p.S_k));
    });
#pragma omp for schedule(dynamic)
    for (std::int64_t t = 0; t < p.B * p.H_kv; ++t)
      errors.run([&] {
        const std::int64_t b = t / p.H_kv, h_kv = t % p.H_kv;
        const std::size_t bs = size(b), kvs = size(h_kv);
        const double* K_j = &K(bs, kvs, 0, 0);
        const double* V_j = &V(bs, kvs, 0, 0);
        for (std::int64_t h = h_kv * p.group_size(); h < (h_kv + 1) * p.group_size(); ++h) {
          for (std::int64_t i = 0; i < p.S_q; ++i) {
            const std::int64_t last = std::min(p.last_visible_key(i), p.S_k - 1);
            if (last < 0) continue;
            const std::size_t hs = size(h), is = size(i);
            const double* Q_i = &Q(bs, hs, is, 0);
            row->compute(Q_i, K_j, last, d, p.scale, product_sigma);
            forward_row(*row, V_j, last, d, O.data(), &n.O(bs, hs, is, 0), &n.L(bs, hs, is),
                        operand, product_sigma);
            if (backward) {
              backward_row(*row, O.data(), &dO(bs, hs, is, 0), Q_i, K_j, V_j, last, d, p.scale, w2,
                           &n.dQ(bs, hs, is, 0), &n.dK(bs, kvs, 0, 0), &n.dV(bs, kvs, 0, 0),
                           operand, product_sigma);
            }
          }
        }
      });
  }
  errors.rethrow();

  auto finish = [&](TensorId id, double* v, std::size_t count) {
    n.max_by_tensor[static_cast<std::size_t>(id)] = sqrt_in_place_and_max(v, count);
  };
  finish(TensorId::O, n.O.data(), n.O.size());
  finish(TensorId::L, n.L.data(), n.L.size());
  if (backward) {
    finish(TensorId::dQ, n.dQ.data(), n.dQ.size());
    finish(TensorId::dK, n.dK.data(), n.dK.size());
    finish(TensorId::dV, n.dV.data(), n.dV.size());
  }
  return n;
}

}  // namespace flashref::verify

// The states of Algorithm 2 on given inputs (states.hpp, "Backward states"): the cpu mirror's
// two passes through its trace observer (the baseline), and the gold's, the same quantities in
// double from the exact O and L, with each element's floor (docs/verification.md, "Judging
// states", "The backward's floors").
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>

#include "flashref/cpu/backend.hpp"
#include "flashref/detail/parallel_errors.hpp"
#include "flashref/error.hpp"
#include "flashref/verify/noise_floor.hpp"
#include "flashref/verify/rule.hpp"
#include "flashref/verify/runner.hpp"
#include "flashref/verify/states.hpp"
#include "states_internal.hpp"

namespace flashref::verify {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kNegInf = -std::numeric_limits<double>::infinity();
constexpr double u = kFloat32UnitRoundoff;

std::size_t z(std::int64_t n) { return static_cast<std::size_t>(n); }

BackwardStates make_states(const StatesShape& s, double fill) {
  BackwardStates b;
  b.D = xt::xtensor<double, 4>::from_shape(s.row_shape());
  for (auto* m : {&b.P, &b.dP, &b.dS}) *m = xt::xtensor<double, 6>::from_shape(s.pair_shape());
  b.dQ = xt::xtensor<double, 6>::from_shape(s.matrix_shape());
  b.dV = xt::xtensor<double, 6>::from_shape(s.key_shape());
  b.dK = xt::xtensor<double, 6>::from_shape(s.key_shape());
  b.D.fill(fill);
  for (auto* m : {&b.P, &b.dP, &b.dS, &b.dQ, &b.dV, &b.dK}) m->fill(fill);
  return b;
}

void require_dO(const ProblemData& data) {
  if (data.dO.empty()) {
    throw InvalidArgument("states", "the backward's states need dO, the gradient of O: give --do");
  }
}

// Records the steps of the mirror's two passes for query tiles [i0, i0 + nq) of one head.
class BackwardRecorder : public cpu::TraceObserver {
 public:
  BackwardRecorder(BackwardStates& out, const StatesShape& shape, std::size_t a, std::size_t bh)
      : out_(out), s_(shape), a_(a), bh_(bh) {}

  void backward_D(std::int64_t, std::int64_t, cpu::TraceVector D) override {
    for (std::int64_t iq = 0; iq < s_.nq; ++iq)
      for (std::int64_t r = 0; r < s_.B_q; ++r) {
        const std::int64_t q = (s_.i0 + iq) * s_.B_q + r;
        if (q < static_cast<std::int64_t>(D.size())) out_.D(a_, bh_, z(iq), z(r)) = D[z(q)];
      }
  }

  void dq_step(const cpu::DqStep& step) override {
    const std::int64_t iq = step.tile.i - s_.i0;
    if (iq < 0 || iq >= s_.nq) return;
    const std::size_t j = z(step.tile.j);
    for (std::int64_t r = 0; r < step.P.rows; ++r) {
      for (std::int64_t c = 0; c < step.P.cols; ++c) {
        out_.P(a_, bh_, z(iq), j, z(r), z(c)) = step.P(r, c);
        out_.dP(a_, bh_, z(iq), j, z(r), z(c)) = step.dP(r, c);
        out_.dS(a_, bh_, z(iq), j, z(r), z(c)) = step.dS(r, c);
      }
      for (std::int64_t c = 0; c < step.dQ.cols; ++c)
        out_.dQ(a_, bh_, z(iq), j, z(r), z(c)) = step.dQ(r, c);
    }
  }

  void dkdv_step(const cpu::DkDvStep& step) override {
    const std::int64_t iq = step.tile.i - s_.i0;
    if (iq < 0 || iq >= s_.nq) return;
    const std::size_t j = z(step.tile.j);
    for (std::int64_t r = 0; r < step.dV.rows; ++r)
      for (std::int64_t c = 0; c < step.dV.cols; ++c) {
        out_.dV(a_, bh_, j, z(iq), z(r), z(c)) = step.dV(r, c);
        out_.dK(a_, bh_, j, z(iq), z(r), z(c)) = step.dK(r, c);
      }
  }

 private:
  BackwardStates& out_;
  const StatesShape& s_;
  std::size_t a_, bh_;
};

// What the mirror leaves unwritten in tile pairs a causal kernel skips: P = dS = 0 (every entry
// masked), dQ_i its last visited state, dK_j and dV_j their state after the previous query tile
// (0 before the first that sees key tile j). dP and the rows/keys past S_q/S_k stay NaN.
void fill_skipped(BackwardStates& s, const Problem& p, const StatesShape& shape, std::size_t a,
                  std::size_t bh) {
  for (std::int64_t iq = 0; iq < shape.nq; ++iq) {
    const std::int64_t i = shape.i0 + iq;
    const std::int64_t rows = std::min(shape.B_q, p.S_q - i * shape.B_q);
    for (std::int64_t j = 0; j < shape.T_k; ++j) {
      if (visits(p, shape, i, j)) continue;
      const std::int64_t cols = std::min(shape.B_k, p.S_k - j * shape.B_k);
      for (std::int64_t r = 0; r < rows; ++r) {
        for (std::int64_t c = 0; c < cols; ++c) {
          s.P(a, bh, z(iq), z(j), z(r), z(c)) = 0.0;
          s.dS(a, bh, z(iq), z(j), z(r), z(c)) = 0.0;
        }
        for (std::int64_t c = 0; c < shape.d; ++c)
          s.dQ(a, bh, z(iq), z(j), z(r), z(c)) =
              j == 0 ? 0.0 : s.dQ(a, bh, z(iq), z(j - 1), z(r), z(c));
      }
      for (std::int64_t r = 0; r < cols; ++r)
        for (std::int64_t c = 0; c < shape.d; ++c) {
          const bool carry = iq > 0;
          s.dV(a, bh, z(j), z(iq), z(r), z(c)) =
              carry ? s.dV(a, bh, z(j), z(iq - 1), z(r), z(c)) : 0.0;
          s.dK(a, bh, z(j), z(iq), z(r), z(c)) =
              carry ? s.dK(a, bh, z(j), z(iq - 1), z(r), z(c)) : 0.0;
        }
    }
  }
}

// One head's quantities per query row and key, in double (the gold's), for rows [0, rows).
struct HeadGold {
  std::int64_t rows = 0, keys = 0;
  // Per row: L (forward, over every visible key), its score-rounding sigma, D, D's rounding
  // floor (O rounded to the dtype, and O's float32 sum at the size of its terms) and sigma.
  std::vector<double> L, sigma_L, D, floor_D, sigma_D, M_D;
  // Per (row, key), row-major: visible, |S|, eps (the score's float32 rounding size), P, dP,
  // M_dP = sum_c |dO_c V_kc|, dS.
  std::vector<char> visible;
  std::vector<double> S_abs, eps, P, dP, M_dP, dS;
  std::size_t at(std::int64_t q, std::int64_t k) const { return z(q * keys + k); }
};

HeadGold head_gold(const ProblemData& data, std::int64_t b, std::int64_t h, std::int64_t rows) {
  const Problem& p = data.problem;
  const std::int64_t d = p.d, h_kv = h / p.group_size(), S_k = p.S_k;
  HeadGold g;
  g.rows = rows;
  g.keys = S_k;
  for (auto* v : {&g.L, &g.sigma_L, &g.D, &g.floor_D, &g.sigma_D, &g.M_D}) v->assign(z(rows), 0.0);
  g.visible.assign(z(rows * S_k), 0);
  for (auto* v : {&g.S_abs, &g.eps, &g.P, &g.dP, &g.M_dP, &g.dS}) v->assign(z(rows * S_k), 0.0);
  flashref::detail::ParallelErrors errors;
#pragma omp parallel for schedule(dynamic, 8)
  for (std::int64_t q = 0; q < rows; ++q) {
    errors.run([&] {
      std::vector<double> qv(z(d)), dO(z(d)), O(z(d), 0.0), M_O(z(d), 0.0);
      for (std::int64_t c = 0; c < d; ++c) {
        qv[z(c)] = data.q.get(b, h, q, c);
        dO[z(c)] = data.dO.get(b, h, q, c);
      }
      const std::int64_t last = std::min(S_k - 1, p.last_visible_key(q));
      // The scores and their rounding size (noise_floor.hpp's eps).
      double m = kNegInf;
      for (std::int64_t k = 0; k <= last; ++k) {
        double dot = 0.0, mag = 0.0;
        for (std::int64_t c = 0; c < d; ++c) {
          const double t = qv[z(c)] * static_cast<double>(data.k.get(b, h_kv, k, c));
          dot += t;
          mag += std::fabs(t);
        }
        const std::size_t e = g.at(q, k);
        g.visible[e] = 1;
        g.P[e] = p.scale * dot;  // S for now
        g.S_abs[e] = std::fabs(g.P[e]);
        g.eps[e] = u * std::fabs(p.scale) * mag;
        m = std::max(m, g.P[e]);
      }
      // The forward: L = m + log l, P = exp(S - L), O = P V.
      double l = 0.0;
      for (std::int64_t k = 0; k <= last; ++k) l += std::exp(g.P[g.at(q, k)] - m);
      const double L = last >= 0 ? m + std::log(l) : kNegInf;
      g.L[z(q)] = L;
      double var_L = 0.0;
      for (std::int64_t k = 0; k <= last; ++k) {
        const std::size_t e = g.at(q, k);
        g.P[e] = std::exp(g.P[e] - L);
        var_L += g.P[e] * g.P[e] * g.eps[e] * g.eps[e];
        for (std::int64_t c = 0; c < d; ++c) {
          const double v = data.v.get(b, h_kv, k, c);
          O[z(c)] += g.P[e] * v;
          M_O[z(c)] += g.P[e] * std::fabs(v);
        }
      }
      g.sigma_L[z(q)] = std::sqrt(var_L);
      // Line 2: D = rowsum(dO * O). The kernel's O is rounded to the dtype (D reads the stored
      // O) and was summed in float32 at the size of its terms, M_O.
      double D = 0.0, M_D = 0.0, M_DO = 0.0;
      for (std::int64_t c = 0; c < d; ++c) {
        D += dO[z(c)] * O[z(c)];
        M_D += std::fabs(dO[z(c)] * O[z(c)]);
        M_DO += std::fabs(dO[z(c)]) * M_O[z(c)];
      }
      g.D[z(q)] = D;
      g.M_D[z(q)] = M_D;
      g.floor_D[z(q)] = rule_floor(p.dtype, M_D) + rule_floor(DType::f32, M_DO);
      // Lines 14-15 for every key of the row (dP also where masked: a kernel computes it).
      double var_D = 0.0;
      for (std::int64_t k = 0; k < S_k; ++k) {
        const std::size_t e = g.at(q, k);
        double dP = 0.0, M_dP = 0.0;
        for (std::int64_t c = 0; c < d; ++c) {
          const double t = dO[z(c)] * static_cast<double>(data.v.get(b, h_kv, k, c));
          dP += t;
          M_dP += std::fabs(t);
        }
        g.dP[e] = dP;
        g.M_dP[e] = M_dP;
        if (!g.visible[e]) continue;
        g.dS[e] = g.P[e] * (dP - D);
        var_D += g.dS[e] * g.eps[e] * g.dS[e] * g.eps[e];
      }
      // The forward's score rounding moves O by sum_k P_k delta_k (V_k - O), so D by
      // sum_k P_k delta_k (dP_k - D) = sum_k dS_k delta_k.
      g.sigma_D[z(q)] = std::sqrt(var_D);
    });
  }
  errors.rethrow();
  return g;
}

// The relative rounding of P = exp(S - L) in float32: the exp (1) and the argument's two
// operands (|S| + |L|). 0 where L = -inf (P = 0 exactly).
double p_relative(const HeadGold& g, std::int64_t q, std::size_t e) {
  const double L = g.L[z(q)];
  return std::isfinite(L) ? 1.0 + g.S_abs[e] + std::fabs(L) : 0.0;
}

}  // namespace

BackwardStates baseline_backward_states(const ProblemData& data, const StatesGrid& grid) {
  require_dO(data);
  const Problem& p = data.problem;
  const StatesShape shape = states_shape(p, grid);
  BackwardStates out = make_states(shape, kNaN);
  const detail::PortableIsa portable;
  RunOptions run;
  run.exec.tile_q = static_cast<int>(grid.B_q);
  run.exec.tile_k = static_cast<int>(grid.B_k);
  run.backward = true;
  for (std::int64_t a = 0; a < shape.nb; ++a)
    for (std::int64_t bh = 0; bh < shape.nh; ++bh) {
      BackwardRecorder recorder(out, shape, z(a), z(bh));
      const std::unique_ptr<Backend> mirror = cpu::make_backend({.trace = &recorder});
      run_backend(*mirror, detail::head_slice(data, shape.b0 + a, shape.h0 + bh), run);
      fill_skipped(out, p, shape, z(a), z(bh));
    }
  return out;
}

GoldBackwardStates gold_backward_states(const ProblemData& data, const StatesGrid& grid) {
  require_dO(data);
  const Problem& p = data.problem;
  const StatesShape s = states_shape(p, grid);
  GoldBackwardStates G;
  G.value = make_states(s, kNaN);
  G.rounding = make_states(s, 0.0);
  G.sigma = make_states(s, 0.0);
  G.rounding_scaled = make_states(s, 0.0);
  const DType dt = p.dtype;
  const double f = std::fabs(p.scale);
  // dK_j and dV_j after query tile i sum rows 0.. of every tile up to i.
  const std::int64_t rows = std::min(p.S_q, (s.i0 + s.nq) * s.B_q);
  for (std::int64_t a = 0; a < s.nb; ++a)
    for (std::int64_t bh = 0; bh < s.nh; ++bh) {
      const std::int64_t b = s.b0 + a, h = s.h0 + bh, h_kv = h / p.group_size();
      const HeadGold g = head_gold(data, b, h, rows);
      const auto eta = [&](std::int64_t q, std::size_t e) {
        return u * (g.M_dP[e] + g.M_D[z(q)]);  // dP - D: two float32 sums (verification.md)
      };
      // D, P, dP, dS and the dQ_i accumulator: per query row of the selected tiles.
      for (std::int64_t iq = 0; iq < s.nq; ++iq)
        for (std::int64_t r = 0; r < s.B_q; ++r) {
          const std::int64_t q = (s.i0 + iq) * s.B_q + r;
          if (q >= p.S_q) continue;
          const std::size_t A = z(a), H = z(bh), I = z(iq), R = z(r);
          G.value.D(A, H, I, R) = g.D[z(q)];
          G.rounding.D(A, H, I, R) = g.floor_D[z(q)];
          G.sigma.D(A, H, I, R) = g.sigma_D[z(q)];
          const double sL = g.sigma_L[z(q)], sD = g.sigma_D[z(q)], fD = g.floor_D[z(q)];
          std::vector<double> val(z(s.d), 0.0), steps(z(s.d), 0.0), M2(z(s.d), 0.0),
              steps_scaled(z(s.d), 0.0),
              Gk(z(s.d), 0.0), RS(z(s.d), 0.0);
          for (std::int64_t j = 0; j < s.T_k; ++j) {
            const std::size_t J = z(j);
            for (std::int64_t cc = 0; cc < s.B_k && j * s.B_k + cc < p.S_k; ++cc) {
              const std::int64_t k = j * s.B_k + cc;
              const std::size_t e = g.at(q, k), C = z(cc);
              const double P = g.P[e], dS = g.dS[e], rel = p_relative(g, q, e);
              G.value.P(A, H, I, J, R, C) = P;
              G.rounding.P(A, H, I, J, R, C) = rule_floor(DType::f32, P * rel);
              G.sigma.P(A, H, I, J, R, C) = P * std::hypot(g.eps[e], sL);
              G.value.dP(A, H, I, J, R, C) = g.dP[e];
              G.rounding.dP(A, H, I, J, R, C) = rule_floor(DType::f32, g.M_dP[e]);
              G.value.dS(A, H, I, J, R, C) = dS;
              G.rounding.dS(A, H, I, J, R, C) =
                  rule_floor(DType::f32, P * (g.M_dP[e] + g.M_D[z(q)] +
                                              std::fabs(g.dP[e] - g.D[z(q)]) * rel)) +
                  P * fD;
              // Scaled, the product by the scale rounds once more, at the scaled size.
              G.rounding_scaled.dS(A, H, I, J, R, C) =
                  f * G.rounding.dS(A, H, I, J, R, C) + rule_floor(DType::f32, f * dS);
              G.sigma.dS(A, H, I, J, R, C) =
                  std::sqrt(dS * dS * (g.eps[e] * g.eps[e] + sL * sL) + P * sD * P * sD);
              if (!g.visible[e]) continue;
              const double et = eta(q, e);
              for (std::int64_t c = 0; c < s.d; ++c) {
                const double K = data.k.get(b, h_kv, k, c);
                val[z(c)] += dS * K;
                steps[z(c)] += rounding_step(dt, dS) * std::fabs(K);
                // Scaled: dS * scale rounded to the dtype, or dS rounded then scaled.
                steps_scaled[z(c)] +=
                    (rounding_step(dt, f * dS) + f * rounding_step(dt, dS)) * std::fabs(K);
                M2[z(c)] += std::fabs(dS * K) * rel;
                Gk[z(c)] += P * K;
                RS[z(c)] += K * K * (dS * g.eps[e] * dS * g.eps[e] + P * et * P * et);
              }
            }
            for (std::int64_t c = 0; c < s.d; ++c) {
              const std::size_t Cd = z(c);
              G.value.dQ(A, H, I, J, R, Cd) = val[Cd];
              // The operands dS rounded to the dtype (a step each, subnormal ones included),
              // the float32 sum at its terms' size, D's rounding through every P_k K_k; and the
              // scores' noise through dS, L and D.
              G.rounding.dQ(A, H, I, J, R, Cd) =
                  2.0 * steps[Cd] + rule_floor(DType::f32, M2[Cd]) + fD * std::fabs(Gk[Cd]);
              G.rounding_scaled.dQ(A, H, I, J, R, Cd) =
                  2.0 * steps_scaled[Cd] + f * rule_floor(DType::f32, M2[Cd]) +
                  rule_floor(DType::f32, f * M2[Cd]) + f * fD * std::fabs(Gk[Cd]);
              G.sigma.dQ(A, H, I, J, R, Cd) = std::sqrt(RS[Cd] + sL * val[Cd] * sL * val[Cd] +
                                                        sD * Gk[Cd] * sD * Gk[Cd]);
            }
          }
        }
      // The dK_j, dV_j accumulators of this query head: per key, over query tiles in order.
      for (std::int64_t j = 0; j < s.T_k; ++j)
        for (std::int64_t kr = 0; kr < s.B_k && j * s.B_k + kr < p.S_k; ++kr) {
          const std::int64_t k = j * s.B_k + kr;
          const std::size_t A = z(a), H = z(bh), J = z(j), R = z(kr);
          for (std::int64_t c = 0; c < s.d; ++c) {
            double vV = 0.0, stepsV = 0.0, MV2 = 0.0, RV = 0.0;
            double vK = 0.0, stepsK = 0.0, MK2 = 0.0, FK = 0.0, RK = 0.0, stepsK_scaled = 0.0;
            for (std::int64_t i = 0; i < s.i0 + s.nq; ++i) {
              for (std::int64_t q = i * s.B_q; q < std::min(p.S_q, (i + 1) * s.B_q); ++q) {
                const std::size_t e = g.at(q, k);
                if (!g.visible[e]) continue;
                const double P = g.P[e], dS = g.dS[e], rel = p_relative(g, q, e);
                const double dO = data.dO.get(b, h, q, c), Q = data.q.get(b, h, q, c);
                const double e2 = g.eps[e] * g.eps[e], sL2 = g.sigma_L[z(q)] * g.sigma_L[z(q)];
                const double et = eta(q, e), sD = g.sigma_D[z(q)];
                vV += P * dO;
                stepsV += rounding_step(dt, P) * std::fabs(dO);
                MV2 += P * std::fabs(dO) * rel;
                RV += P * dO * P * dO * (e2 + sL2);
                vK += dS * Q;
                stepsK += rounding_step(dt, dS) * std::fabs(Q);
                stepsK_scaled +=
                    (rounding_step(dt, f * dS) + f * rounding_step(dt, dS)) * std::fabs(Q);
                MK2 += std::fabs(dS * Q) * rel;
                FK += P * g.floor_D[z(q)] * std::fabs(Q);
                RK += Q * Q * (dS * dS * (e2 + sL2) + P * et * P * et + P * sD * P * sD);
              }
              if (i < s.i0) continue;
              const std::size_t I = z(i - s.i0), Cd = z(c);
              G.value.dV(A, H, J, I, R, Cd) = vV;
              G.rounding.dV(A, H, J, I, R, Cd) = 2.0 * stepsV + rule_floor(DType::f32, MV2);
              G.sigma.dV(A, H, J, I, R, Cd) = std::sqrt(RV);
              G.value.dK(A, H, J, I, R, Cd) = vK;
              G.rounding.dK(A, H, J, I, R, Cd) =
                  2.0 * stepsK + rule_floor(DType::f32, MK2) + FK;
              G.rounding_scaled.dK(A, H, J, I, R, Cd) = 2.0 * stepsK_scaled +
                                                        f * rule_floor(DType::f32, MK2) +
                                                        rule_floor(DType::f32, f * MK2) + f * FK;
              G.sigma.dK(A, H, J, I, R, Cd) = std::sqrt(RK);
            }
          }
        }
    }
  // The quantities that hold no scale round alike in every convention.
  G.rounding_scaled.D = G.rounding.D;
  G.rounding_scaled.P = G.rounding.P;
  G.rounding_scaled.dP = G.rounding.dP;
  G.rounding_scaled.dV = G.rounding.dV;
  return G;
}

}  // namespace flashref::verify

// The rounding sigmas of noise_floor.hpp against an independent Monte Carlo estimate:
// attention recomputed in double with every visible score moved by +-eps_ij and every
// dP_ij - D_i by +-eta_ij (random signs), many times, and the empirical standard deviation of
// every element of O, L, dQ, dK and dV. The forward renormalizes (L and O follow the moved
// scores); the backward, as every recomputation backward does, takes L and D as inputs and
// only recomputes the scores.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "flashref/error.hpp"
#include "flashref/verify/noise_floor.hpp"

namespace flashref::verify {
namespace {

using X4 = xt::xtensor<double, 4>;
using X3 = xt::xtensor<double, 3>;

struct Outputs {
  X4 O, dQ, dK, dV;
  X3 L;
};

// Plain attention in double on the given inputs. `delta` (B, H, S_q, S_k) is added to the
// visible scores. The backward uses P = exp(S + delta - L_in) and D_in, the unmoved L and D.
class Attention {
 public:
  explicit Attention(const ProblemData& data)
      : p_(data.problem),
        Q_(data.q.to_double()),
        K_(data.k.to_double()),
        V_(data.v.to_double()),
        dO_(data.dO.to_double()) {
    const X4 none = xt::zeros<double>(delta_shape());
    const Outputs exact = forward(none);
    L_in_ = exact.L;
    O_ = exact.O;
    D_in_ = xt::zeros<double>(exact.L.shape());
    for (std::size_t b = 0; b < n(p_.B); ++b)
      for (std::size_t h = 0; h < n(p_.H); ++h)
        for (std::size_t i = 0; i < n(p_.S_q); ++i)
          // Summed like dP below: exactly 0 = dP - D for a row that sees one key.
          for (std::size_t c = 0; c < n(p_.d); ++c)
            D_in_(b, h, i) += dO_(b, h, i, c) * exact.O(b, h, i, c);
  }

  std::array<std::size_t, 4> delta_shape() const {
    return {n(p_.B), n(p_.H), n(p_.S_q), n(p_.S_k)};
  }
  bool visible(std::int64_t i, std::int64_t j) const { return j <= p_.last_visible_key(i); }
  double score(std::size_t b, std::size_t h, std::size_t i, std::size_t j) const {
    double s = 0.0;
    for (std::size_t c = 0; c < n(p_.d); ++c) s += Q_(b, h, i, c) * K_(b, kv(h), j, c);
    return p_.scale * s;
  }
  // The rounding size of dP_ij - D_i: one unit roundoff at the magnitude of each float32 sum.
  double eta(std::size_t b, std::size_t h, std::size_t i, std::size_t j) const {
    double dP_terms = 0.0, D_terms = 0.0;
    for (std::size_t c = 0; c < n(p_.d); ++c) {
      dP_terms += std::fabs(dO_(b, h, i, c) * V_(b, kv(h), j, c));
      D_terms += std::fabs(dO_(b, h, i, c) * O_(b, h, i, c));
    }
    return 0x1p-24 * (dP_terms + D_terms);
  }
  // The rounding size of a float32 score: one unit roundoff at the magnitude of its terms.
  double eps(std::size_t b, std::size_t h, std::size_t i, std::size_t j) const {
    double a = 0.0;
    for (std::size_t c = 0; c < n(p_.d); ++c) a += std::fabs(Q_(b, h, i, c) * K_(b, kv(h), j, c));
    return 0x1p-24 * std::fabs(p_.scale) * a;
  }

  Outputs forward(const X4& delta) const {
    Outputs out;
    out.O = xt::zeros<double>(Q_.shape());
    out.L = xt::zeros<double>(std::array<std::size_t, 3>{n(p_.B), n(p_.H), n(p_.S_q)});
    out.dQ = xt::zeros<double>(Q_.shape());
    out.dK = xt::zeros<double>(K_.shape());
    out.dV = xt::zeros<double>(K_.shape());
    std::vector<double> s(n(p_.S_k));
    for (std::size_t b = 0; b < n(p_.B); ++b)
      for (std::size_t h = 0; h < n(p_.H); ++h)
        for (std::size_t i = 0; i < n(p_.S_q); ++i) {
          double m = -INFINITY;
          for (std::size_t j = 0; j < n(p_.S_k); ++j) {
            if (!visible(i, j)) continue;
            s[j] = score(b, h, i, j) + delta(b, h, i, j);
            m = std::max(m, s[j]);
          }
          if (m == -INFINITY) {
            out.L(b, h, i) = -INFINITY;
            continue;
          }
          double l = 0.0;
          for (std::size_t j = 0; j < n(p_.S_k); ++j)
            if (visible(i, j)) l += std::exp(s[j] - m);
          out.L(b, h, i) = m + std::log(l);
          for (std::size_t j = 0; j < n(p_.S_k); ++j) {
            if (!visible(i, j)) continue;
            const double P = std::exp(s[j] - m) / l;
            for (std::size_t c = 0; c < n(p_.d); ++c) out.O(b, h, i, c) += P * V_(b, kv(h), j, c);
          }
        }
    return out;
  }

  // Recomputation backward with the unmoved L and D: the scores move by delta, dP - D by gamma.
  void backward(const X4& delta, const X4& gamma, Outputs& out) const {
    for (std::size_t b = 0; b < n(p_.B); ++b)
      for (std::size_t h = 0; h < n(p_.H); ++h)
        for (std::size_t i = 0; i < n(p_.S_q); ++i)
          for (std::size_t j = 0; j < n(p_.S_k); ++j) {
            if (!visible(i, j)) continue;
            const double P = std::exp(score(b, h, i, j) + delta(b, h, i, j) - L_in_(b, h, i));
            double dP = 0.0;
            for (std::size_t c = 0; c < n(p_.d); ++c) dP += dO_(b, h, i, c) * V_(b, kv(h), j, c);
            const double dS = P * (dP - D_in_(b, h, i) + gamma(b, h, i, j));
            for (std::size_t c = 0; c < n(p_.d); ++c) {
              out.dV(b, kv(h), j, c) += P * dO_(b, h, i, c);
              out.dQ(b, h, i, c) += p_.scale * dS * K_(b, kv(h), j, c);
              out.dK(b, kv(h), j, c) += p_.scale * dS * Q_(b, h, i, c);
            }
          }
  }

  Outputs run(const X4& delta, const X4& gamma) const {
    Outputs out = forward(delta);
    backward(delta, gamma, out);
    return out;
  }

 private:
  static std::size_t n(std::int64_t x) { return static_cast<std::size_t>(x); }
  std::size_t kv(std::size_t h) const { return h / n(p_.group_size()); }

  Problem p_;
  X4 Q_, K_, V_, dO_, O_;
  X3 L_in_, D_in_;
};

// Empirical standard deviation of each output element over `samples` random-sign moves.
Outputs monte_carlo_sigma(const ProblemData& data, int samples, std::uint64_t seed) {
  const Attention attention(data);
  const X4 none = xt::zeros<double>(attention.delta_shape());
  const Outputs exact = attention.run(none, none);
  X4 eps = none, eta = none;
  for (std::size_t b = 0; b < eps.shape(0); ++b)
    for (std::size_t h = 0; h < eps.shape(1); ++h)
      for (std::size_t i = 0; i < eps.shape(2); ++i)
        for (std::size_t j = 0; j < eps.shape(3); ++j)
          if (attention.visible(static_cast<std::int64_t>(i), static_cast<std::int64_t>(j))) {
            eps(b, h, i, j) = attention.eps(b, h, i, j);
            eta(b, h, i, j) = attention.eta(b, h, i, j);
          }

  Outputs var;
  var.O = xt::zeros<double>(exact.O.shape());
  var.L = xt::zeros<double>(exact.L.shape());
  var.dQ = xt::zeros<double>(exact.dQ.shape());
  var.dK = xt::zeros<double>(exact.dK.shape());
  var.dV = xt::zeros<double>(exact.dV.shape());
  std::mt19937_64 rng(seed);
  X4 delta = none, gamma = none;
  auto add = [](auto& acc, const auto& moved, const auto& base) {
    for (std::size_t e = 0; e < base.size(); ++e) {
      // -inf - -inf (a row that sees no key) is no change.
      const double diff = moved.flat(e) == base.flat(e) ? 0.0 : moved.flat(e) - base.flat(e);
      acc.flat(e) += diff * diff;
    }
  };
  for (int r = 0; r < samples; ++r) {
    for (std::size_t e = 0; e < delta.size(); ++e) {
      delta.flat(e) = (rng() & 1u) ? eps.flat(e) : -eps.flat(e);
      gamma.flat(e) = (rng() & 1u) ? eta.flat(e) : -eta.flat(e);
    }
    const Outputs moved = attention.run(delta, gamma);
    add(var.O, moved.O, exact.O);
    add(var.L, moved.L, exact.L);
    add(var.dQ, moved.dQ, exact.dQ);
    add(var.dK, moved.dK, exact.dK);
    add(var.dV, moved.dV, exact.dV);
  }
  for (auto* t : {&var.O, &var.dQ, &var.dK, &var.dV}) *t = xt::sqrt(*t / samples);
  var.L = xt::sqrt(var.L / samples);
  return var;
}

// Compares every element. Where sigma is 0 the moved scores must never change the element at
// all. Where sigma is at least 1e-6 of the tensor's largest (the rule uses only the largest),
// the empirical value must be within [0.9, 1.1] of it: with 2000 random-sign samples the
// estimate's relative error is below 2% (1 standard deviation). Smaller sigmas can sit below
// double precision's own cancellation noise (a near one-hot row's dP - D) and are skipped.
template <typename T>
int expect_matches(const char* name, const T& sigma, const T& empirical) {
  EXPECT_EQ(sigma.shape(), empirical.shape()) << name;
  const double largest = xt::amax(sigma)();
  int compared = 0;
  for (std::size_t e = 0; e < sigma.size(); ++e) {
    const double s = sigma.flat(e), m = empirical.flat(e);
    if (s == 0.0) {
      EXPECT_EQ(m, 0.0) << name << " element " << e << ": sigma is 0 but the element moves";
      continue;
    }
    if (s < 1e-6 * largest) continue;
    EXPECT_GE(m / s, 0.9) << name << " element " << e << ": sigma " << s << ", empirical " << m;
    EXPECT_LE(m / s, 1.1) << name << " element " << e << ": sigma " << s << ", empirical " << m;
    ++compared;
  }
  return compared;
}

void check_against_monte_carlo(const Problem& p, bool large, std::uint64_t seed) {
  InputOptions in;
  in.seed = seed;
  in.large = large;
  const ProblemData data = make_problem_data(p, in);
  const ScoreNoise noise = score_rounding_noise(data, /*backward=*/true);
  const Outputs empirical = monte_carlo_sigma(data, 2000, seed + 1);
  const int compared =
      expect_matches("O", noise.O, empirical.O) + expect_matches("L", noise.L, empirical.L) +
      expect_matches("dQ", noise.dQ, empirical.dQ) + expect_matches("dK", noise.dK, empirical.dK) +
      expect_matches("dV", noise.dV, empirical.dV);
  // Most elements are compared, not skipped: more than half with normal inputs, where every
  // row spreads its weight; a quarter with large ones, whose near one-hot rows have sigmas
  // many orders below the largest.
  const std::size_t total =
      noise.O.size() + noise.L.size() + noise.dQ.size() + noise.dK.size() + noise.dV.size();
  EXPECT_GT(compared, static_cast<int>(total / (large ? 4 : 2))) << describe(p);

  EXPECT_EQ(noise.max_sigma(TensorId::O), xt::amax(noise.O)());
  EXPECT_EQ(noise.max_sigma(TensorId::L), xt::amax(noise.L)());
  EXPECT_EQ(noise.max_sigma(TensorId::dQ), xt::amax(noise.dQ)());
  EXPECT_EQ(noise.max_sigma(TensorId::dK), xt::amax(noise.dK)());
  EXPECT_EQ(noise.max_sigma(TensorId::dV), xt::amax(noise.dV)());
}

TEST(ScoreNoise, MatchesMonteCarloWithFullyMaskedAndSingleKeyRowsAndMqa) {
  // Bottom-right causal with S_q = S_k + 1: query row 0 sees no key, row 1 sees one.
  check_against_monte_carlo(make_problem(1, 2, 1, 6, 5, 7, Mask::causal_bottom_right), false, 1);
}

TEST(ScoreNoise, MatchesMonteCarloWithLargeScoresAndBatches) {
  Problem p = make_problem(2, 2, 2, 4, 9, 5, Mask::none);
  p.scale = 0.3;
  check_against_monte_carlo(p, /*large=*/true, 2);
}

TEST(ScoreNoise, MatchesMonteCarloForBf16GqaAndANegativeScale) {
  Problem p = make_problem(1, 4, 2, 7, 7, 3, Mask::causal_top_left, DType::bf16);
  p.scale = -0.5;
  check_against_monte_carlo(p, false, 3);
}

TEST(ScoreNoise, ARowThatSeesOneKeyHasOnlyTheDpMinusDTermInDq) {
  // Top-left causal: query row 0 sees key 0 only, so P = 1 whatever the score: O = V_0 and
  // the scores' rounding moves neither O nor dS = P (dP - D). What is left in dQ is the
  // rounding of dP - D itself, eta = u (sum |dO V_0| + sum |dO O|), since a kernel need not
  // sum D in dP's order. L = S_00 moves with the score, and so does dV_0 = P dO when the
  // backward recomputes P = exp(S - L) with a rounded S against the given L.
  const Problem p = make_problem(1, 1, 1, 4, 4, 6, Mask::causal_top_left);
  InputOptions in;
  in.seed = 9;
  const ProblemData data = make_problem_data(p, in);
  const ScoreNoise noise = score_rounding_noise(data, true);
  const X4 Q = data.q.to_double(), K = data.k.to_double(), V = data.v.to_double(),
           dO = data.dO.to_double();
  double eps_00 = 0.0, dP_terms = 0.0;
  for (std::size_t c = 0; c < 6; ++c) {
    eps_00 += std::fabs(Q(0, 0, 0, c) * K(0, 0, 0, c));
    dP_terms += std::fabs(dO(0, 0, 0, c) * V(0, 0, 0, c));
  }
  eps_00 *= 0x1p-24 * p.scale;
  const double eta_00 = 0x1p-24 * 2.0 * dP_terms;  // O_0 = V_0: both sums have the same terms
  for (std::size_t c = 0; c < 6; ++c) {
    EXPECT_EQ(noise.O(0, 0, 0, c), 0.0) << c;
    EXPECT_DOUBLE_EQ(noise.dQ(0, 0, 0, c), p.scale * eta_00 * std::fabs(K(0, 0, 0, c))) << c;
    EXPECT_GT(noise.O(0, 0, 1, c), 0.0) << c;  // row 1 sees two keys
    EXPECT_GT(noise.dQ(0, 0, 1, c), 0.0) << c;
  }
  EXPECT_DOUBLE_EQ(noise.L(0, 0, 0), eps_00);  // P = 1: sigma_L = eps_00
  EXPECT_GT(noise.dV(0, 0, 0, 0), 0.0);
  // Key 3 is seen by row 3 alone, which sees four keys: its dS, and so dK's sigma, is not 0.
  EXPECT_GT(noise.dK(0, 0, 3, 0), 0.0);
}

// Splits a GQA problem into one single-head problem per query head (same K and V).
ProblemData one_head(const ProblemData& data, std::int64_t h) {
  ProblemData one;
  one.problem = data.problem;
  one.problem.H = one.problem.H_kv = 1;
  const Problem& p = data.problem;
  auto copy = [&](const HostTensor& from, std::int64_t head, std::int64_t S) {
    HostTensor t(p.dtype, Layout::bhsd, p.B, 1, S, p.d);
    for (std::int64_t b = 0; b < p.B; ++b)
      for (std::int64_t s = 0; s < S; ++s)
        for (std::int64_t i = 0; i < p.d; ++i) t.set(b, 0, s, i, from.get(b, head, s, i));
    return t;
  };
  const std::int64_t kv = h / p.group_size();
  one.q = copy(data.q, h, p.S_q);
  one.dO = copy(data.dO, h, p.S_q);
  one.k = copy(data.k, kv, p.S_k);
  one.v = copy(data.v, kv, p.S_k);
  return one;
}

TEST(ScoreNoise, GqaKeyGradientsAddTheVariancesOfTheGroupsQueryHeads) {
  const Problem p = make_problem(1, 3, 1, 5, 6, 4, Mask::causal_bottom_right);
  InputOptions in;
  in.seed = 4;
  const ProblemData data = make_problem_data(p, in);
  const ScoreNoise group = score_rounding_noise(data, true);
  X4 var_dK = xt::zeros<double>(group.dK.shape()), var_dV = var_dK;
  for (std::int64_t h = 0; h < p.H; ++h) {
    const ScoreNoise single = score_rounding_noise(one_head(data, h), true);
    var_dK += single.dK * single.dK;
    var_dV += single.dV * single.dV;
    // The query-side sigmas do not depend on the other heads.
    for (std::size_t s = 0; s < 5; ++s) {
      EXPECT_DOUBLE_EQ(single.L(0, 0, s), group.L(0, static_cast<std::size_t>(h), s));
      for (std::size_t c = 0; c < 4; ++c) {
        EXPECT_DOUBLE_EQ(single.dQ(0, 0, s, c), group.dQ(0, static_cast<std::size_t>(h), s, c));
      }
    }
  }
  for (std::size_t e = 0; e < var_dK.size(); ++e) {
    EXPECT_NEAR(group.dK.flat(e), std::sqrt(var_dK.flat(e)), 1e-12 * group.dK.flat(e)) << e;
    EXPECT_NEAR(group.dV.flat(e), std::sqrt(var_dV.flat(e)), 1e-12 * group.dV.flat(e)) << e;
  }
}

// The operand terms (TF32 products of float32 inputs; bf16 and f16 inputs): what they add to
// the variances, against a Monte Carlo that moves only those operands. In the forward each
// P~_ij that enters the P~V product by a relative theta_ij, uniform in [-u, u] (l is summed
// from the unrounded P~, so O is not renormalized); in the backward each dS_ij that enters
// dQ = scale dS K and dK = scale dS^T Q by its own theta'_ij. A row that sees one key has
// P = 1, exact in every kernel; L and dV get nothing.
void check_operand_terms_against_monte_carlo(DType dtype, bool allow_tf32) {
  // Bottom-right causal with S_q = S_k + 1: row 0 sees no key, row 1 one key; GQA; d = 7 makes
  // the scale 1/sqrt(7), not a power of 2.
  const Problem p = make_problem(1, 2, 1, 6, 5, 7, Mask::causal_bottom_right, dtype);
  InputOptions in;
  in.seed = 5;
  const ProblemData data = make_problem_data(p, in);
  const OperandRounding operand = product_operand_rounding(dtype, allow_tf32);
  const ScoreNoise without = score_rounding_noise(data, true);
  const ScoreNoise with = score_rounding_noise(data, true, operand);
  EXPECT_EQ(without.L, with.L);
  EXPECT_EQ(without.dV, with.dV);
  const auto added = [](const X4& w, const X4& wo) {
    X4 t = xt::sqrt(xt::maximum(w * w - wo * wo, 0.0));
    return t;
  };

  // The exact P and dS = P (dP - D), in double.
  const X4 Q = data.q.to_double(), K = data.k.to_double(), V = data.v.to_double(),
           dO = data.dO.to_double();
  const auto n = [](std::int64_t x) { return static_cast<std::size_t>(x); };
  X4 P = xt::zeros<double>({n(p.B), n(p.H), n(p.S_q), n(p.S_k)}), dS = P;
  double min_P = 1.0;
  for (std::size_t h = 0; h < n(p.H); ++h)
    for (std::size_t i = 0; i < n(p.S_q); ++i) {
      const std::int64_t last = p.last_visible_key(static_cast<std::int64_t>(i));
      if (last < 0) continue;
      std::vector<double> s(n(last + 1));
      double m = -INFINITY, l = 0.0;
      for (std::size_t j = 0; j < s.size(); ++j) {
        for (std::size_t c = 0; c < n(p.d); ++c) s[j] += p.scale * Q(0, h, i, c) * K(0, 0, j, c);
        m = std::max(m, s[j]);
      }
      for (double x : s) l += std::exp(x - m);
      std::vector<double> dP(s.size());
      double D = 0.0;
      for (std::size_t j = 0; j < s.size(); ++j) {
        P(0, h, i, j) = std::exp(s[j] - m) / l;
        min_P = std::min(min_P, P(0, h, i, j));
        for (std::size_t c = 0; c < n(p.d); ++c) dP[j] += dO(0, h, i, c) * V(0, 0, j, c);
        D += P(0, h, i, j) * dP[j];
      }
      for (std::size_t j = 0; j < s.size(); ++j) dS(0, h, i, j) = P(0, h, i, j) * (dP[j] - D);
    }

  // These inputs keep every P in the formats' normal range (f16's ends at 6.1e-5): the
  // relative error alone.
  ASSERT_GT(min_P, 1e-4);
  std::mt19937_64 rng(6);
  std::uniform_real_distribution<double> theta(-operand.u, operand.u);
  X4 var_O = xt::zeros<double>(Q.shape()), var_dQ = var_O, var_dK = xt::zeros<double>(K.shape());
  constexpr int kSamples = 2000;
  for (int r = 0; r < kSamples; ++r) {
    X4 O = xt::zeros<double>(Q.shape()), dQ = O, dK = xt::zeros<double>(K.shape());
    for (std::size_t h = 0; h < n(p.H); ++h)
      for (std::size_t i = 0; i < n(p.S_q); ++i) {
        const std::int64_t last = p.last_visible_key(static_cast<std::int64_t>(i));
        for (std::int64_t jj = 0; jj <= last; ++jj) {
          const std::size_t j = n(jj);
          const double t_P = last > 0 ? theta(rng) : 0.0, t_dS = theta(rng);
          for (std::size_t c = 0; c < n(p.d); ++c) {
            O(0, h, i, c) += P(0, h, i, j) * t_P * V(0, 0, j, c);
            dQ(0, h, i, c) += p.scale * dS(0, h, i, j) * t_dS * K(0, 0, j, c);
            dK(0, 0, j, c) += p.scale * dS(0, h, i, j) * t_dS * Q(0, h, i, c);
          }
        }
      }
    var_O += O * O;
    var_dQ += dQ * dQ;
    var_dK += dK * dK;
  }
  const X4 mc_O = xt::sqrt(var_O / kSamples), mc_dQ = xt::sqrt(var_dQ / kSamples),
           mc_dK = xt::sqrt(var_dK / kSamples);
  EXPECT_GT(expect_matches("O (P~ operand)", added(with.O, without.O), mc_O), 30);
  EXPECT_GT(expect_matches("dQ (dS operand)", added(with.dQ, without.dQ), mc_dQ), 30);
  EXPECT_GT(expect_matches("dK (dS operand)", added(with.dK, without.dK), mc_dK), 15);
}

TEST(ScoreNoise, Tf32OperandTermsMatchMonteCarlo) {
  check_operand_terms_against_monte_carlo(DType::f32, true);
}

// The same terms for 16-bit inputs, whose P~ and dS every kernel rounds to the input dtype in
// its own way (docs/verification.md, "The P~ operand under cancellation").
TEST(ScoreNoise, Bf16AndF16OperandTermsMatchMonteCarlo) {
  check_operand_terms_against_monte_carlo(DType::bf16, false);
  check_operand_terms_against_monte_carlo(DType::f16, false);
}

// The 3xTF32 product terms (product_sigma r): what they add to the variances, against a Monte
// Carlo that gives every product term of every matrix product its own error of size r (a random
// sign), to first order: Q_ic K_jc in the scores and dO_ic V_jc in dP (through P, L and dS as
// the score and dP - D terms go), and the terms P_ij V_jc of O, P_ij dO_ic of dV, dS_ij K_jc of
// dQ and dS_ij Q_ic of dK directly. Every row's P~V term counts, one that sees one key too (its
// P = 1 is exact, V's small half is not).
TEST(ScoreNoise, ThreeTf32ProductTermsMatchMonteCarlo) {
  const Problem p = make_problem(1, 2, 1, 6, 5, 7, Mask::causal_bottom_right);
  InputOptions in;
  in.seed = 7;
  in.large = true;  // near one-hot rows: the product terms' case
  const ProblemData data = make_problem_data(p, in);
  const double r = kThreeTf32ProductSigma;
  const ScoreNoise without = score_rounding_noise(data, true);
  const ScoreNoise with = score_rounding_noise(data, true, {}, r);
  const auto added = [](const auto& w, const auto& wo) {
    return xt::eval(xt::sqrt(xt::maximum(w * w - wo * wo, 0.0)));
  };

  const X4 Q = data.q.to_double(), K = data.k.to_double(), V = data.v.to_double(),
           dO = data.dO.to_double();
  const auto n = [](std::int64_t x) { return static_cast<std::size_t>(x); };
  const std::size_t S_q = n(p.S_q), d = n(p.d);
  std::mt19937_64 rng(8);
  const auto theta = [&] { return (rng() & 1u) ? r : -r; };
  X4 var_O = xt::zeros<double>(Q.shape()), var_dQ = var_O, var_dK = xt::zeros<double>(K.shape()),
     var_dV = var_dK;
  X3 var_L = xt::zeros<double>({n(p.B), n(p.H), S_q});
  constexpr int kSamples = 2000;
  for (int sample = 0; sample < kSamples; ++sample) {
    X4 O = xt::zeros<double>(Q.shape()), dQ = O, dK = xt::zeros<double>(K.shape()), dV = dK;
    X3 L = xt::zeros<double>(var_L.shape());
    for (std::size_t h = 0; h < n(p.H); ++h)
      for (std::size_t i = 0; i < S_q; ++i) {
        const std::int64_t last = p.last_visible_key(static_cast<std::int64_t>(i));
        if (last < 0) continue;
        const std::size_t keys = n(last + 1);
        // The exact row, and each score's and dP's first-order move from its products' errors.
        std::vector<double> s(keys), P(keys), dP(keys), delta(keys), gamma(keys);
        double m = -INFINITY, l = 0.0, D = 0.0;
        for (std::size_t j = 0; j < keys; ++j) {
          for (std::size_t c = 0; c < d; ++c) {
            s[j] += p.scale * Q(0, h, i, c) * K(0, 0, j, c);
            delta[j] += theta() * p.scale * Q(0, h, i, c) * K(0, 0, j, c);
            dP[j] += dO(0, h, i, c) * V(0, 0, j, c);
            gamma[j] += theta() * dO(0, h, i, c) * V(0, 0, j, c);
          }
          m = std::max(m, s[j]);
        }
        for (double x : s) l += std::exp(x - m);
        std::vector<double> O_row(d);
        for (std::size_t j = 0; j < keys; ++j) {
          P[j] = std::exp(s[j] - m) / l;
          D += P[j] * dP[j];
          for (std::size_t c = 0; c < d; ++c) O_row[c] += P[j] * V(0, 0, j, c);
        }
        // Forward: L and O follow the scores (P_j moves by P_j (delta_j - dL)), and each P~V
        // term errs by itself.
        double dL = 0.0;
        for (std::size_t j = 0; j < keys; ++j) dL += P[j] * delta[j];
        L(0, h, i) = dL;
        for (std::size_t j = 0; j < keys; ++j)
          for (std::size_t c = 0; c < d; ++c)
            O(0, h, i, c) +=
                P[j] * delta[j] * (V(0, 0, j, c) - O_row[c]) + theta() * P[j] * V(0, 0, j, c);
        // Backward from the unmoved L and D: P_j and dS_j scale by (1 + delta_j), dP_j - D
        // moves by gamma_j, and each product term of dV, dQ, dK errs by itself.
        for (std::size_t j = 0; j < keys; ++j) {
          const double dS = P[j] * (dP[j] - D);
          const double move_dS = dS * delta[j] + P[j] * gamma[j];
          for (std::size_t c = 0; c < d; ++c) {
            dV(0, 0, j, c) += P[j] * delta[j] * dO(0, h, i, c) + theta() * P[j] * dO(0, h, i, c);
            dQ(0, h, i, c) += p.scale * (move_dS * K(0, 0, j, c) + theta() * dS * K(0, 0, j, c));
            dK(0, 0, j, c) += p.scale * (move_dS * Q(0, h, i, c) + theta() * dS * Q(0, h, i, c));
          }
        }
      }
    var_O += O * O;
    var_L += L * L;
    var_dQ += dQ * dQ;
    var_dK += dK * dK;
    var_dV += dV * dV;
  }
  const auto mc = [&](const auto& v) { return xt::eval(xt::sqrt(v / kSamples)); };
  EXPECT_GT(expect_matches("L (products)", X3(added(with.L, without.L)), X3(mc(var_L))), 8);
  EXPECT_GT(expect_matches("O (products)", X4(added(with.O, without.O)), X4(mc(var_O))), 30);
  EXPECT_GT(expect_matches("dV (products)", X4(added(with.dV, without.dV)), X4(mc(var_dV))), 15);
  EXPECT_GT(expect_matches("dQ (products)", X4(added(with.dQ, without.dQ)), X4(mc(var_dQ))), 15);
  EXPECT_GT(expect_matches("dK (products)", X4(added(with.dK, without.dK)), X4(mc(var_dK))), 8);
}

// The constant is the bound it is derived from (docs/verification.md, "3xTF32 products"): a
// third of a bound on any split's error, 2^-19 of |x y| from the split and 2^-24 from the sum's
// rounding, in float32 unit roundoffs 11.
TEST(ScoreNoise, TheThreeTf32ProductSigmaIsAThirdOfTheSplitsBound) {
  EXPECT_DOUBLE_EQ(3.0 * kThreeTf32ProductSigma / kFloat32UnitRoundoff, 33.0);
}

TEST(ScoreNoise, TheOperandFormats) {
  // Unit roundoffs 2^-p for p significant bits; the absolute floor is half the smallest
  // subnormal step, which only f16's narrow range makes matter (P~ < 6.1e-5).
  EXPECT_TRUE(product_operand_rounding(DType::f32, false).exact());
  const OperandRounding bf16 = product_operand_rounding(DType::bf16, false),
                        f16 = product_operand_rounding(DType::f16, false),
                        tf32 = product_operand_rounding(DType::f32, true);
  EXPECT_EQ(bf16.u, 0x1p-8);
  EXPECT_EQ(f16.u, 0x1p-11);
  EXPECT_EQ(tf32.u, kTf32UnitRoundoff);
  EXPECT_EQ(product_operand_rounding(DType::bf16, true).u, bf16.u);  // TF32 changes no 16-bit
  // The largest error of rounding x is half the step at x: checked on the formats' own grids.
  for (float x : {1.0f, 0.7f, 3e-3f, 1e-5f, 3e-8f, 1e-30f}) {
    EXPECT_LE(std::fabs(double(round_to(DType::bf16, x)) - x), bf16.half_step(x)) << x;
    EXPECT_LE(std::fabs(double(round_to(DType::f16, x)) - x), f16.half_step(x)) << x;
  }
  EXPECT_EQ(f16.half_step(1e-7), 0x1p-25);  // subnormal in f16: an absolute step
  EXPECT_EQ(bf16.half_step(0.0), 0.0);      // 0 is exact in every format
}

TEST(ScoreNoise, ForwardOnlyLeavesTheGradientsEmptyAndTheirMaximaZero) {
  const ProblemData data = make_problem_data(make_problem(1, 2, 2, 3, 3, 4), {});
  const ScoreNoise noise = score_rounding_noise(data, false);
  EXPECT_FALSE(noise.has_backward);
  EXPECT_EQ(noise.dQ.size(), 0u);
  EXPECT_EQ(noise.max_sigma(TensorId::dQ), 0.0);
  EXPECT_GT(noise.max_sigma(TensorId::O), 0.0);
  // The same O and L sigmas as a run with the backward.
  const ScoreNoise both = score_rounding_noise(data, true);
  EXPECT_EQ(noise.O, both.O);
  EXPECT_EQ(noise.L, both.L);
}

TEST(ScoreNoise, TheGradientsNeedDo) {
  ProblemData data = make_problem_data(make_problem(1, 1, 1, 2, 2, 2), {});
  data.dO = HostTensor();
  try {
    score_rounding_noise(data, true);
    FAIL() << "no exception";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.field(), "dO");
  }
  EXPECT_NO_THROW(score_rounding_noise(data, false));
}

}  // namespace
}  // namespace flashref::verify

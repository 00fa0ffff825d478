// The baseline-relative rule on planted errors just inside and just outside its limit, with and
// without the score-rounding noise term of its floor.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "flashref/verify/rule.hpp"

namespace flashref::verify {
namespace {

xt::xtensor<double, 4> random4(unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> n(0.0, 1.0);
  xt::xtensor<double, 4> t(std::array<std::size_t, 4>{2, 2, 9, 6});
  for (double& x : t) x = n(rng);
  return t;
}

double max_abs(const xt::xtensor<double, 4>& t) {
  double m = 0.0;
  for (double x : t) m = std::max(m, std::fabs(x));
  return m;
}

TEST(Rule, KIsTwoForTheForwardAndThreeForGradients) {
  EXPECT_EQ(rule_k(TensorId::O), 2.0);
  EXPECT_EQ(rule_k(TensorId::L), 2.0);
  EXPECT_EQ(rule_k(TensorId::dQ), 3.0);
  EXPECT_EQ(rule_k(TensorId::dK), 3.0);
  EXPECT_EQ(rule_k(TensorId::dV), 3.0);
}

TEST(Rule, FloorIsTwoRoundingStepsAtTheLargestGoldMagnitude) {
  EXPECT_EQ(rule_floor(DType::bf16, 3.0), 2.0 * rounding_step(DType::bf16, 3.0));
  // bf16 keeps 7 explicit mantissa bits: one step in [2, 4) is 2^(1-7).
  EXPECT_EQ(rule_floor(DType::bf16, 3.0), 2.0 * std::ldexp(1.0, 1 - 7));
  EXPECT_EQ(rule_floor(DType::f32, 0.75), 2.0 * std::ldexp(1.0, -1 - 23));
}

// Plants a baseline error and a candidate error at `fraction` of the limit, and applies the
// rule to tensor `id` stored as `dtype`, with score-rounding noise of max sigma `sigma`.
RuleCheck planted(TensorId id, DType dtype, double baseline_error, double fraction,
                  double sigma = 0.0) {
  const auto gold = random4(7);
  auto baseline = gold;
  baseline(1, 0, 4, 2) += baseline_error;
  const ErrorStats b = compute_stats(baseline, gold, SeqAxis::query, 4);
  const double limit =
      rule_k(id) * b.max_abs + rule_floor(dtype, max_abs(gold)) + kNoiseSigmas * sigma;
  auto candidate = gold;
  candidate(0, 1, 8, 5) += fraction * limit;
  const ErrorStats c = compute_stats(candidate, gold, SeqAxis::query, 4);
  return apply_rule(id, dtype, c, b, sigma);
}

TEST(Rule, ErrorJustBelowTheLimitPasses) {
  for (double sigma : {0.0, 4e-3}) {
    for (TensorId id : {TensorId::O, TensorId::dQ, TensorId::dK, TensorId::dV}) {
      const RuleCheck r = planted(id, DType::bf16, 0.01, 0.99, sigma);
      EXPECT_TRUE(r.pass) << tensor_name(id) << ": " << r.reason;
      EXPECT_TRUE(r.reason.empty());
      EXPECT_LT(r.ratio, 1.0);
      EXPECT_NEAR(r.ratio, 0.99, 1e-9);
      EXPECT_EQ(r.limit, r.k * r.baseline_err + r.floor);
    }
  }
}

TEST(Rule, ErrorJustAboveTheLimitFails) {
  for (double sigma : {0.0, 4e-3}) {
    for (TensorId id : {TensorId::O, TensorId::dQ, TensorId::dK, TensorId::dV}) {
      const RuleCheck r = planted(id, DType::f16, 0.01, 1.01, sigma);
      EXPECT_FALSE(r.pass) << tensor_name(id);
      EXPECT_GT(r.ratio, 1.0);
      EXPECT_NE(r.reason.find("> limit"), std::string::npos) << r.reason;
    }
  }
}

TEST(Rule, FloorIsTheRoundingStepsPlusThreeSigmasOfScoreNoise) {
  const auto gold = random4(13);
  const ErrorStats exact = compute_stats(gold, gold, SeqAxis::query, 4);
  const double sigma = 2.5e-6;
  const RuleCheck r = apply_rule(TensorId::dK, DType::f32, exact, exact, sigma);
  EXPECT_EQ(r.floor_rounding, rule_floor(DType::f32, max_abs(gold)));
  EXPECT_EQ(r.noise_sigma, sigma);
  EXPECT_EQ(r.floor_noise, 3.0 * sigma);
  EXPECT_EQ(rule_noise_floor(sigma), 3.0 * sigma);
  EXPECT_EQ(r.floor, r.floor_rounding + r.floor_noise);
  EXPECT_EQ(r.limit, r.floor);  // the baseline is exact
  // Without the inputs (sigma left out) only the rounding part remains.
  const RuleCheck plain = apply_rule(TensorId::dK, DType::f32, exact, exact);
  EXPECT_EQ(plain.floor_noise, 0.0);
  EXPECT_EQ(plain.floor, plain.floor_rounding);
}

TEST(Rule, AnErrorAtTheScoresNoiseLevelPassesOnlyWithTheNoiseTerm) {
  // The baseline happens to be exact; the candidate is off by two sigmas of score noise plus
  // the rounding floor: a correct kernel that summed its scores in another order.
  const auto gold = random4(14);
  const ErrorStats exact = compute_stats(gold, gold, SeqAxis::query, 4);
  const double sigma = 1e-5;
  auto candidate = gold;
  candidate(1, 0, 2, 1) += rule_floor(DType::f32, max_abs(gold)) + 2.0 * sigma;
  const ErrorStats c = compute_stats(candidate, gold, SeqAxis::query, 4);
  EXPECT_TRUE(apply_rule(TensorId::O, DType::f32, c, exact, sigma).pass);
  const RuleCheck without = apply_rule(TensorId::O, DType::f32, c, exact, 0.0);
  EXPECT_FALSE(without.pass);
  // Four sigmas is beyond the noise term: a real error of that size still fails.
  candidate(1, 0, 2, 1) = gold(1, 0, 2, 1) + rule_floor(DType::f32, max_abs(gold)) + 4.0 * sigma;
  const RuleCheck beyond = apply_rule(
      TensorId::O, DType::f32, compute_stats(candidate, gold, SeqAxis::query, 4), exact, sigma);
  EXPECT_FALSE(beyond.pass);
  EXPECT_NE(beyond.reason.find("rounding"), std::string::npos) << beyond.reason;
  EXPECT_NE(beyond.reason.find("noise"), std::string::npos) << beyond.reason;
}

TEST(Rule, NoiseNeverExcusesNaN) {
  const auto gold = random4(15);
  auto candidate = gold;
  candidate(0, 0, 0, 0) = NAN;
  const RuleCheck r =
      apply_rule(TensorId::O, DType::f32, compute_stats(candidate, gold, SeqAxis::query, 4),
                 compute_stats(gold, gold, SeqAxis::query, 4), /*noise_sigma=*/1e3);
  EXPECT_FALSE(r.pass);
  EXPECT_NE(r.reason.find("NaN"), std::string::npos) << r.reason;
}

TEST(Rule, TheSameErrorPassesForAGradientButFailsForO) {
  // 2.5 times the baseline error: inside k = 3, outside k = 2.
  const auto gold = random4(8);
  auto baseline = gold;
  baseline(0, 0, 0, 0) += 1e-2;
  auto candidate = gold;
  candidate(1, 1, 1, 1) += 2.5e-2;
  const ErrorStats b = compute_stats(baseline, gold, SeqAxis::query, 4);
  const ErrorStats c = compute_stats(candidate, gold, SeqAxis::query, 4);
  EXPECT_FALSE(apply_rule(TensorId::O, DType::f32, c, b).pass);
  EXPECT_TRUE(apply_rule(TensorId::dQ, DType::f32, c, b).pass);
}

TEST(Rule, AnExactBaselineStillAllowsTheFloor) {
  const auto gold = random4(9);
  const ErrorStats b = compute_stats(gold, gold, SeqAxis::query, 4);
  const double floor = rule_floor(DType::bf16, max_abs(gold));
  auto candidate = gold;
  candidate(0, 0, 3, 3) += 0.5 * floor;
  EXPECT_TRUE(
      apply_rule(TensorId::O, DType::bf16, compute_stats(candidate, gold, SeqAxis::query, 4), b)
          .pass);
  candidate(0, 0, 3, 3) = gold(0, 0, 3, 3) + 1.5 * floor;
  EXPECT_FALSE(
      apply_rule(TensorId::O, DType::bf16, compute_stats(candidate, gold, SeqAxis::query, 4), b)
          .pass);
}

TEST(Rule, NaNFailsWhateverTheError) {
  const auto gold = random4(10);
  auto baseline = gold;
  baseline(0, 0, 0, 0) += 1.0;  // a huge limit
  auto candidate = gold;
  candidate(1, 1, 2, 3) = NAN;
  const RuleCheck r =
      apply_rule(TensorId::O, DType::f32, compute_stats(candidate, gold, SeqAxis::query, 4),
                 compute_stats(baseline, gold, SeqAxis::query, 4));
  EXPECT_FALSE(r.pass);
  EXPECT_EQ(r.candidate_err, 0.0);  // the finite part is exact: only the NaN fails it
  EXPECT_NE(r.reason.find("1 NaN"), std::string::npos) << r.reason;
}

TEST(Rule, InfinityFails) {
  const auto gold = random4(11);
  auto candidate = gold;
  candidate(0, 1, 2, 3) = -INFINITY;
  const RuleCheck r =
      apply_rule(TensorId::dV, DType::f32, compute_stats(candidate, gold, SeqAxis::key, 4),
                 compute_stats(gold, gold, SeqAxis::key, 4));
  EXPECT_FALSE(r.pass);
  EXPECT_NE(r.reason.find("-inf"), std::string::npos) << r.reason;
}

TEST(Rule, ABaselineWithNaNMakesTheCheckFail) {
  const auto gold = random4(12);
  auto baseline = gold;
  baseline(0, 0, 1, 1) = NAN;
  const RuleCheck r =
      apply_rule(TensorId::O, DType::f32, compute_stats(gold, gold, SeqAxis::query, 4),
                 compute_stats(baseline, gold, SeqAxis::query, 4));
  EXPECT_FALSE(r.pass);
  EXPECT_NE(r.reason.find("baseline"), std::string::npos) << r.reason;
}

xt::xtensor<double, 3> lse(double masked_value) {
  xt::xtensor<double, 3> L(std::array<std::size_t, 3>{1, 1, 5});
  for (std::size_t s = 0; s < 5; ++s)
    L(0, 0, s) = s < 2 ? masked_value : 1.0 + 0.1 * static_cast<double>(s);
  return L;
}

TEST(Rule, LMustMatchMinusInfinityOfFullyMaskedRowsExactly) {
  const auto gold = lse(-INFINITY);
  const ErrorStats exact = compute_stats(gold, gold, 2);
  EXPECT_TRUE(apply_rule(TensorId::L, DType::f32, exact, exact).pass);

  const RuleCheck finite =
      apply_rule(TensorId::L, DType::f32, compute_stats(lse(-1e30), gold, 2), exact);
  EXPECT_FALSE(finite.pass);
  EXPECT_NE(finite.reason.find("fully masked"), std::string::npos) << finite.reason;

  auto extra = gold;
  extra(0, 0, 4) = -INFINITY;
  EXPECT_FALSE(apply_rule(TensorId::L, DType::f32, compute_stats(extra, gold, 2), exact).pass);
}

TEST(Rule, LFloorUsesFloat32WhateverTheInputDtype) {
  // Callers pass output_dtype(L, problem), which is f32 even for a bf16 problem.
  Problem p = make_problem(1, 1, 1, 4, 4, 8, Mask::none, DType::bf16);
  EXPECT_EQ(output_dtype(TensorId::L, p), DType::f32);
  EXPECT_EQ(output_dtype(TensorId::O, p), DType::bf16);
  p.grad_dtype = DType::f32;
  EXPECT_EQ(output_dtype(TensorId::dK, p), DType::f32);
}

}  // namespace
}  // namespace flashref::verify

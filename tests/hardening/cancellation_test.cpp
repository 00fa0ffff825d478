// The rule under cancellation (docs/verification.md, "The cancellation floor"): the floor's
// term from the magnitude of the terms each output sums, checked against sums computed here
// from their definitions, and the case the long fuzz found, which the rule failed before the
// term (a correct kernel, O = -0.088 summed from V values near 1 that cancel). Then the three
// bf16 cases the long fuzz found next, which fail without the noise part's P~ operand term
// ("The P~ operand under cancellation").
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "flashref/verify/noise_floor.hpp"
#include "flashref/verify/problem_data.hpp"
#include "flashref/verify/sum_magnitude.hpp"
#include "flashref/verify/verification.hpp"

namespace {

using namespace flashref;
using namespace flashref::verify;

ProblemData random_data(const Problem& p, std::uint64_t seed) {
  return make_problem_data(p, {seed, false, Layout::bhsd});
}

TEST(CancellationFloor, WithZeroQueriesPIsUniformAndTheSumsAreMeansOfAbsoluteValues) {
  // Q = 0 gives S = 0, so every visible key has P = 1/n, m = 0 and l = n: M_O(i, c) is the
  // mean of |V_jc| over the n keys row i sees, M_L(i) = log n (equal scores: no running max
  // lags m, so no conditional rescale's allowance), and dS = P (dP - D) with
  // D = sum_j P_j dP_j.
  const Problem p = make_problem(1, 1, 1, 6, 9, 5, Mask::causal_bottom_right, DType::f32);
  ProblemData data = random_data(p, 3);
  for (std::int64_t s = 0; s < p.S_q; ++s)
    for (std::int64_t c = 0; c < p.d; ++c) data.q.set(0, 0, s, c, 0.0f);
  double max_O = 0.0, max_L = 0.0, max_dV = 0.0;
  std::vector<double> dV(static_cast<std::size_t>(p.S_k * p.d), 0.0);
  for (std::int64_t i = 0; i < p.S_q; ++i) {
    const std::int64_t n = p.last_visible_key(i) + 1;
    max_L = std::max(max_L, std::log(static_cast<double>(n)));
    for (std::int64_t c = 0; c < p.d; ++c) {
      double mean = 0.0;
      for (std::int64_t j = 0; j < n; ++j) mean += std::fabs(double(data.v.get(0, 0, j, c))) / double(n);
      max_O = std::max(max_O, mean);
      for (std::int64_t j = 0; j < n; ++j) {
        dV[static_cast<std::size_t>(j * p.d + c)] += std::fabs(double(data.dO.get(0, 0, i, c))) / double(n);
      }
    }
  }
  for (double x : dV) max_dV = std::max(max_dV, x);
  const SumMagnitudes sums = sum_magnitudes(data, true);
  EXPECT_NEAR(sums.max_magnitude(TensorId::O), max_O, 1e-12 * max_O);
  EXPECT_NEAR(sums.max_magnitude(TensorId::L), max_L, 1e-12 * max_L);
  EXPECT_NEAR(sums.max_magnitude(TensorId::dV), max_dV, 1e-12 * max_dV);
  // dQ and dK are scale * sums of |dS| |K| and |dS| |Q|: with Q = 0, dK's terms are all 0.
  EXPECT_EQ(sums.max_magnitude(TensorId::dK), 0.0);
  EXPECT_GT(sums.max_magnitude(TensorId::dQ), 0.0);
}

TEST(CancellationFloor, LsTermAllowsARunningMaxThatLagsByAsMuchAsTheScoresLet) {
  // One query (q = 1) and two keys (d = 1, scale 1): scores 0 and -g. A kernel that defers its
  // rescale may keep m' = -g, lagging the max 0 by g, and add L from m' and log l', each up to
  // g larger: M_L = |m| + log l + 2 lag, lag = min(g, kConditionalRescale).
  const Problem p = make_problem(1, 1, 1, 1, 2, 1, Mask::none, DType::f32);
  for (float g : {1.0f, 20.0f}) {
    ProblemData data = random_data(p, 5);
    data.q.set(0, 0, 0, 0, 1.0f);
    data.k.set(0, 0, 0, 0, 0.0f);
    data.k.set(0, 0, 1, 0, -g);
    const double l = 1.0 + std::exp(-static_cast<double>(g));
    const double lag = std::min(static_cast<double>(g), kConditionalRescale);
    const double expected = std::log(l) + 2.0 * lag;
    EXPECT_NEAR(sum_magnitudes(data, false).max_magnitude(TensorId::L), expected, 1e-12 * expected)
        << "g = " << g;
  }
}

TEST(CancellationFloor, TheSumsScaleWithTheTermsNotWithTheResult) {
  // Doubling dO doubles every gradient's terms and leaves O's and L's alone; doubling V
  // doubles O's terms.
  const Problem p = make_problem(2, 2, 1, 7, 5, 4, Mask::none, DType::f32);
  const ProblemData data = random_data(p, 11);
  ProblemData twice = data;
  ProblemData v_twice = data;
  for (std::int64_t b = 0; b < p.B; ++b)
    for (std::int64_t h = 0; h < p.H; ++h)
      for (std::int64_t s = 0; s < p.S_q; ++s)
        for (std::int64_t c = 0; c < p.d; ++c)
          twice.dO.set(b, h, s, c, 2.0f * data.dO.get(b, h, s, c));
  for (std::int64_t b = 0; b < p.B; ++b)
    for (std::int64_t s = 0; s < p.S_k; ++s)
      for (std::int64_t c = 0; c < p.d; ++c)
        v_twice.v.set(b, 0, s, c, 2.0f * data.v.get(b, 0, s, c));
  const SumMagnitudes a = sum_magnitudes(data, true), b = sum_magnitudes(twice, true),
                      v2 = sum_magnitudes(v_twice, true);
  for (TensorId t : {TensorId::dQ, TensorId::dK, TensorId::dV}) {
    EXPECT_DOUBLE_EQ(b.max_magnitude(t), 2.0 * a.max_magnitude(t)) << tensor_name(t);
  }
  for (TensorId t : {TensorId::O, TensorId::L}) {
    EXPECT_EQ(b.max_magnitude(t), a.max_magnitude(t)) << tensor_name(t);
  }
  EXPECT_DOUBLE_EQ(v2.max_magnitude(TensorId::O), 2.0 * a.max_magnitude(TensorId::O));
  EXPECT_EQ(cancellation_floor(a.max_magnitude(TensorId::O)),
            kSumEpsilon * a.max_magnitude(TensorId::O));
}

TEST(CancellationFloor, TheCaseTheLongFuzzFoundNowPasses) {
  // flashref verify --backends cpu --shape 1,1,1,37,1 --heads-kv 1 --mask causal-bottom-right
  //   --dtype f32 --tile 0,15 --seed 312153 --layout bhsd
  // failed O by 4.43e-8 against a limit of 3.92e-8 before the cancellation term.
  VerifyCase c;
  c.problem = make_problem(1, 1, 1, 1, 37, 1, Mask::causal_bottom_right, DType::f32);
  c.tile_q = 0;
  c.tile_k = 15;
  c.seed = 312153;
  c.layout = Layout::bhsd;
  const VerifyReport report = run_verification(c, {"cpu"});
  ASSERT_EQ(report.backends.size(), 1u);
  const BackendReport& b = report.backends[0];
  EXPECT_TRUE(b.passed()) << (b.tensors.empty() ? b.error : b.tensors[0].rule.reason);
  for (const TensorReport& t : b.tensors) {
    if (t.tensor != TensorId::O) continue;
    // The error sits above the floor without the term: the term is what lets it pass.
    const RuleCheck& r = t.rule;
    EXPECT_GT(r.candidate_err, r.k * r.baseline_err + r.floor_rounding + r.floor_noise)
        << "the case no longer exercises the cancellation term";
    EXPECT_LE(r.candidate_err, r.limit);
    EXPECT_GT(r.floor_cancellation, 0.0);
  }
}

struct FuzzCase {
  std::int64_t S_k;
  Mask mask;
  std::uint64_t seed;
  Layout layout;
};

TEST(OperandRoundingUnderCancellation, TheBf16CasesTheLongFuzzFoundPass) {
  // bench/results/2026-12-01-fuzz-long/cpu-failures.jsonl: S_q = 1, d = 1, bf16, tiles 1 x 1;
  // O is a sum of V values near 1 that cancel (|O| / sum_j P_j |V_j| = 1/45, 1/34, 1/196), and
  // the cpu's and the baseline's roundings of P~ to bf16 (before and after the division by l)
  // leave O errors of 3.6e-4, 5.1e-4, 6.0e-4 against the baseline's 6.3e-6, 1.0e-4, 2.4e-5.
  const FuzzCase cases[] = {{37, Mask::causal_bottom_right, 121248, Layout::bshd},
                            {58, Mask::causal_bottom_right, 79555, Layout::bshd},
                            {9, Mask::none, 31252, Layout::bhsd}};
  for (const FuzzCase& f : cases) {
    VerifyCase c;
    c.problem = make_problem(1, 1, 1, 1, f.S_k, 1, f.mask, DType::bf16);
    c.tile_q = 1;
    c.tile_k = 1;
    c.seed = f.seed;
    c.layout = f.layout;
    const std::string where = "seed " + std::to_string(f.seed);
    const VerifyReport report = run_verification(c, {"cpu"});
    ASSERT_EQ(report.backends.size(), 1u) << where;
    const BackendReport& b = report.backends[0];
    EXPECT_TRUE(b.passed()) << where << ": " << (b.tensors.empty() ? b.error : b.tensors[0].rule.reason);
    // Without the operand term (the scores' noise alone) the O check fails: the term is what
    // lets the correct kernel pass, not a wider tolerance elsewhere.
    const ProblemData data = make_problem_data(c.problem, input_options(c));
    const ScoreNoise scores_only = score_rounding_noise(data, false);
    for (const TensorReport& t : b.tensors) {
      if (t.tensor != TensorId::O) continue;
      const RuleCheck& r = t.rule;
      const double without = r.k * r.baseline_err + r.floor_rounding +
                             kNoiseSigmas * scores_only.max_sigma(TensorId::O) +
                             r.floor_cancellation;
      EXPECT_GT(r.candidate_err, without) << where << ": no longer exercises the operand term";
      EXPECT_LE(r.candidate_err, r.limit) << where;
    }
  }
}

}  // namespace

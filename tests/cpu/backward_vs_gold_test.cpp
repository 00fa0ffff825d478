// The cpu backward against the gold on awkward shapes, every mask and dtype, judged by the
// baseline-relative rule with k = 3 for dQ, dK, dV. O and L come from the cpu forward, as in
// training.
#include <gtest/gtest.h>

#include <functional>

#include "awkward_cases.hpp"

namespace flashref::cputest {
namespace {

class BackwardVsGold : public ::testing::TestWithParam<AwkwardCase> {};

TEST_P(BackwardVsGold, GradientsWithinTheBaselineRule) {
  const AwkwardCase& c = GetParam();
  const Problem p = c.problem();
  const Inputs in =
      make_inputs(p, std::hash<std::string>{}(c.name()) + 1, c.shape.layout, c.shape.stddev);

  const auto cpu = flashref::cpu::make_backend();
  const auto baseline = flashref::reference::make_backend();
  const ForwardResult fwd = run_forward(*cpu, in, c.options());
  const BackwardResult got = run_backward(*cpu, in, fwd, c.options());
  const BackwardResult base = run_backward(*baseline, in, run_forward(*baseline, in));
  BackwardResult unused = empty_backward(in);
  const reference::GoldBackward gold = reference::gold_backward(backward_params(in, fwd, unused));

  const RuleCheck dQ = rule("dQ", max_abs_error(got.dq, gold.dQ), max_abs_error(base.dq, gold.dQ),
                            3.0, p.grad_dtype, gold.dQ);
  const RuleCheck dK = rule("dK", max_abs_error(got.dk, gold.dK), max_abs_error(base.dk, gold.dK),
                            3.0, p.grad_dtype, gold.dK);
  const RuleCheck dV = rule("dV", max_abs_error(got.dv, gold.dV), max_abs_error(base.dv, gold.dV),
                            3.0, p.grad_dtype, gold.dV);
  EXPECT_TRUE(dQ.pass()) << dQ.describe();
  EXPECT_TRUE(dK.pass()) << dK.describe();
  EXPECT_TRUE(dV.pass()) << dV.describe();
  EXPECT_GT(max_finite_magnitude(gold.dV), 0.0);
}

INSTANTIATE_TEST_SUITE_P(Awkward, BackwardVsGold, ::testing::ValuesIn(awkward_cases()),
                         [](const auto& info) { return info.param.name(); });

}  // namespace
}  // namespace flashref::cputest

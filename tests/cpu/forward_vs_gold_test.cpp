// The cpu forward against the gold on awkward shapes, every mask and dtype, judged by the
// baseline-relative rule: the error of O and L at most 2x the naive baseline's (the reference
// backend in the same precision) plus two rounding steps of the output dtype.
#include <gtest/gtest.h>

#include <functional>

#include "awkward_cases.hpp"

namespace flashref::cputest {
namespace {

class ForwardVsGold : public ::testing::TestWithParam<AwkwardCase> {};

TEST_P(ForwardVsGold, OAndLWithinTheBaselineRule) {
  const AwkwardCase& c = GetParam();
  const Problem p = c.problem();
  const Inputs in =
      make_inputs(p, std::hash<std::string>{}(c.name()), c.shape.layout, c.shape.stddev);

  const auto cpu = flashref::cpu::make_backend();
  const auto baseline = flashref::reference::make_backend();
  const ForwardResult got = run_forward(*cpu, in, c.options());
  const ForwardResult base = run_forward(*baseline, in);
  ForwardResult unused = empty_forward(in);
  const reference::GoldForward gold = reference::gold_forward(forward_params(in, unused));

  const RuleCheck O =
      rule("O", max_abs_error(got.o, gold.O), max_abs_error(base.o, gold.O), 2.0, p.dtype, gold.O);
  const RuleCheck L = rule("L", max_abs_error(got.lse, gold.L), max_abs_error(base.lse, gold.L),
                           2.0, DType::f32, gold.L);
  EXPECT_TRUE(O.pass()) << O.describe();
  EXPECT_TRUE(L.pass()) << L.describe();
  // The rule must not pass vacuously: the gold is not trivially zero.
  EXPECT_GT(max_finite_magnitude(gold.O), 0.0);
}

INSTANTIATE_TEST_SUITE_P(Awkward, ForwardVsGold, ::testing::ValuesIn(awkward_cases()),
                         [](const auto& info) { return info.param.name(); });

}  // namespace
}  // namespace flashref::cputest

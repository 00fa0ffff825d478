// The gold backward against numerical differentiation in double, on tiny problems: every mask
// (bottom-right with S_q > S_k, so with fully masked rows), GQA and MQA, S_q != S_k, head dims
// that are not powers of two, a non-default scale. The loss is sum(O * dO), whose gradient
// with respect to Q, K, V is exactly what gold_backward computes from dO.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>

#include "attention_data.hpp"
#include "flashref/error.hpp"
#include "flashref/reference/gold.hpp"

namespace flashref {
namespace {

using reference::gold_backward;
using reference::gold_backward_with_D;
using reference::gold_forward;
using test::AttentionData;
using test::HostTensor;
using test::Layout;

std::size_t at(std::int64_t i) {
  return static_cast<std::size_t>(i);
}

struct GradientCase {
  const char* name;
  std::int64_t B, H, H_kv, S_q, S_k, d;
  Mask mask;
  double scale = 0;  // 0: the default 1/sqrt(d)
};

Problem problem_of(const GradientCase& c) {
  Problem p = make_problem(c.B, c.H, c.H_kv, c.S_q, c.S_k, c.d, c.mask);
  if (c.scale != 0) p.scale = c.scale;
  return p;
}

// Inputs on the grid k / 64 in [-2, 2], so that x +- 2^-9 and x +- 2^-10 are exact in float32
// and the numerical derivative sees exactly the step it divides by.
AttentionData grid_data(const Problem& p, std::uint64_t seed) {
  AttentionData data(p, Layout::bshd);
  data.options.num_threads = 1;
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> grid(-128, 128);
  for (HostTensor* t : {&data.q, &data.k, &data.v, &data.dO}) {
    t->for_each(
        [&](auto b, auto s, auto h, auto c) { t->view.store(b, s, h, c, grid(rng) / 64.0f); });
  }
  return data;
}

// The loss sum(O * dO), with O from the gold forward.
double loss(const AttentionData& data) {
  const reference::GoldForward gold = gold_forward(data.forward_params());
  double sum = 0;
  data.dO.for_each([&](auto b, auto s, auto h, auto c) {
    sum += gold.O(at(b), at(h), at(s), at(c)) * data.dO.view.load(b, s, h, c);
  });
  return sum;
}

// d loss / d x for one input element, by central differences with Richardson extrapolation:
// (4 D(h/2) - D(h)) / 3 cancels the h^2 error term, leaving O(h^4) ~ 1e-11 at h = 2^-9.
double numerical_derivative(AttentionData& data, HostTensor& t, std::int64_t b, std::int64_t s,
                            std::int64_t h, std::int64_t c) {
  const float x = t.view.load(b, s, h, c);
  auto central = [&](double step) {
    t.view.store(b, s, h, c, static_cast<float>(x + step));
    EXPECT_EQ(static_cast<double>(t.view.load(b, s, h, c)), x + step) << "step not exact";
    const double plus = loss(data);
    t.view.store(b, s, h, c, static_cast<float>(x - step));
    const double minus = loss(data);
    t.view.store(b, s, h, c, x);
    return (plus - minus) / (2 * step);
  };
  const double step = std::ldexp(1.0, -9);
  return (4 * central(step / 2) - central(step)) / 3;
}

class GoldGradient : public ::testing::TestWithParam<GradientCase> {};

// Both sides are computed in double; what separates them is the extrapolated truncation error
// and the loss's rounding divided by the step: at most 3e-12 measured on these problems, so
// the bound leaves 30x of room. A wrong term in eq. (7)-(11) shows up as an error of order 0.1.
constexpr double kTolerance = 1e-10;

TEST_P(GoldGradient, MatchesNumericalDerivativeOfSumOTimesDO) {
  const Problem p = problem_of(GetParam());
  AttentionData data = grid_data(p, 1234);
  const reference::GoldBackward grad = gold_backward(data.backward_params());

  struct Input {
    const char* name;
    HostTensor* tensor;
    const xt::xtensor<double, 4>* gradient;  // (B, heads, S, d)
  };
  for (const Input& in : {Input{"dQ", &data.q, &grad.dQ}, Input{"dK", &data.k, &grad.dK},
                          Input{"dV", &data.v, &grad.dV}}) {
    double worst = 0, largest = 0;
    in.tensor->for_each([&](auto b, auto s, auto h, auto c) {
      const double analytic = (*in.gradient)(at(b), at(h), at(s), at(c));
      const double numeric = numerical_derivative(data, *in.tensor, b, s, h, c);
      EXPECT_NEAR(analytic, numeric, kTolerance * (1 + std::fabs(analytic)))
          << in.name << " at (b=" << b << ", s=" << s << ", h=" << h << ", c=" << c << ")";
      worst = std::max(worst, std::fabs(analytic - numeric));
      largest = std::max(largest, std::fabs(analytic));
    });
    // The comparison means something only if the gradient is not (nearly) zero everywhere.
    EXPECT_GT(largest, 1e6 * kTolerance) << in.name;
    RecordProperty(std::string(in.name) + "_max_error", test::scientific(worst));
  }
}

const GradientCase kCases[] = {
    {"none_square_batch2", 2, 2, 2, 4, 4, 3, Mask::none},
    {"none_Sq_lt_Sk_d5_scale07", 1, 1, 1, 3, 6, 5, Mask::none, 0.7},
    {"none_single_query_d7", 1, 1, 1, 1, 4, 7, Mask::none},
    {"top_left_Sq_lt_Sk_mqa", 1, 2, 1, 3, 5, 3, Mask::causal_top_left},
    {"top_left_Sq_gt_Sk", 1, 1, 1, 5, 3, 2, Mask::causal_top_left},
    {"top_left_square_gqa", 1, 4, 2, 4, 4, 3, Mask::causal_top_left},
    {"bottom_right_Sq_gt_Sk_gqa", 1, 4, 2, 5, 3, 3, Mask::causal_bottom_right},
    {"bottom_right_Sq_lt_Sk_d5", 2, 1, 1, 3, 6, 5, Mask::causal_bottom_right},
};

INSTANTIATE_TEST_SUITE_P(Cases, GoldGradient, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

// Fully masked rows (bottom-right, S_q > S_k): the numerical derivative of those rows is
// exactly zero (O = 0 whatever Q is), and so is the gold's.
TEST(GoldGradientMaskedRows, FullyMaskedRowsHaveExactlyZeroDQ) {
  const Problem p = make_problem(1, 2, 1, 6, 2, 3, Mask::causal_bottom_right);
  AttentionData data = grid_data(p, 5);
  const reference::GoldBackward grad = gold_backward(data.backward_params());
  for (std::int64_t h = 0; h < p.H; ++h) {
    for (std::int64_t i = 0; i < p.S_q; ++i) {
      const bool masked = p.last_visible_key(i) < 0;
      for (std::int64_t c = 0; c < p.d; ++c) {
        const double g = grad.dQ(0, at(h), at(i), at(c));
        if (masked) {
          EXPECT_EQ(g, 0.0) << "row " << i;
          EXPECT_EQ(numerical_derivative(data, data.q, 0, i, h, c), 0.0);
        }
        EXPECT_TRUE(std::isfinite(g));
      }
    }
  }
}

// D = rowsum(dO * O) is the recomputation trick's stand-in for P_i^T dP_i; with the true D the
// hook reproduces the gold, with a wrong one it changes dQ and dK but never dV.
TEST(GoldBackwardWithD, TrueDReproducesTheGoldAndAWrongDChangesDQAndDK) {
  const Problem p = make_problem(2, 4, 2, 7, 9, 5, Mask::causal_bottom_right);
  AttentionData data = grid_data(p, 77);
  const reference::GoldForward fwd = gold_forward(data.forward_params());
  const reference::GoldBackward gold = gold_backward(data.backward_params());

  xt::xtensor<double, 3> D = xt::zeros<double>(fwd.L.shape());
  for (std::int64_t b = 0; b < p.B; ++b)
    for (std::int64_t h = 0; h < p.H; ++h)
      for (std::int64_t i = 0; i < p.S_q; ++i)
        for (std::int64_t c = 0; c < p.d; ++c)
          D(at(b), at(h), at(i)) +=
              data.dO.view.load(b, i, h, c) * fwd.O(at(b), at(h), at(i), at(c));
  const reference::GoldBackward with_true_D = gold_backward_with_D(data.backward_params(), D);
  EXPECT_LT(test::max_abs_error(with_true_D.dQ, gold.dQ), 1e-13);
  EXPECT_LT(test::max_abs_error(with_true_D.dK, gold.dK), 1e-13);
  EXPECT_TRUE(test::identical(with_true_D.dV, gold.dV));

  const xt::xtensor<double, 3> zero_D = xt::zeros<double>(fwd.L.shape());
  const reference::GoldBackward with_zero_D = gold_backward_with_D(data.backward_params(), zero_D);
  EXPECT_GT(test::relative_l2(with_zero_D.dQ, gold.dQ), 1e-2);
  EXPECT_GT(test::relative_l2(with_zero_D.dK, gold.dK), 1e-2);
  EXPECT_TRUE(test::identical(with_zero_D.dV, gold.dV));
}

TEST(GoldBackwardWithD, WrongShapeNamesDAndBothShapes) {
  const Problem p = make_problem(1, 2, 2, 3, 3, 4);
  AttentionData data = grid_data(p, 1);
  const xt::xtensor<double, 3> D = xt::zeros<double>(std::array<std::size_t, 3>{1, 3, 2});
  try {
    gold_backward_with_D(data.backward_params(), D);
    ADD_FAILURE() << "accepted a D of the wrong shape";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.field(), "D");
    EXPECT_NE(std::string(e.what()).find("(1, 3, 2)"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("(1, 2, 3)"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace flashref

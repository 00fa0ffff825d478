// The one tensor set (tensor_set.hpp) and what is built on it: canonical shapes, statistics by
// tensor id, canonical values stored as a host tensor, and the one choice of the gradients'
// baseline that `flashref verify` and `flashref check` share.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "flashref/error.hpp"
#include "flashref/verify/host_tensor.hpp"
#include "flashref/verify/stats.hpp"
#include "flashref/verify/tensor_set.hpp"
#include "flashref/verify/verification.hpp"

namespace flashref::verify {
namespace {

xt::xarray<double> random_values(std::vector<std::size_t> shape, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> n(0.0, 3.0);
  xt::xarray<double> a = xt::xarray<double>::from_shape(shape);
  for (double& x : a) x = n(rng);
  return a;
}

TEST(TensorSet, IteratesInTensorIdOrderAndNamesAMissingTensor) {
  const Problem p = make_problem(2, 4, 2, 5, 7, 3, Mask::none, DType::f32);
  TensorSet set;
  for (TensorId id : {TensorId::dV, TensorId::L, TensorId::O, TensorId::dK}) {
    set[id] = random_values(canonical_shape(id, p), 1);
  }
  std::vector<TensorId> order;
  for (const auto& [id, values] : set) order.push_back(id);
  EXPECT_EQ(order, (std::vector<TensorId>{TensorId::O, TensorId::L, TensorId::dK, TensorId::dV}));
  EXPECT_TRUE(set.has(TensorId::dK));
  EXPECT_FALSE(set.has(TensorId::dQ));
  EXPECT_FALSE(set.has_backward());
  set[TensorId::dQ] = random_values(canonical_shape(TensorId::dQ, p), 2);
  EXPECT_TRUE(set.has_backward());
  set.erase(TensorId::dQ);
  try {
    (void)set.at(TensorId::dQ);
    ADD_FAILURE() << "no error";
  } catch (const std::out_of_range& e) {
    EXPECT_NE(std::string(e.what()).find("dQ"), std::string::npos) << e.what();
  }
}

TEST(TensorSet, CanonicalShapesAndTheCheckThatNamesTheTensor) {
  const Problem p = make_problem(2, 4, 2, 5, 7, 3, Mask::none, DType::f32);
  EXPECT_EQ(canonical_shape(TensorId::O, p), (std::vector<std::size_t>{2, 4, 5, 3}));
  EXPECT_EQ(canonical_shape(TensorId::dQ, p), (std::vector<std::size_t>{2, 4, 5, 3}));
  EXPECT_EQ(canonical_shape(TensorId::L, p), (std::vector<std::size_t>{2, 4, 5}));
  EXPECT_EQ(canonical_shape(TensorId::dK, p), (std::vector<std::size_t>{2, 2, 7, 3}));
  EXPECT_EQ(canonical_shape(TensorId::dV, p), (std::vector<std::size_t>{2, 2, 7, 3}));

  TensorSet set{{TensorId::O, random_values({2, 4, 5, 3}, 3)},
                {TensorId::dK, random_values({2, 4, 7, 3}, 4)}};  // query heads: wrong
  EXPECT_NO_THROW(
      require_canonical_shapes(TensorSet{{TensorId::O, set.at(TensorId::O)}}, p, "candidate"));
  try {
    require_canonical_shapes(set, p, "candidate");
    ADD_FAILURE() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.field(), "candidate dK");
    EXPECT_NE(std::string(e.what()).find("(2, 2, 7, 3)"), std::string::npos) << e.what();
  }
}

TEST(TensorSet, StatisticsByIdEqualTheFixedRankOnes) {
  const Problem p = make_problem(1, 2, 1, 9, 6, 4, Mask::none, DType::f32);
  for (TensorId id : {TensorId::O, TensorId::L, TensorId::dK}) {
    const xt::xarray<double> gold = random_values(canonical_shape(id, p), 5);
    xt::xarray<double> cand = gold + 1e-3 * random_values(canonical_shape(id, p), 6);
    cand.flat(7) = NAN;
    const ErrorStats by_id = compute_stats(id, cand, gold, 4);
    const ErrorStats fixed =
        id == TensorId::L
            ? compute_stats(xt::xtensor<double, 3>(cand), xt::xtensor<double, 3>(gold), 4)
            : compute_stats(xt::xtensor<double, 4>(cand), xt::xtensor<double, 4>(gold),
                            seq_axis(id), 4);
    EXPECT_EQ(by_id.max_abs, fixed.max_abs) << tensor_name(id);
    EXPECT_EQ(by_id.rel_l2, fixed.rel_l2) << tensor_name(id);
    EXPECT_EQ(by_id.nan, 1) << tensor_name(id);
    EXPECT_EQ(by_id.axis, seq_axis(id)) << tensor_name(id);
    EXPECT_EQ(by_id.worst.s, fixed.worst.s) << tensor_name(id);
    EXPECT_EQ(by_id.worst.i, fixed.worst.i) << tensor_name(id);
  }
}

TEST(TensorSet, CanonicalValuesAreStoredLikeSetInAnyDtypeAndLayout) {
  const xt::xarray<double> values = random_values({2, 3, 5, 4}, 7);
  for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    for (Layout layout : {Layout::bhsd, Layout::bshd}) {
      const HostTensor t = HostTensor::from_canonical(values, dtype, layout);
      EXPECT_EQ(t.layout(), layout);
      EXPECT_EQ(t.dtype(), dtype);
      HostTensor expected(dtype, Layout::bhsd, 2, 3, 5, 4);
      std::size_t n = 0;
      for (std::int64_t b = 0; b < 2; ++b)
        for (std::int64_t h = 0; h < 3; ++h)
          for (std::int64_t s = 0; s < 5; ++s)
            for (std::int64_t i = 0; i < 4; ++i) {
              expected.set(b, h, s, i, static_cast<float>(values.flat(n++)));
            }
      EXPECT_EQ(t.to_double(), expected.to_double()) << dtype_name(dtype);
    }
  }
  EXPECT_THROW(HostTensor::from_canonical(random_values({2, 3, 5}, 8), DType::f32),
               InvalidArgument);
}

TensorReport verdict(TensorId id, bool pass) {
  TensorReport t;
  t.tensor = id;
  t.rule.tensor = id;
  t.rule.pass = pass;
  return t;
}

TEST(GradientBaseline, TheCandidatesOAndLWhenBothWereJudgedAndPassed) {
  const GradientBaseline both =
      choose_gradient_baseline({verdict(TensorId::O, true), verdict(TensorId::L, true)}, "cpu");
  EXPECT_EQ(both.inputs, BackwardInputs::candidate);
  EXPECT_TRUE(both.reason.empty());

  const GradientBaseline o_failed =
      choose_gradient_baseline({verdict(TensorId::O, false), verdict(TensorId::L, true)}, "cpu");
  EXPECT_EQ(o_failed.inputs, BackwardInputs::baseline);
  EXPECT_EQ(o_failed.reason, "cpu's O failed");

  const GradientBaseline both_failed = choose_gradient_baseline(
      {verdict(TensorId::O, false), verdict(TensorId::L, false)}, "the candidate");
  EXPECT_EQ(both_failed.reason, "the candidate's O and L failed");

  const GradientBaseline only_o =
      choose_gradient_baseline({verdict(TensorId::O, true)}, "the candidate");
  EXPECT_EQ(only_o.inputs, BackwardInputs::baseline);
  EXPECT_EQ(only_o.reason, "the candidate's O and L were not both given");
  EXPECT_EQ(choose_gradient_baseline({}, "x").inputs, BackwardInputs::baseline);
}

}  // namespace
}  // namespace flashref::verify

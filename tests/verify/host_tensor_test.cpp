// Host tensors: both layouts, exact conversion to double, poison, and seeded random inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "flashref/error.hpp"
#include "flashref/verify/host_tensor.hpp"
#include "flashref/verify/problem_data.hpp"

namespace flashref::verify {
namespace {

class HostTensorLayouts : public ::testing::TestWithParam<std::tuple<DType, Layout>> {};

TEST_P(HostTensorLayouts, ValuesLandWhereTheViewSaysAndConvertExactly) {
  const auto [dtype, layout] = GetParam();
  HostTensor t(dtype, layout, 2, 3, 5, 4);
  EXPECT_EQ(t.size(), 2 * 3 * 5 * 4);
  EXPECT_EQ(t.bytes(), static_cast<std::size_t>(t.size()) * dtype_size(dtype));
  for (std::int64_t b = 0; b < 2; ++b)
    for (std::int64_t h = 0; h < 3; ++h)
      for (std::int64_t s = 0; s < 5; ++s)
        for (std::int64_t i = 0; i < 4; ++i)
          t.set(b, h, s, i, 0.1f * static_cast<float>(((b * 3 + h) * 5 + s) * 4 + i) - 3.0f);

  const TensorView v = t.view();
  const TensorView expected = layout == Layout::bhsd ? bhsd_view(t.data(), dtype, 2, 3, 5, 4)
                                                     : bshd_view(t.data(), dtype, 2, 5, 3, 4);
  EXPECT_EQ(v.batch_stride, expected.batch_stride);
  EXPECT_EQ(v.seq_stride, expected.seq_stride);
  EXPECT_EQ(v.head_stride, expected.head_stride);
  EXPECT_EQ(v.batch, 2);
  EXPECT_EQ(v.seq, 5);
  EXPECT_EQ(v.heads, 3);

  const xt::xtensor<double, 4> d = t.to_double();
  ASSERT_EQ(d.shape(0), 2u);
  ASSERT_EQ(d.shape(1), 3u);
  ASSERT_EQ(d.shape(2), 5u);
  for (std::int64_t b = 0; b < 2; ++b)
    for (std::int64_t h = 0; h < 3; ++h)
      for (std::int64_t s = 0; s < 5; ++s)
        for (std::int64_t i = 0; i < 4; ++i) {
          const float written = 0.1f * static_cast<float>(((b * 3 + h) * 5 + s) * 4 + i) - 3.0f;
          const float stored = round_to(dtype, written);
          EXPECT_EQ(t.get(b, h, s, i), stored);
          EXPECT_EQ(v.load(b, s, h, i), stored);
          EXPECT_EQ(d(b, h, s, i), static_cast<double>(stored));
        }

  const Layout other = layout == Layout::bhsd ? Layout::bshd : Layout::bhsd;
  const HostTensor moved = t.with_layout(other);
  EXPECT_EQ(moved.layout(), other);
  EXPECT_EQ(moved.to_double(), d);
}

TEST_P(HostTensorLayouts, PoisonMakesEveryElementNaN) {
  const auto [dtype, layout] = GetParam();
  HostTensor t(dtype, layout, 1, 2, 3, 5);
  EXPECT_EQ(t.get(0, 1, 2, 4), 0.0f);  // new tensors are zero
  t.fill_bytes(kPoisonByte);
  for (double x : t.to_double()) EXPECT_TRUE(std::isnan(x));
}

INSTANTIATE_TEST_SUITE_P(AllDtypes, HostTensorLayouts,
                         ::testing::Combine(::testing::Values(DType::f32, DType::f16, DType::bf16),
                                            ::testing::Values(Layout::bshd, Layout::bhsd)));

TEST(HostTensor, WithLayoutKeepsNaNPayloadBits) {
  HostTensor t(DType::bf16, Layout::bhsd, 1, 1, 2, 2);
  t.fill_bytes(0x7f);  // 0x7f7f: a bf16 NaN with a payload
  const HostTensor u = t.with_layout(Layout::bshd);
  EXPECT_EQ(std::memcmp(t.data(), u.data(), t.bytes()), 0);
}

TEST(HostTensor, LayoutNamesParseAndBadOnesNameTheOption) {
  EXPECT_EQ(parse_layout("bshd"), Layout::bshd);
  EXPECT_EQ(parse_layout(layout_name(Layout::bhsd)), Layout::bhsd);
  try {
    parse_layout("bsd");
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.field(), "--layout");
    EXPECT_NE(std::string(e.what()).find("bsd"), std::string::npos);
  }
}

TEST(ProblemData, ShapesFollowTheProblem) {
  const Problem p = make_problem(2, 6, 3, 7, 9, 5, Mask::none, DType::f16);
  const ProblemData data = make_problem_data(p, {});
  EXPECT_EQ(data.q.H(), 6);
  EXPECT_EQ(data.q.S(), 7);
  EXPECT_EQ(data.k.H(), 3);
  EXPECT_EQ(data.k.S(), 9);
  EXPECT_EQ(data.v.H(), 3);
  EXPECT_EQ(data.dO.S(), 7);
  EXPECT_EQ(data.q.dtype(), DType::f16);
  EXPECT_EQ(data.q.d(), 5);
}

TEST(ProblemData, SameSeedSameValuesInEitherLayoutAndOtherSeedsDiffer) {
  const Problem p = make_problem(1, 2, 2, 33, 17, 9, Mask::none, DType::bf16);
  InputOptions a;
  a.seed = 42;
  InputOptions b = a;
  b.layout = Layout::bhsd;
  InputOptions c = a;
  c.seed = 43;
  const ProblemData x = make_problem_data(p, a), y = make_problem_data(p, b),
                    z = make_problem_data(p, c);
  EXPECT_EQ(x.q.to_double(), y.q.to_double());
  EXPECT_EQ(x.dO.to_double(), y.dO.to_double());
  EXPECT_NE(x.q.to_double(), z.q.to_double());
  EXPECT_NE(x.q.to_double(), x.dO.to_double());  // independent streams per tensor
}

// Sample mean and standard deviation of a tensor's values.
std::pair<double, double> moments(const HostTensor& t) {
  double sum = 0.0, sum2 = 0.0;
  const auto v = t.to_double();
  for (double x : v) {
    sum += x;
    sum2 += x * x;
  }
  const double n = static_cast<double>(v.size());
  const double mean = sum / n;
  return {mean, std::sqrt(sum2 / n - mean * mean)};
}

TEST(ProblemData, ValuesAreNormalAndLargeInputsScaleQAndK) {
  const Problem p = make_problem(1, 4, 4, 256, 256, 32, Mask::none, DType::f32);
  const ProblemData normal = make_problem_data(p, {});
  InputOptions big;
  big.large = true;
  const ProblemData large = make_problem_data(p, big);
  // 32768 samples: the sample mean is within 0.03 of 0 and the deviation within 2% of 1
  // with overwhelming probability, for any seed.
  for (const HostTensor* t : {&normal.q, &normal.k, &normal.v, &normal.dO, &large.v}) {
    const auto [mean, stddev] = moments(*t);
    EXPECT_NEAR(mean, 0.0, 0.03);
    EXPECT_NEAR(stddev, 1.0, 0.02);
  }
  for (const HostTensor* t : {&large.q, &large.k}) {
    const auto [mean, stddev] = moments(*t);
    EXPECT_NEAR(mean, 0.0, 0.3);
    EXPECT_NEAR(stddev, kLargeInputStd, 0.2);
  }
}

TEST(ProblemData, SixteenBitInputsAreTheFloat32InputsRoundedToNearestEven) {
  // The same seed draws the same normal values whatever the dtype; storage rounds them.
  const Problem p32 = make_problem(1, 2, 1, 9, 11, 7, Mask::none, DType::f32);
  const ProblemData wide = make_problem_data(p32, {});
  for (DType t : {DType::f16, DType::bf16}) {
    Problem p = p32;
    p.dtype = p.grad_dtype = t;
    const ProblemData narrow = make_problem_data(p, {});
    const auto w = wide.k.to_double(), n = narrow.k.to_double();
    for (std::size_t e = 0; e < w.size(); ++e) {
      EXPECT_EQ(n.data()[e], static_cast<double>(round_to(t, static_cast<float>(w.data()[e]))));
    }
  }
}

}  // namespace
}  // namespace flashref::verify

// round_to_tf32: nearest value with 10 explicit mantissa bits, ties away from zero.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

#include "flashref/reference/tf32.hpp"

namespace flashref {
namespace {

using reference::round_to_tf32;

// Independent formulation: the two TF32 neighbours of x (truncated, and one TF32 step further
// from zero), distances measured exactly in double, the nearer one, and on a tie the larger
// magnitude.
float tf32_by_distance(float x) {
  const double step = std::ldexp(1.0, std::max(std::ilogb(x), -126) - 10);
  const double toward_zero = std::trunc(static_cast<double>(x) / step) * step;
  const double away = toward_zero + std::copysign(step, x);
  const double to_a = std::fabs(x - toward_zero), to_b = std::fabs(away - x);
  return static_cast<float>(to_b <= to_a ? away : toward_zero);
}

TEST(Tf32, RoundsToNearestWithTiesAwayFromZero) {
  const float one = 1.0f, ulp = std::ldexp(1.0f, -10);
  EXPECT_EQ(round_to_tf32(one), one);
  EXPECT_EQ(round_to_tf32(one + ulp), one + ulp);
  EXPECT_EQ(round_to_tf32(one + ulp / 2), one + ulp);        // tie: away from zero
  EXPECT_EQ(round_to_tf32(-(one + ulp / 2)), -(one + ulp));  // also for negatives
  EXPECT_EQ(round_to_tf32(std::nextafter(one + ulp / 2, 0.0f)), one);
  EXPECT_EQ(round_to_tf32(one + ulp + ulp / 2), one + 2 * ulp);  // a tie next to an odd value
  EXPECT_EQ(round_to_tf32(std::nextafter(2.0f, 0.0f)), 2.0f);    // carries into the exponent
}

TEST(Tf32, SpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(round_to_tf32(inf), inf);
  EXPECT_EQ(round_to_tf32(-inf), -inf);
  EXPECT_TRUE(std::isnan(round_to_tf32(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(std::isnan(round_to_tf32(detail::bits_float(0x7f800001u))));  // payload in low bits
  EXPECT_EQ(round_to_tf32(std::numeric_limits<float>::max()), inf);
  EXPECT_TRUE(std::signbit(round_to_tf32(-0.0f)));
  EXPECT_EQ(round_to_tf32(std::numeric_limits<float>::denorm_min()), 0.0f);
}

TEST(Tf32, AgreesWithTheIndependentFormulation) {
  std::mt19937 rng(42);
  int checked = 0;
  for (int i = 0; i < 500000; ++i) {
    const float x = detail::bits_float(rng());
    if (!std::isfinite(x) || std::fabs(x) >= std::numeric_limits<float>::max() / 2) continue;
    const float r = round_to_tf32(x);
    ASSERT_EQ(detail::float_bits(r) & 0x1fffu, 0u) << x;  // only 10 mantissa bits left
    ASSERT_EQ(r, tf32_by_distance(x)) << "x bits 0x" << std::hex << detail::float_bits(x);
    ++checked;
  }
  EXPECT_GT(checked, 400000);
}

}  // namespace
}  // namespace flashref

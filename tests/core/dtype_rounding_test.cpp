// float -> 16-bit rounding at every boundary. For each pair of adjacent finite 16-bit values
// lo < hi (in magnitude, both signs, subnormals included), their exact midpoint (a float) must
// round to whichever of the two is even, and the floats just inside the midpoint must round to
// the nearer one. Above the largest finite value, the midpoint to the next power of two is the
// overflow threshold.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "dtype_decode.hpp"
#include "flashref/dtype.hpp"

namespace flashref {
namespace {

struct Format {
  const char* name;
  std::uint16_t max_finite;  // positive largest finite pattern
  std::uint16_t infinity;    // positive infinity pattern
  int mantissa_bits;
  float (*to_float)(std::uint16_t);
  std::uint16_t (*from_float)(float);
};

const Format kBf16{"bf16", 0x7f7f, 0x7f80, 7, bf16_bits_to_float, float_to_bf16_bits};
const Format kF16{"f16", 0x7bff, 0x7c00, 10, f16_bits_to_float, float_to_f16_bits};

// A float that is exactly `x` (a double); fails the test if x is not representable.
float exact_float(double x) {
  const float f = static_cast<float>(x);
  EXPECT_EQ(static_cast<double>(f), x) << "midpoint not representable as float";
  return f;
}

void check_midpoints(const Format& f) {
  for (std::uint16_t sign : {std::uint16_t{0}, std::uint16_t{0x8000}}) {
    for (std::uint32_t m = 0; m < f.max_finite; ++m) {
      const auto lo_bits = static_cast<std::uint16_t>(sign | m);
      const auto hi_bits = static_cast<std::uint16_t>(sign | (m + 1));
      const double lo = f.to_float(lo_bits), hi = f.to_float(hi_bits);
      const float mid = exact_float((lo + hi) / 2.0);
      const std::uint16_t even = (m & 1u) == 0 ? lo_bits : hi_bits;
      ASSERT_EQ(f.from_float(mid), even) << f.name << " midpoint of 0x" << std::hex << lo_bits;
      const float below = std::nextafter(mid, static_cast<float>(lo));
      const float above = std::nextafter(mid, static_cast<float>(hi));
      ASSERT_EQ(f.from_float(below), lo_bits) << f.name << " just inside 0x" << std::hex << lo_bits;
      ASSERT_EQ(f.from_float(above), hi_bits) << f.name << " just inside 0x" << std::hex << hi_bits;
    }
  }
}

TEST(DtypeRounding, EveryBfloat16MidpointRoundsToEven) {
  check_midpoints(kBf16);
}
TEST(DtypeRounding, EveryFloat16MidpointRoundsToEven) {
  check_midpoints(kF16);
}

void check_overflow(const Format& f) {
  for (std::uint16_t sign : {std::uint16_t{0}, std::uint16_t{0x8000}}) {
    const auto max_bits = static_cast<std::uint16_t>(sign | f.max_finite);
    const auto inf_bits = static_cast<std::uint16_t>(sign | f.infinity);
    const double max = f.to_float(max_bits);
    // The value after the largest finite one would be max + one ulp, a power of two; the
    // halfway point to it is where rounding starts to overflow. The largest finite pattern
    // has an odd (all ones) mantissa, so the tie itself goes to infinity.
    const double ulp = std::ldexp(1.0, std::ilogb(max) - f.mantissa_bits);
    const float threshold = exact_float(max + std::copysign(ulp / 2.0, max));
    EXPECT_EQ(std::fabs(max) + ulp, std::ldexp(1.0, std::ilogb(max) + 1)) << f.name;
    EXPECT_EQ(f.from_float(threshold), inf_bits) << f.name;
    EXPECT_EQ(f.from_float(std::nextafter(threshold, 0.0f)), max_bits) << f.name;
    EXPECT_EQ(f.from_float(std::nextafter(threshold, static_cast<float>(max) * 2.0f)), inf_bits)
        << f.name;
    const float flt_max = std::copysign(std::numeric_limits<float>::max(), static_cast<float>(max));
    const float inf =
        std::copysign(std::numeric_limits<float>::infinity(), static_cast<float>(max));
    EXPECT_EQ(f.from_float(flt_max), inf_bits) << f.name;
    EXPECT_EQ(f.from_float(inf), inf_bits) << f.name;
  }
}

TEST(DtypeRounding, Bfloat16OverflowsToInfinityAtTheHalfwayPoint) {
  check_overflow(kBf16);
}
TEST(DtypeRounding, Float16OverflowsToInfinityAtTheHalfwayPoint) {
  check_overflow(kF16);
}

// Below half the smallest subnormal of the format, values round to a zero of their own sign.
TEST(DtypeRounding, TinyValuesRoundToSignedZero) {
  const float smallest_f16 = std::ldexp(1.0f, -24);
  for (float s : {1.0f, -1.0f}) {
    const std::uint16_t zero = s > 0 ? 0x0000 : 0x8000;
    EXPECT_EQ(float_to_f16_bits(s * std::nextafter(smallest_f16 / 2, 0.0f)), zero);
    EXPECT_EQ(float_to_f16_bits(s * std::numeric_limits<float>::denorm_min()), zero);
    EXPECT_EQ(float_to_bf16_bits(s * std::numeric_limits<float>::denorm_min()), zero);
    EXPECT_EQ(float_to_f16_bits(s * 0.0f), zero);
    EXPECT_EQ(float_to_bf16_bits(s * 0.0f), zero);
  }
}

// NaN inputs of any payload, including payloads that live only in the bits that are dropped,
// stay NaN (a naive truncation would turn 0x7f800001 into infinity).
TEST(DtypeRounding, EveryNaNStaysNaN) {
  const std::uint32_t payloads[] = {0x000001u, 0x001fffu, 0x002000u, 0x00ffffu,
                                    0x010000u, 0x3fffffu, 0x400000u, 0x7fffffu};
  for (std::uint32_t sign : {0u, 0x80000000u}) {
    for (std::uint32_t payload : payloads) {
      const float nan = detail::bits_float(sign | 0x7f800000u | payload);
      ASSERT_TRUE(std::isnan(nan));
      const std::uint16_t b = float_to_bf16_bits(nan), h = float_to_f16_bits(nan);
      EXPECT_TRUE(test::is_nan_16(b, 7)) << std::hex << payload;
      EXPECT_TRUE(test::is_nan_16(h, 10)) << std::hex << payload;
      EXPECT_EQ((b & 0x8000u) != 0, sign != 0);
      EXPECT_EQ((h & 0x8000u) != 0, sign != 0);
      EXPECT_TRUE(std::isnan(round_to(DType::bf16, nan)));
      EXPECT_TRUE(std::isnan(round_to(DType::f16, nan)));
    }
  }
}

}  // namespace
}  // namespace flashref

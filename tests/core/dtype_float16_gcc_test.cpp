// Our float16 conversions against GCC's _Float16 (IEEE binary16 in the compiler's runtime),
// over all 65536 patterns one way and millions of floats the other way.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>

#include "flashref/dtype.hpp"

namespace flashref {
namespace {

#if defined(__FLT16_MANT_DIG__)

std::uint16_t gcc_bits(float f) {
  const auto h = static_cast<_Float16>(f);
  std::uint16_t bits;
  std::memcpy(&bits, &h, sizeof bits);
  return bits;
}

float gcc_float(std::uint16_t bits) {
  _Float16 h;
  std::memcpy(&h, &bits, sizeof h);
  return static_cast<float>(h);
}

// Bit-identical to GCC except that NaN payloads may differ: then both must be NaN.
void expect_same_conversion(float f) {
  const std::uint16_t ours = float_to_f16_bits(f), theirs = gcc_bits(f);
  if (std::isnan(f)) {
    ASSERT_TRUE(std::isnan(f16_bits_to_float(ours))) << std::hex << detail::float_bits(f);
    ASSERT_TRUE(std::isnan(gcc_float(theirs)));
    return;
  }
  ASSERT_EQ(ours, theirs) << "float bits 0x" << std::hex << detail::float_bits(f) << " = " << f;
}

TEST(Float16VsGcc, AllPatternsToFloat) {
  for (std::uint32_t i = 0; i <= 0xffffu; ++i) {
    const auto bits = static_cast<std::uint16_t>(i);
    const float ours = f16_bits_to_float(bits), theirs = gcc_float(bits);
    if (std::isnan(theirs)) {
      ASSERT_TRUE(std::isnan(ours)) << std::hex << i;
      continue;
    }
    ASSERT_EQ(detail::float_bits(ours), detail::float_bits(theirs)) << std::hex << i;
  }
}

// Every float whose low 13 bits (the ones a normal float16 drops) take a value next to a
// rounding decision: exactly on it, one off either side, zero, all ones. All 2^19 high parts.
TEST(Float16VsGcc, EveryHighPartWithBoundaryLowBits) {
  const std::uint32_t low_patterns[] = {0x0000u, 0x0001u, 0x0fffu, 0x1000u, 0x1001u, 0x1fffu};
  for (std::uint32_t high = 0; high < (1u << 19); ++high) {
    for (std::uint32_t low : low_patterns)
      expect_same_conversion(detail::bits_float(high << 13 | low));
  }
}

TEST(Float16VsGcc, RandomFloats) {
  std::mt19937 rng(20250601);
  // Uniform bit patterns: every exponent equally likely, so mostly far outside float16's range.
  for (int i = 0; i < 1000000; ++i) expect_same_conversion(detail::bits_float(rng()));
  // Values around float16's range, subnormals included: exponents 2^-27 .. 2^17.
  std::uniform_int_distribution<int> exponent(-27, 17);
  std::uniform_real_distribution<float> mantissa(1.0f, 2.0f);
  for (int i = 0; i < 1000000; ++i) {
    const float f = std::ldexp(mantissa(rng), exponent(rng));
    expect_same_conversion((rng() & 1u) ? f : -f);
  }
}

#else

TEST(Float16VsGcc, Unavailable) {
  GTEST_SKIP() << "this compiler has no _Float16";
}

#endif

}  // namespace
}  // namespace flashref

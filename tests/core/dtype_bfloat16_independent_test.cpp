// Our float -> bfloat16 rounding against an independent formulation: take the two bfloat16
// values that bracket the float, measure both distances exactly in double, pick the nearer,
// and on a tie the one with an even mantissa.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>

#include "dtype_decode.hpp"
#include "flashref/dtype.hpp"

namespace flashref {
namespace {

std::uint16_t bf16_by_distance(float f) {
  const std::uint32_t u = detail::float_bits(f);
  const auto toward_zero = static_cast<std::uint16_t>(u >> 16);   // truncation: |value| <= |f|
  const auto away = static_cast<std::uint16_t>(toward_zero + 1);  // next magnitude up
  const double x = f;
  const double a = test::decode_bf16(toward_zero);
  // Past the largest finite value the next step up is infinity; for rounding, it stands at
  // the power of two that the format would have reached.
  const double b = (away & 0x7fffu) == 0x7f80u ? std::copysign(std::ldexp(1.0, 128), x)
                                               : test::decode_bf16(away);
  const double to_a = std::fabs(x - a), to_b = std::fabs(b - x);
  if (to_a < to_b) return toward_zero;
  if (to_b < to_a) return away;
  return (toward_zero & 1u) == 0 ? toward_zero : away;
}

void expect_same(float f) {
  if (std::isnan(f) || std::isinf(f)) return;  // NaN and infinity are covered elsewhere
  ASSERT_EQ(float_to_bf16_bits(f), bf16_by_distance(f))
      << "float bits 0x" << std::hex << detail::float_bits(f) << " = " << f;
}

// All 2^16 high halves, with the low half on, next to and far from the rounding decision.
TEST(Bfloat16Independent, EveryHighHalfWithBoundaryLowBits) {
  const std::uint32_t low_patterns[] = {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu};
  for (std::uint32_t high = 0; high <= 0xffffu; ++high) {
    for (std::uint32_t low : low_patterns) expect_same(detail::bits_float(high << 16 | low));
  }
}

TEST(Bfloat16Independent, RandomFloats) {
  std::mt19937 rng(7);
  for (int i = 0; i < 2000000; ++i) expect_same(detail::bits_float(rng()));
}

}  // namespace
}  // namespace flashref

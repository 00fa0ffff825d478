// Every one of the 65536 bfloat16 and float16 bit patterns: 16-bit -> float is exact (checked
// against an independent decoder), and float -> 16-bit gives the pattern back. NaN stays NaN
// with its sign; quiet NaNs come back bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

#include "dtype_decode.hpp"
#include "flashref/dtype.hpp"

namespace flashref {
namespace {

using test::decode_bf16;
using test::decode_f16;
using test::is_nan_16;

struct Format {
  const char* name;
  int mantissa_bits;
  std::uint16_t quiet_bit;
  float (*to_float)(std::uint16_t);
  std::uint16_t (*from_float)(float);
  double (*decode)(std::uint16_t);
};

const Format kBf16{"bf16", 7, 0x0040, bf16_bits_to_float, float_to_bf16_bits, decode_bf16};
const Format kF16{"f16", 10, 0x0200, f16_bits_to_float, float_to_f16_bits, decode_f16};

void check_all_patterns(const Format& f) {
  int nan_patterns = 0, subnormal_patterns = 0, infinities = 0;
  for (std::uint32_t i = 0; i <= 0xffffu; ++i) {
    const auto bits = static_cast<std::uint16_t>(i);
    const float x = f.to_float(bits);
    const bool negative = (bits & 0x8000u) != 0;
    SCOPED_TRACE(::testing::Message() << f.name << " pattern 0x" << std::hex << i);
    if (is_nan_16(bits, f.mantissa_bits)) {
      ++nan_patterns;
      ASSERT_TRUE(std::isnan(x));
      ASSERT_EQ(std::signbit(x), negative);
      const std::uint16_t back = f.from_float(x);
      ASSERT_TRUE(is_nan_16(back, f.mantissa_bits));
      ASSERT_EQ((back & 0x8000u) != 0, negative);
      // A quiet NaN's payload survives; a signalling one comes back quieted.
      ASSERT_NE(back & f.quiet_bit, 0);
      if ((bits & f.quiet_bit) != 0) {
        ASSERT_EQ(back, bits);
      }
      continue;
    }
    const double expected = f.decode(bits);
    ASSERT_EQ(static_cast<double>(x), expected);
    ASSERT_EQ(std::signbit(x), negative);  // distinguishes -0 from +0
    if (std::isinf(x)) ++infinities;
    if (x != 0.0f &&
        std::fabs(expected) < f.decode(static_cast<std::uint16_t>(1u << f.mantissa_bits)))
      ++subnormal_patterns;
    ASSERT_EQ(f.from_float(x), bits);
  }
  // The format's census: 2 infinities, 2 * (2^m - 1) NaN mantissas, 2 * (2^m - 1) subnormals.
  const int per_sign = (1 << f.mantissa_bits) - 1;
  EXPECT_EQ(infinities, 2);
  EXPECT_EQ(nan_patterns, 2 * per_sign);
  EXPECT_EQ(subnormal_patterns, 2 * per_sign);
}

TEST(DtypeRoundTrip, AllBfloat16Patterns) {
  check_all_patterns(kBf16);
}
TEST(DtypeRoundTrip, AllFloat16Patterns) {
  check_all_patterns(kF16);
}

// The storage structs, load_as_float/store_from_float and round_to agree with the bit functions
// on every pattern.
TEST(DtypeRoundTrip, StorageTypesAndBufferAccessAgree) {
  for (std::uint32_t i = 0; i <= 0xffffu; ++i) {
    const auto bits = static_cast<std::uint16_t>(i);
    const float b = bf16_bits_to_float(bits), h = f16_bits_to_float(bits);
    ASSERT_EQ(detail::float_bits(static_cast<float>(bfloat16::from_bits(bits))),
              detail::float_bits(b));
    ASSERT_EQ(detail::float_bits(static_cast<float>(float16::from_bits(bits))),
              detail::float_bits(h));
    const std::uint16_t buffer[2] = {0, bits};
    ASSERT_EQ(detail::float_bits(load_as_float(buffer, DType::bf16, 1)), detail::float_bits(b));
    ASSERT_EQ(detail::float_bits(load_as_float(buffer, DType::f16, 1)), detail::float_bits(h));
    if (std::isnan(b) || std::isnan(h)) continue;
    ASSERT_EQ(bfloat16(b).bits, bits);
    ASSERT_EQ(float16(h).bits, bits);
    std::uint16_t out[2] = {0x1234, 0x1234};
    store_from_float(out, DType::bf16, 1, b);
    ASSERT_EQ(out[0], 0x1234);  // only element 1 is written
    ASSERT_EQ(out[1], bits);
    store_from_float(out, DType::f16, 1, h);
    ASSERT_EQ(out[1], bits);
    ASSERT_EQ(detail::float_bits(round_to(DType::bf16, b)), detail::float_bits(b));
    ASSERT_EQ(detail::float_bits(round_to(DType::f16, h)), detail::float_bits(h));
  }
}

TEST(DtypeRoundTrip, Float32BufferAccessIsExact) {
  const float values[] = {0.0f, -0.0f, 1.0f / 3.0f, -7.25e-39f, 3.4e38f, INFINITY, -INFINITY};
  for (float v : values) {
    float buffer[3] = {1.0f, 1.0f, 1.0f};
    store_from_float(buffer, DType::f32, 2, v);
    EXPECT_EQ(buffer[1], 1.0f);
    EXPECT_EQ(detail::float_bits(load_as_float(buffer, DType::f32, 2)), detail::float_bits(v));
    EXPECT_EQ(detail::float_bits(round_to(DType::f32, v)), detail::float_bits(v));
  }
}

}  // namespace
}  // namespace flashref

// Names, sizes, parsing and rounding_step() of the dtypes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>

#include "flashref/dtype.hpp"
#include "flashref/error.hpp"

namespace flashref {
namespace {

TEST(DtypeNames, SizesAndMantissas) {
  EXPECT_EQ(dtype_size(DType::f32), sizeof(float));
  EXPECT_EQ(dtype_size(DType::f16), sizeof(float16));
  EXPECT_EQ(dtype_size(DType::bf16), sizeof(bfloat16));
  EXPECT_EQ(mantissa_bits(DType::f32), std::numeric_limits<float>::digits - 1);
  EXPECT_EQ(mantissa_bits(DType::f16), 10);
  EXPECT_EQ(mantissa_bits(DType::bf16), 7);
}

TEST(DtypeNames, ParseEverySpellingAndRoundTripNames) {
  for (const char* s : {"f32", "float32", "fp32"}) EXPECT_EQ(parse_dtype(s), DType::f32) << s;
  for (const char* s : {"f16", "float16", "fp16"}) EXPECT_EQ(parse_dtype(s), DType::f16) << s;
  for (const char* s : {"bf16", "bfloat16"}) EXPECT_EQ(parse_dtype(s), DType::bf16) << s;
  for (DType t : {DType::f32, DType::f16, DType::bf16}) EXPECT_EQ(parse_dtype(dtype_name(t)), t);
  EXPECT_EQ(dtype_name(DType::bf16), "bf16");
}

TEST(DtypeNames, ParseErrorNamesTheFieldTheValueAndTheChoices) {
  for (const char* bad : {"f64", "", "BF16", "half"}) {
    try {
      parse_dtype(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const InvalidArgument& e) {
      EXPECT_EQ(e.field(), "--dtype");
      const std::string what = e.what();
      EXPECT_NE(what.find("'" + std::string(bad) + "'"), std::string::npos) << what;
      for (const char* choice : {"f32", "f16", "bf16"})
        EXPECT_NE(what.find(choice), std::string::npos);
    }
  }
}

// rounding_step(t, x) is the gap from x to the next representable value above it: checked
// against the actual next value for every finite non-negative 16-bit value (subnormals, where
// the step is the smallest normal's, included) and for random float32 values.
TEST(RoundingStep, EqualsTheGapToTheNextValueForEvery16BitValue) {
  struct Case {
    DType t;
    std::uint16_t max_finite;
    float (*to_float)(std::uint16_t);
  };
  for (const Case& c : {Case{DType::f16, 0x7bff, f16_bits_to_float},
                        Case{DType::bf16, 0x7f7f, bf16_bits_to_float}}) {
    for (std::uint32_t h = 0; h < c.max_finite; ++h) {
      const double x = c.to_float(static_cast<std::uint16_t>(h));
      const double next = c.to_float(static_cast<std::uint16_t>(h + 1));
      ASSERT_EQ(rounding_step(c.t, x), next - x) << dtype_name(c.t) << " at " << x;
      ASSERT_EQ(rounding_step(c.t, -x), next - x) << "the step is symmetric in sign";
    }
  }
}

TEST(RoundingStep, EqualsTheGapToTheNextValueForRandomFloat32) {
  std::mt19937 rng(3);
  for (int i = 0; i < 200000; ++i) {
    const float x = std::fabs(detail::bits_float(rng()));
    if (!std::isfinite(x) || x == std::numeric_limits<float>::max()) continue;
    const float next = std::nextafter(x, std::numeric_limits<float>::infinity());
    ASSERT_EQ(rounding_step(DType::f32, x), static_cast<double>(next) - x) << x;
  }
  EXPECT_EQ(rounding_step(DType::f32, 0.0),
            static_cast<double>(std::numeric_limits<float>::denorm_min()));
}

// Values between representable ones: the step is that of the binade they fall in.
TEST(RoundingStep, AtValuesThatAreNotRepresentable) {
  EXPECT_EQ(rounding_step(DType::bf16, 1.0 / 3.0), std::ldexp(1.0, -2 - 7));
  EXPECT_EQ(rounding_step(DType::f16, 1000.5), std::ldexp(1.0, 9 - 10));
  EXPECT_EQ(rounding_step(DType::f32, 1e-40), std::ldexp(1.0, -149));
}

}  // namespace
}  // namespace flashref

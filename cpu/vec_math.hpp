// Scalar float functions written without branches or library calls, so that a loop calling
// them vectorizes: exp, rounding to bfloat16/float16 precision, and float16 decoding.
//
// They are `static inline` on purpose: the kernel files are compiled once per instruction set
// (kernels_*.cpp), and internal linkage keeps each compilation's copy apart (a shared inline
// definition could let the linker hand AVX-512 code to a CPU without it).
#pragma once

#include <bit>
#include <cstdint>
#include <limits>

namespace flashref::cpu::detail {

// exp(x) in float32 within 2 ulp for x in [-87.3, 88.72], with gradual underflow below:
// results under FLT_MIN are subnormals rounded once, as a correctly rounded exp gives them,
// down to 0 below -104 (where exp(x) < 2^-150, half the smallest subnormal); +inf above
// ln(FLT_MAX); NaN stays NaN. Subnormal P matter when a whole gradient is that small (a
// softmax so peaked that every off-peak P is below FLT_MIN): flushing them made dQ exactly 0
// where the gold and the baseline (std::exp) have 1e-37. Range reduction exp(x) = 2^n e^r
// with n = round(x / ln 2), r = x - n ln 2 split in two parts (Cody and Waite) so that
// n * ln2_hi is exact; e^r by its Taylor series to degree 7, whose truncation error on
// |r| <= ln(2)/2 is below 1e-8 relative. 2^n is applied as 2^n1 * 2^n2 with n1 = floor(n / 2),
// both factors normal for n in [-150, 128]: the first product is exact and only the second
// rounds. Outside [-104, 88.72] the arithmetic produces garbage (or NaN, for infinite x) that
// the two final selects replace; clamping the input instead would cost two more selects.
static inline float exp_f32(float x) {
  constexpr float kLow = -104.0f;
  constexpr float kHigh = 88.72283f;  // ln(FLT_MAX), rounded down
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693145751953125f;  // 14 significant bits
  constexpr float kLn2Lo = 1.42860682030941723212e-6f;
  constexpr float kRoundToInt = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float t = x * kLog2e + kRoundToInt;
  const float n = t - kRoundToInt;
  const std::int32_t n_int = static_cast<std::int32_t>(std::bit_cast<std::uint32_t>(t) -
                                                       std::bit_cast<std::uint32_t>(kRoundToInt));
  float r = x - n * kLn2Hi;
  r = r - n * kLn2Lo;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const std::int32_t n1 = n_int >> 1;  // arithmetic shift: floor(n / 2)
  const std::int32_t n2 = n_int - n1;
  const float two_n1 = std::bit_cast<float>(static_cast<std::uint32_t>(n1 + 127) << 23);
  const float two_n2 = std::bit_cast<float>(static_cast<std::uint32_t>(n2 + 127) << 23);
  float y = p * two_n1 * two_n2;
  y = x < kLow ? 0.0f : y;  // comparisons are false for NaN, which passes through
  y = x > kHigh ? std::numeric_limits<float>::infinity() : y;
  return y;
}

// x rounded to the nearest bfloat16 value (ties to even), as a float. Same results as
// flashref::round_to(DType::bf16, x) for every float (NaN stays NaN).
static inline float round_bf16(float x) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(x);
  const std::uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  // A NaN's payload could carry into the exponent: keep the NaN as it is.
  return (u & 0x7fffffffu) > 0x7f800000u ? x : std::bit_cast<float>(rounded);
}

// x rounded to the nearest float16 value (ties to even, subnormals included, overflow to
// infinity), as a float. Same results as flashref::round_to(DType::f16, x) (NaN stays NaN).
static inline float round_f16(float x) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(x);
  const std::uint32_t sign = u & 0x80000000u;
  const std::uint32_t a = u & 0x7fffffffu;
  // Normal float16 range: keep 10 of the 23 mantissa bits.
  const std::uint32_t normal = (a + 0x0fffu + ((a >> 13) & 1u)) & 0xffffe000u;
  // Below 2^-14 float16 is fixed point with step 2^-24, the ulp of floats in [0.5, 1): adding
  // and subtracting 0.75 rounds to that step.
  const float tiny = (std::bit_cast<float>(a) + 0.75f) - 0.75f;
  std::uint32_t mag = a < 0x38800000u ? std::bit_cast<std::uint32_t>(tiny) : normal;
  mag = a >= 0x477ff000u ? 0x7f800000u : mag;  // 65520 and up round to infinity
  return a > 0x7f800000u ? x : std::bit_cast<float>(sign | mag);
}

// float16 bits to float, exactly (same as flashref::f16_bits_to_float).
static inline float f16_to_f32(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t em = h & 0x7fffu;
  const std::uint32_t normal = (em << 13) + 0x38000000u;  // exponent bias 15 -> 127
  const std::uint32_t inf_nan = (em << 13) | 0x7f800000u;
  const float subnormal = static_cast<float>(static_cast<std::int32_t>(em)) * 0x1p-24f;
  std::uint32_t mag = em >= 0x0400u ? normal : std::bit_cast<std::uint32_t>(subnormal);
  mag = em >= 0x7c00u ? inf_nan : mag;
  return std::bit_cast<float>(sign | mag);
}

static inline float bf16_to_f32(std::uint16_t h) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(h) << 16);
}

}  // namespace flashref::cpu::detail

// Independent decoders of the 16-bit formats, written from the IEEE-754 field definitions
// (sign, biased exponent, mantissa) with ldexp, not with the bit tricks core/ uses.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

namespace flashref::test {

// Value of a 16-bit pattern with `exponent_bits` and `mantissa_bits` fields, as a double.
// NaN for NaN patterns (the payload is not part of the value).
inline double decode_16(std::uint16_t bits, int exponent_bits, int mantissa_bits) {
  const int bias = (1 << (exponent_bits - 1)) - 1;
  const bool negative = (bits >> 15) != 0;
  const int exponent = (bits >> mantissa_bits) & ((1 << exponent_bits) - 1);
  const int mantissa = bits & ((1 << mantissa_bits) - 1);
  double magnitude;
  if (exponent == (1 << exponent_bits) - 1) {
    magnitude = mantissa == 0 ? std::numeric_limits<double>::infinity()
                              : std::numeric_limits<double>::quiet_NaN();
  } else if (exponent == 0) {
    magnitude = std::ldexp(static_cast<double>(mantissa), 1 - bias - mantissa_bits);
  } else {
    magnitude = std::ldexp(static_cast<double>(mantissa + (1 << mantissa_bits)),
                           exponent - bias - mantissa_bits);
  }
  return negative ? -magnitude : magnitude;
}

inline double decode_f16(std::uint16_t bits) {
  return decode_16(bits, 5, 10);
}
inline double decode_bf16(std::uint16_t bits) {
  return decode_16(bits, 8, 7);
}

inline bool is_nan_16(std::uint16_t bits, int mantissa_bits) {
  const std::uint16_t exponent_mask =
      static_cast<std::uint16_t>(0x7fffu >> mantissa_bits << mantissa_bits);
  const std::uint16_t mantissa_mask = static_cast<std::uint16_t>((1u << mantissa_bits) - 1u);
  return (bits & exponent_mask) == exponent_mask && (bits & mantissa_mask) != 0;
}

}  // namespace flashref::test

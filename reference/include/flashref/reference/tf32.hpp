// TF32: the operand format of NVIDIA tensor cores for float32 matmuls (8-bit exponent, 10
// explicit mantissa bits). The baseline uses it to model a kernel run with allow_tf32.
#pragma once

#include <cstdint>

#include "flashref/dtype.hpp"

namespace flashref::reference {

// Rounds a float to the nearest TF32 value, ties away from zero, as PTX's
// cvt.rna.tf32.f32 does. The result is a float whose low 13 mantissa bits are zero.
// Infinities and NaN pass through; a finite value may round up to infinity.
inline float round_to_tf32(float x) {
  std::uint32_t u = detail::float_bits(x);
  if ((u & 0x7f800000u) == 0x7f800000u) return x;
  // Adding half of the dropped 13 bits to the magnitude and truncating rounds to nearest with
  // ties away from zero; a carry out of the mantissa correctly bumps the exponent.
  u += 0x1000u;
  u &= 0xffffe000u;
  return detail::bits_float(u);
}

// Drops the low 13 mantissa bits (rounds toward zero): what a tensor core does with a float32
// operand that was not converted first (PTX mma's .tf32 operands ignore those bits), so what a
// Triton tl.dot in TF32 does by default.
inline float truncate_to_tf32(float x) {
  std::uint32_t u = detail::float_bits(x);
  if ((u & 0x7f800000u) == 0x7f800000u) return x;
  return detail::bits_float(u & 0xffffe000u);
}

}  // namespace flashref::reference

#include "flashref/dtype.hpp"

#include <cmath>

#include "flashref/error.hpp"

namespace flashref {

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
  }
  return "?";
}

DType parse_dtype(std::string_view s) {
  if (s == "f32" || s == "float32" || s == "fp32") return DType::f32;
  if (s == "f16" || s == "float16" || s == "fp16") return DType::f16;
  if (s == "bf16" || s == "bfloat16") return DType::bf16;
  throw InvalidArgument("--dtype", "unknown dtype '" + std::string(s) + "' (expected f32, f16 or bf16)");
}

std::uint16_t float_to_f16_bits(float f) {
  const std::uint32_t u = detail::float_bits(f);
  const std::uint16_t sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  const std::uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));
  if (abs >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // rounds to inf
  if (abs >= 0x38800000u) {
    // Normal in binary16: rebias the exponent (127 -> 15) and round the 13 dropped bits to even.
    std::uint32_t r = abs - 0x38000000u;
    r += 0x0fffu + ((r >> 13) & 1u);
    return static_cast<std::uint16_t>(sign | (r >> 13));
  }
  if (abs < 0x33000000u) return sign;  // below half the smallest subnormal (2^-25): +-0
  // Subnormal in binary16: value = m * 2^-24 with m = round(mantissa_with_hidden_bit >> shift).
  const std::uint32_t exponent = abs >> 23;
  const std::uint32_t mantissa = (abs & 0x7fffffu) | 0x800000u;
  const std::uint32_t shift = 126u - exponent;  // 14..24 for exponents 112..102
  const std::uint32_t kept = mantissa >> shift;
  const std::uint32_t rest = mantissa & ((1u << shift) - 1u);
  const std::uint32_t half = 1u << (shift - 1u);
  const std::uint32_t rounded = kept + ((rest > half || (rest == half && (kept & 1u))) ? 1u : 0u);
  return static_cast<std::uint16_t>(sign | rounded);
}

float f16_bits_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1fu;
  const std::uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1fu) return detail::bits_float(sign | 0x7f800000u | (mantissa << 13));
  if (exponent != 0) return detail::bits_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
  // Zero or subnormal: exactly mantissa * 2^-24, which float represents.
  const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
  return sign ? -magnitude : magnitude;
}

double rounding_step(DType t, double x) {
  const int min_exponent = t == DType::f16 ? -14 : -126;
  int e = min_exponent;
  if (std::isfinite(x) && x != 0.0) {
    const int ex = std::ilogb(std::fabs(x));
    if (ex > e) e = ex;
  }
  return std::ldexp(1.0, e - mantissa_bits(t));
}

}  // namespace flashref

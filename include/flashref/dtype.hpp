// Element types of Q, K, V, O, dO, dQ, dK, dV, and the 16-bit storage types the CPU uses.
//
// bfloat16 and float16 here are storage only: arithmetic happens in float (or double in the
// gold reference) after conversion. float -> 16-bit conversion rounds to nearest, ties to even,
// the same as CUDA's __float2bfloat16_rn / __float2half_rn; NaN stays NaN (quiet), infinities
// stay infinite, float16 subnormals are produced and read exactly.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace flashref {

enum class DType : std::uint8_t { f32, f16, bf16 };

// Size in bytes of one element.
constexpr std::size_t dtype_size(DType t) { return t == DType::f32 ? 4 : 2; }

// Short names used on the command line and in reports: "f32", "f16", "bf16".
std::string_view dtype_name(DType t);

// Parses "f32"/"float32", "f16"/"float16"/"fp16", "bf16"/"bfloat16"; throws InvalidArgument.
DType parse_dtype(std::string_view s);

namespace detail {
inline std::uint32_t float_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
inline float bits_float(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
}  // namespace detail

// Round-to-nearest-even float -> bfloat16 bits.
inline std::uint16_t float_to_bf16_bits(float f) {
  std::uint32_t u = detail::float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x0040u);
  // Adding 0x7fff plus the lowest kept bit rounds half to even; an overflow of the mantissa
  // carries into the exponent, which is exactly the right rounding (up to infinity included).
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}

inline float bf16_bits_to_float(std::uint16_t h) {
  return detail::bits_float(static_cast<std::uint32_t>(h) << 16);
}

// Round-to-nearest-even float -> IEEE binary16 bits, subnormals included.
std::uint16_t float_to_f16_bits(float f);
float f16_bits_to_float(std::uint16_t h);

struct bfloat16 {
  std::uint16_t bits;
  bfloat16() = default;
  explicit bfloat16(float f) : bits(float_to_bf16_bits(f)) {}
  static bfloat16 from_bits(std::uint16_t b) {
    bfloat16 x;
    x.bits = b;
    return x;
  }
  explicit operator float() const { return bf16_bits_to_float(bits); }
};

struct float16 {
  std::uint16_t bits;
  float16() = default;
  explicit float16(float f) : bits(float_to_f16_bits(f)) {}
  static float16 from_bits(std::uint16_t b) {
    float16 x;
    x.bits = b;
    return x;
  }
  explicit operator float() const { return f16_bits_to_float(bits); }
};

static_assert(sizeof(bfloat16) == 2 && sizeof(float16) == 2);

// Reads element `i` of a buffer of dtype `t` as float (exact for every dtype).
inline float load_as_float(const void* p, DType t, std::int64_t i) {
  switch (t) {
    case DType::f32: return static_cast<const float*>(p)[i];
    case DType::f16: return f16_bits_to_float(static_cast<const std::uint16_t*>(p)[i]);
    case DType::bf16: return bf16_bits_to_float(static_cast<const std::uint16_t*>(p)[i]);
  }
  return 0.0f;
}

// Writes `v` rounded (to nearest even) to dtype `t` at element `i`.
inline void store_from_float(void* p, DType t, std::int64_t i, float v) {
  switch (t) {
    case DType::f32: static_cast<float*>(p)[i] = v; return;
    case DType::f16: static_cast<std::uint16_t*>(p)[i] = float_to_f16_bits(v); return;
    case DType::bf16: static_cast<std::uint16_t*>(p)[i] = float_to_bf16_bits(v); return;
  }
}

// Rounds a float to the nearest value representable in dtype `t` (identity for f32).
inline float round_to(DType t, float v) {
  switch (t) {
    case DType::f32: return v;
    case DType::f16: return f16_bits_to_float(float_to_f16_bits(v));
    case DType::bf16: return bf16_bits_to_float(float_to_bf16_bits(v));
  }
  return v;
}

// Number of explicit mantissa bits: 23 (f32), 10 (f16), 7 (bf16).
constexpr int mantissa_bits(DType t) { return t == DType::f32 ? 23 : (t == DType::f16 ? 10 : 7); }

// One rounding step of dtype `t` at magnitude `x`: the gap between consecutive representable
// numbers around |x| (the ulp), never less than the ulp of the smallest normal number.
// The verification floor is "twice one rounding step at the tensor's largest gold magnitude".
double rounding_step(DType t, double x);

}  // namespace flashref

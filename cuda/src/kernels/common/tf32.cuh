// TF32 roundings shared by the tensor-core float32 paths (kernels/sm80's TF32 and 3xTF32
// operand policies, kernels/sm90's 3xTF32 forward).
#pragma once

#include <cstdint>

namespace flashref::cuda::kernels {

// The float rounded to TF32 (low 13 mantissa bits zero), as the bits an mma operand takes.
__device__ __forceinline__ uint32_t to_tf32(float x) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return r;
}

// TF32's largest finite magnitude (0x7F7FE000): x within 2^-12 of float32's largest rounds past
// it, to infinity.
inline constexpr float kTf32Max = 0x1.ffcp127f;

// x (float32 bits) as the 3xTF32 pair big = tf32(x), small = tf32(x - big); x - big is exact
// in float32, so big + small carries 22 of x's 24 significant bits. big is clamped to kTf32Max,
// so that such an x still splits into finite halves: unclamped, big was infinite and small NaN,
// and a product that took them with P = 0 (a masked key's V) came out NaN where the FMA kernels'
// is finite (CudaFloat32Extremes on sm80_3xtf32, run 35c). The clamp leaves every other x's
// halves as they were; an infinite or NaN x still reaches the products through small.
__device__ __forceinline__ void split_tf32(uint32_t& big, uint32_t& small, uint32_t x) {
  const float f = __uint_as_float(x);
  const float b = fminf(fmaxf(__uint_as_float(to_tf32(f)), -kTf32Max), kTf32Max);
  big = __float_as_uint(b);
  small = to_tf32(f - b);
}

// The same halves for a wgmma operand, in three instructions: big rounded to nearest with ties
// away, as cvt.rna rounds a finite value, by integer arithmetic on the bits, and small = x - big
// left as float32 (exact), which the tensor core reads as TF32 by dropping its low 13 bits: an
// error of at most 2^-11 of small, itself at most 2^-12 of x (dev/f32/three_tf32.py's `rnat`).
// For |x| below float32's largest value less 2^-12 of it (P~ in [0, 1], for one): above, the
// rounding carries into the exponent, and big is infinite.
__device__ __forceinline__ void split_tf32_raw_small(uint32_t& big, uint32_t& small, uint32_t x) {
  big = (x + 0x1000u) & 0xFFFFE000u;
  small = __float_as_uint(__uint_as_float(x) - __uint_as_float(big));
}

// The same for any float32 x, in five: big clamped to TF32's largest finite magnitude, so that
// x within 2^-12 of float32's largest value (whose rounding carries into the exponent) still
// splits exactly, big + small = x, where an infinite big and a NaN small would give a NaN output
// where the FMA kernels give a finite one. An infinite or NaN x still reaches the products,
// through small (inf - big, NaN).
__device__ __forceinline__ void split_tf32_raw_small_finite(uint32_t& big, uint32_t& small,
                                                            uint32_t x) {
  const float rounded = __uint_as_float((x + 0x1000u) & 0xFFFFE000u);
  const float b = fminf(fmaxf(rounded, -kTf32Max), kTf32Max);
  big = __float_as_uint(b);
  small = __float_as_uint(__uint_as_float(x) - b);
}

// The same halves as split_tf32_raw_small_finite (big = x rounded to TF32, ties away, and
// saturated to TF32's largest finite magnitude), with big from one conversion
// (cvt.rna.satfinite.tf32.f32, sm_90) in place of the integer rounding and the two clamps.
__device__ __forceinline__ void split_tf32_satfinite(uint32_t& big, uint32_t& small, uint32_t x) {
  asm("cvt.rna.satfinite.tf32.f32 %0, %1;\n" : "=r"(big) : "f"(__uint_as_float(x)));
  small = __float_as_uint(__uint_as_float(x) - __uint_as_float(big));
}

// The same for any float32 x, in two: big truncated to TF32 (x's low 13 bits dropped, as a
// tf32 wgmma reads a raw float32 tile), small = x - big (exact, and of x's sign) left for the
// tensor core to truncate in turn. Truncation cannot carry into the exponent, so a finite x
// always gives a finite big, with no clamp; small is then up to one TF32 ulp of x rather than
// half of one, and the error of the pair up to 2^-21 of x rather than 2^-22
// (dev/f32/three_tf32.py's `trunc` halves).
__device__ __forceinline__ void split_tf32_trunc(uint32_t& big, uint32_t& small, uint32_t x) {
  big = x & 0xFFFFE000u;
  small = __float_as_uint(__uint_as_float(x) - __uint_as_float(big));
}

}  // namespace flashref::cuda::kernels

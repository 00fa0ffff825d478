// The baseline: naive attention computed the way a real low-precision kernel computes it.
// The "reference" backend (backend.hpp) is these two functions behind the Backend interface.
#pragma once

#include <cstddef>

#include <xtensor/xtensor.hpp>

#include "flashref/params.hpp"
#include "flashref/reference/tf32.hpp"

namespace flashref::reference {

// How a value is rounded before it enters a matmul: a kernel stores P and dS in the input
// dtype before feeding them to its tensor cores, and float32 tensor-core matmuls (TF32) keep
// only 10 mantissa bits of each operand.
struct OperandRounding {
  DType dtype = DType::f32;
  bool tf32 = false;  // only for f32 inputs with options.allow_tf32

  OperandRounding(DType dtype_, bool allow_tf32)
      : dtype(dtype_), tf32(allow_tf32 && dtype_ == DType::f32) {}
  float operator()(float x) const {
    const float stored = round_to(dtype, x);
    return tf32 ? round_to_tf32(stored) : stored;
  }
  template <std::size_t N>
  void apply(xt::xtensor<float, N>& t) const {
    for (float& x : t) x = (*this)(x);
  }
};

// Writes O and L. Validates first; writes nothing on error.
void baseline_forward(const ForwardParams& params);
// Writes dQ, dK, dV by eq. (13)-(19), reading params.o (for D) and params.lse (for P) as the
// forward stored them. Validates first; writes nothing on error.
void baseline_backward(const BackwardParams& params);

}  // namespace flashref::reference

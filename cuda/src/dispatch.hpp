// Run-time values -> compile-time template arguments: the one place the cuda backend turns a
// problem's dtype and head dim into a kernel instantiation, with small switch macros in the
// style of FlashAttention-2's static_switch.h. Each macro runs its last argument (a lambda
// body) with the chosen value bound to a constexpr name or a type alias.
//
// Float32 inputs choose between two kernel families by ExecutionOptions::allow_tf32: the
// exact FFMA kernels (the default) or the TF32 tensor-core kernels, whose head dims stop at
// kMaxTf32HeadDim (configs.hpp says why 256 is not compiled).
//
// The arch is the last run-time value: sm_80 and sm_90 both run the mma.sync kernels
// (the only path today, compiled for both); a Hopper wgmma path would be selected here.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "flashref/dtype.hpp"

namespace flashref::cuda {

// The head dims the kernels are compiled for; d runs on the smallest one >= d.
inline constexpr int kCompiledHeadDims[] = {32, 64, 128, 256};

constexpr int compiled_head_dim(long long d) {
  for (int c : kCompiledHeadDims)
    if (d <= c) return c;
  return 0;  // above 256: no kernel
}

// The largest head dim the TF32 kernels are compiled for (32, 64, 128).
inline constexpr int kMaxTf32HeadDim = 128;

}  // namespace flashref::cuda

// HEADDIM_SWITCH(d, kD, body): kD = compiled_head_dim(d) as a constexpr int.
#define FLASHREF_HEADDIM_SWITCH(d, kD, ...) \
  [&] {                                     \
    if ((d) <= 32) {                        \
      constexpr int kD = 32;                \
      return __VA_ARGS__();                 \
    } else if ((d) <= 64) {                 \
      constexpr int kD = 64;                \
      return __VA_ARGS__();                 \
    } else if ((d) <= 128) {                \
      constexpr int kD = 128;               \
      return __VA_ARGS__();                 \
    } else {                                \
      constexpr int kD = 256;               \
      return __VA_ARGS__();                 \
    }                                       \
  }()

// FP16_SWITCH(dtype, Element, body): Element = __nv_bfloat16 or __half (dtype is not f32).
#define FLASHREF_FP16_SWITCH(dtype, Element, ...) \
  [&] {                                           \
    if ((dtype) == ::flashref::DType::bf16) {     \
      using Element = __nv_bfloat16;              \
      return __VA_ARGS__();                       \
    } else {                                      \
      using Element = __half;                     \
      return __VA_ARGS__();                       \
    }                                             \
  }()

// TF32_HEADDIM_SWITCH(d, kD, body): the same for the TF32 kernels (d <= kMaxTf32HeadDim; the
// backend refuses larger d before dispatching).
#define FLASHREF_TF32_HEADDIM_SWITCH(d, kD, ...) \
  [&] {                                          \
    if ((d) <= 32) {                             \
      constexpr int kD = 32;                     \
      return __VA_ARGS__();                      \
    } else if ((d) <= 64) {                      \
      constexpr int kD = 64;                     \
      return __VA_ARGS__();                      \
    } else {                                     \
      constexpr int kD = 128;                    \
      return __VA_ARGS__();                      \
    }                                            \
  }()

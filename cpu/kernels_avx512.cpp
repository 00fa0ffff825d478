// The tile kernels for AVX-512 (F, VL, BW, DQ) with FMA: 16-float vectors, register blocks of
// 4 rows x 64 columns (16 of the 32 vector registers hold C).
#include <bit>
#include <cstdint>
#include <cstring>
#include <limits>

#include "kernels.hpp"

#if defined(__x86_64__) && defined(__GNUC__)
#pragma GCC push_options
#pragma GCC target("avx512f,avx512vl,avx512bw,avx512dq,avx2,fma")
#define FLASHREF_KERNEL_W 16
#define FLASHREF_KERNEL_R 4
#define FLASHREF_KERNEL_FMA 1
#define FLASHREF_KERNEL_NV 4
#include "kernels_body.inc"
#pragma GCC pop_options

// Compiled for the default target: callable before the CPU has been checked.
const flashref::cpu::detail::Kernels* flashref::cpu::detail::kernels_avx512() {
  return &kTable;
}
#else
const flashref::cpu::detail::Kernels* flashref::cpu::detail::kernels_avx512() {
  return nullptr;
}
#endif

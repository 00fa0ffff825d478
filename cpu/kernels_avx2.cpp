// The tile kernels for AVX2 with FMA: 8-float vectors, register blocks of 4 rows x 16 columns
// (8 of the 16 vector registers hold C).
#include <bit>
#include <cstdint>
#include <cstring>
#include <limits>

#include "kernels.hpp"

#if defined(__x86_64__) && defined(__GNUC__)
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#define FLASHREF_KERNEL_W 8
#define FLASHREF_KERNEL_R 4
#define FLASHREF_KERNEL_FMA 1
#define FLASHREF_KERNEL_NV 2
#include "kernels_body.inc"
#pragma GCC pop_options

// Compiled for the default target: callable before the CPU has been checked.
const flashref::cpu::detail::Kernels* flashref::cpu::detail::kernels_avx2() {
  return &kTable;
}
#else
const flashref::cpu::detail::Kernels* flashref::cpu::detail::kernels_avx2() {
  return nullptr;
}
#endif

// The tile kernels for the compiler's baseline target (SSE2 on x86-64, NEON on AArch64):
// 4-float vectors, register blocks of 4 rows x 8 columns.
#include <bit>
#include <cstdint>
#include <cstring>
#include <limits>

#include "kernels.hpp"

#define FLASHREF_KERNEL_W 4
#define FLASHREF_KERNEL_R 4
#define FLASHREF_KERNEL_FMA 0
#define FLASHREF_KERNEL_NV 2
#include "kernels_body.inc"

const flashref::cpu::detail::Kernels* flashref::cpu::detail::kernels_generic() {
  return &kTable;
}

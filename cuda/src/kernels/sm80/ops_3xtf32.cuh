// Operand policy of the sm80 family for exact float32: every product on TF32 tensor cores as
// three (3xTF32), the way PyTorch's memory-efficient kernel runs float32 (CUTLASS's
// OpMultiplyAddFastF32). A float32 operand x is split into
//   big = tf32(x),  small = tf32(x - big)            (cvt.rna.tf32.f32 both times)
// where x - big is exact in float32, and a product is taken as
//   a b ~ small(a) big(b) + big(a) small(b) + big(a) big(b)
// smallest terms first, each mma step's three summed from a zeroed accumulator and added with an
// FADD (mma_3xtf32 says why). What it drops, small(a) small(b) and the rounding of the two
// residuals, is at most 9 float32 unit roundoffs of |a b| (docs/verification.md, "3xTF32
// products"): near float32's own rounding, not TF32's 2^-11. dev/f32 emulates these products
// and this accumulation on the CPU and finds their errors within the exact float32 rule from
// d = 24 (PrecisionModes.Correct3xTf32KernelPassesTheExactRuleFromD24); where a score is a few
// products (small d) they can exceed it, and --three-tf32 judges them. The CUDA suites' float32
// cases run on these kernels under FLASHREF_CUDA_FAMILY=3xtf32 (scripts/device-run).
//
// Fragment layouts, loads and the shared-memory padding are Sm80Tf32Ops's (ops_tf32.cuh). The
// tiles stay float32 in shared memory, unrounded, and P~ and dS stay float32 in registers:
// each mma group splits its own operands just before the three mma, so no fragment holds two
// halves for longer than the group that uses them (registers: the halves of an A fragment would
// double the fragments a kernel keeps, such as Q_i's in the forward).
#pragma once

#include <cstdint>

#include "kernels/sm80/ops_tf32.cuh"

namespace flashref::cuda::kernels {

// The A fragment a (float32 bits) split once, for the several products it feeds.
struct SplitA {
  uint32_t big[4], small[4];
  __device__ __forceinline__ explicit SplitA(const uint32_t (&a)[4]) {
#pragma unroll
    for (int e = 0; e < 4; ++e) split_tf32(big[e], small[e], a[e]);
  }
};

// c += a b as three TF32 products (b: float32 bits, split here), summed from zero by the
// tensor core and then added into c with one FADD each: the tensor cores' float32 accumulation
// truncates, and added straight into c those truncations pile up over a whole reduction (run
// 25a on the H200: O, dK, dV up to 2x past the exact rule; dev/f32/three_tf32.py's 3xtf32-rz
// model reproduces it, and its 3xtf32-rz-fresh8, this order, passes with plain float32's
// margins).
__device__ __forceinline__ void mma_3xtf32(float (&c)[4], const SplitA& a, uint32_t b0,
                                           uint32_t b1) {
  uint32_t b_big[2], b_small[2];
  split_tf32(b_big[0], b_small[0], b0);
  split_tf32(b_big[1], b_small[1], b1);
  float step[4] = {0.f, 0.f, 0.f, 0.f};
  mma_tf32(step, a.small, b_big[0], b_big[1]);
  mma_tf32(step, a.big, b_small[0], b_small[1]);
  mma_tf32(step, a.big, b_big[0], b_big[1]);
#pragma unroll
  for (int e = 0; e < 4; ++e) c[e] += step[e];
}

struct Sm80Tf32x3Ops : Sm80Tf32Ops {
  static constexpr bool kRoundsTiles = false;  // split per product instead
  static constexpr const char* kLabel = "3xtf32";

  template <int kN>
  static __device__ __forceinline__ void mma_group(float (&c)[kN][4], int i, const uint32_t (&a)[4],
                                                   const BFrag& b) {
    mma_3xtf32(c[i], SplitA(a), b[0], b[1]);  // pure conversions: shared by unrolled groups
  }

  // P~ and dS as A fragments, still float32 (relabelled as a_from_c relabels them).
  template <int kNT>
  static __device__ __forceinline__ void a_frags_from_c(uint32_t (&a)[kNT][4],
                                                        const float (&c)[kNT][4]) {
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
      a[nt][0] = __float_as_uint(c[nt][0]);
      a[nt][1] = __float_as_uint(c[nt][2]);
      a[nt][2] = __float_as_uint(c[nt][1]);
      a[nt][3] = __float_as_uint(c[nt][3]);
    }
  }

  // acc += A Z, as Sm80Tf32Ops::a_frags_times_tile, each product 3xTF32.
  template <int kNT, int kDT, int kStride>
  static __device__ __forceinline__ void a_frags_times_tile(float (&acc)[kDT][4],
                                                            const uint32_t (&a)[kNT][4],
                                                            const float* tile, const Lane& l) {
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
      const SplitA a_split(a[nt]);
#pragma unroll
      for (int dt = 0; dt < kDT; ++dt) {
        BFrag b;
        load_b_cols(b, nullptr, tile, kStride, nt * 8, dt * 8, l.t_row, l.t_col);
        mma_3xtf32(acc[dt], a_split, b[0], b[1]);
      }
    }
  }

  template <int kRows, int kD, int kStride, int kThreads>
  static __device__ __forceinline__ void round_tile(float*, int) {}
};

}  // namespace flashref::cuda::kernels

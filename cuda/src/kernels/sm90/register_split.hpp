// The sm90 kernels' register split between their producer and consumer warpgroups (setmaxnreg):
// plain C++, so that the host tests check the arithmetic that the kernels' traits assert
// (tests/cuda/register_split_test.cpp).
#pragma once

namespace flashref::cuda::kernels::sm90 {

// The registers a thread of a `threads`-thread block is launched with under
// __launch_bounds__(threads, 1): the 64 K register file over the threads, down to a multiple
// of 8 (168 for three warpgroups, 128 for four).
constexpr int launch_regs(int threads) {
  return 65536 / threads / 8 * 8;
}

// Whether a block of one producer and `consumers` consumer warpgroups can share its registers
// so. setmaxnreg moves registers only among the block's own warps, which hold what the launch
// gave them; a warpgroup asking for more than the others gave back waits in setmaxnreg.inc for
// ever. ptxas does not check it: a kernel compiled with 64 + 2 x 224 (512 > 3 x 168) hung on
// the GPU (run 34g).
constexpr bool setmaxnreg_fits(int producer_regs, int consumer_regs, int consumers) {
  return producer_regs + consumers * consumer_regs <=
         (1 + consumers) * launch_regs(128 * (1 + consumers));
}

}  // namespace flashref::cuda::kernels::sm90

// The sm90 kernels' register split (cuda/src/kernels/sm90/register_split.hpp): setmaxnreg can
// only share out what the launch gave the block, and ptxas compiles a split past it without a
// word (it hung on the GPU: run 34g). Host logic only.
#include <gtest/gtest.h>

#include "kernels/sm90/register_split.hpp"

namespace flashref::cuda::kernels::sm90 {
namespace {

TEST(RegisterSplit, LaunchRegistersAreTheFileOverTheThreadsInEights) {
  EXPECT_EQ(launch_regs(384), 168);  // 65,536 / 384 = 170.7
  EXPECT_EQ(launch_regs(512), 128);
  EXPECT_EQ(launch_regs(256), 256);
}

TEST(RegisterSplit, TheKernelsSplitsFitExactly) {
  // Ours (fwd, bwd_dq, bwd_dkdv, fwd_3xtf32) and FlashAttention-3's: at two consumers each sums
  // to the launch's 504 exactly; at three, to 504 and 512 of 512.
  EXPECT_TRUE(setmaxnreg_fits(40, 232, 2));
  EXPECT_TRUE(setmaxnreg_fits(56, 224, 2));
  EXPECT_TRUE(setmaxnreg_fits(24, 240, 2));
  EXPECT_TRUE(setmaxnreg_fits(24, 160, 3));
  EXPECT_TRUE(setmaxnreg_fits(32, 160, 3));
}

TEST(RegisterSplit, ASplitPastTheLaunchIsRefused) {
  // Run 34g's hang, 64 + 2 x 224 = 512 against 3 x 168 = 504: the register file's 65,536 would take
  // it, the launch's 64,512 does not.
  EXPECT_FALSE(setmaxnreg_fits(64, 224, 2));
  EXPECT_FALSE(setmaxnreg_fits(24, 248, 2));
  EXPECT_FALSE(setmaxnreg_fits(40, 160, 3));
  EXPECT_TRUE(setmaxnreg_fits(72, 216, 2));  // the other splits tried for it fit, and spilled
}

}  // namespace
}  // namespace flashref::cuda::kernels::sm90

// The one place a kernel family is chosen (cuda/src/family.cpp): host code, so these run on a
// machine without a GPU too.
#include <gtest/gtest.h>

#include <string>

#include "family.hpp"
#include "flashref/error.hpp"

namespace flashref::cuda {
namespace {

TEST(Family, Bf16AndF16RunOnSm90OnHopperAtTheHeadDimsItIsCompiledFor) {
  const Family hopper = sm90_built() ? Family::sm90 : Family::sm80;
  for (DType t : {DType::bf16, DType::f16}) {
    EXPECT_EQ(choose_family(90, t, 64, false), hopper);
    EXPECT_EQ(choose_family(90, t, 128, false), hopper);
    EXPECT_EQ(choose_family(90, t, 40, true), hopper);  // allow_tf32 changes nothing for 16-bit
    // Outside 33..128 (compiled 64 and 128) the mma.sync kernels run.
    EXPECT_EQ(choose_family(90, t, 32, false), Family::sm80);
    EXPECT_EQ(choose_family(90, t, 136, false), Family::sm80);
    EXPECT_EQ(choose_family(90, t, 256, false), Family::sm80);
    // sm_90a code runs on compute capability 9.0 only; Ampere and later non-Hopper archs take sm80.
    EXPECT_EQ(choose_family(80, t, 64, false), Family::sm80);
    EXPECT_EQ(choose_family(86, t, 128, false), Family::sm80);
    EXPECT_EQ(choose_family(100, t, 64, false), Family::sm80);
  }
}

TEST(Family, Float32RunsExactOrOnTf32WhenAllowed) {
  for (int arch : {80, 90}) {
    EXPECT_EQ(choose_family(arch, DType::f32, 64, false), Family::ffma);
    EXPECT_EQ(choose_family(arch, DType::f32, 64, true), Family::sm80_tf32);
  }
}

TEST(Family, Sm90RunsTheSm80Backward) {
  EXPECT_EQ(backward_family(Family::sm90), Family::sm80);
  for (Family f : {Family::sm80, Family::sm80_tf32, Family::ffma}) EXPECT_EQ(backward_family(f), f);
}

TEST(Family, TheEnvironmentChoiceIsAutoOrSm80AndAnythingElseIsNamed) {
  EXPECT_TRUE(hopper_allowed_by(nullptr));
  EXPECT_TRUE(hopper_allowed_by(""));
  EXPECT_TRUE(hopper_allowed_by("auto"));
  EXPECT_FALSE(hopper_allowed_by("sm80"));
  try {
    hopper_allowed_by("sm90a");
    FAIL() << "an unknown value must be refused";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("FLASHREF_CUDA_FAMILY"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("sm90a"), std::string::npos) << e.what();
  }
}

TEST(Family, Sm90NeedsWholeSixteenByteRows) {
  Problem p;
  p.dtype = DType::bf16;
  p.d = 60;
  EXPECT_FALSE(family_supports(Family::sm90, p).ok);
  p.d = 64;
  EXPECT_TRUE(family_supports(Family::sm90, p).ok);
}

}  // namespace
}  // namespace flashref::cuda

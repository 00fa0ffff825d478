// The kernel family choice (cuda/src/family.cpp): made once, from the compute capability, the
// dtype and allow_tf32, with each family's reasons. Host logic only: runs without a GPU.
#include <gtest/gtest.h>

#include <string>

#include "family.hpp"

namespace flashref::cuda {
namespace {

Problem problem(DType dtype, std::int64_t d) {
  Problem p;
  p.dtype = dtype;
  p.grad_dtype = dtype;
  p.d = d;
  return p;
}

TEST(CudaFamily, ChosenFromDtypeAndAllowTf32OnEveryAcceptedArch) {
  for (int arch : {80, 86, 89, 90}) {
    EXPECT_EQ(choose_family(arch, DType::bf16, false), Family::sm80) << arch;
    EXPECT_EQ(choose_family(arch, DType::f16, true), Family::sm80) << arch;  // no effect
    EXPECT_EQ(choose_family(arch, DType::f32, false), Family::ffma) << arch;
    EXPECT_EQ(choose_family(arch, DType::f32, true), Family::sm80_tf32) << arch;
  }
  EXPECT_STREQ(family_name(Family::sm80_tf32), "sm80_tf32");
}

TEST(CudaFamily, HeadDimMultipleOfTheLoadWidth) {
  EXPECT_TRUE(family_supports(Family::sm80, problem(DType::bf16, 40)).ok);
  const Support no = family_supports(Family::sm80, problem(DType::bf16, 36));
  EXPECT_FALSE(no.ok);
  EXPECT_NE(no.reason.find("not a multiple of 8"), std::string::npos) << no.reason;
  EXPECT_TRUE(family_supports(Family::ffma, problem(DType::f32, 36)).ok);
  EXPECT_FALSE(family_supports(Family::ffma, problem(DType::f32, 34)).ok);
}

TEST(CudaFamily, Tf32StopsAtItsCompiledHeadDims) {
  EXPECT_TRUE(family_supports(Family::sm80_tf32, problem(DType::f32, kMaxTf32HeadDim)).ok);
  const Support no = family_supports(Family::sm80_tf32, problem(DType::f32, 132));
  EXPECT_FALSE(no.ok);
  EXPECT_NE(no.reason.find("allow_tf32"), std::string::npos) << no.reason;
  EXPECT_NE(no.reason.find("exact float32"), std::string::npos) << no.reason;
  EXPECT_TRUE(family_supports(Family::ffma, problem(DType::f32, 256)).ok);
}

}  // namespace
}  // namespace flashref::cuda

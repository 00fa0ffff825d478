// The kernel family choice (cuda/src/family.cpp): made once, from the compute capability, the
// dtype, the head dim and allow_tf32, with each family's reasons. Host logic only: runs
// without a GPU.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "dispatch.hpp"
#include "family.hpp"
#include "flashref/error.hpp"
#include "launch.hpp"

namespace flashref::cuda {
namespace {

Problem problem(DType dtype, std::int64_t d) {
  Problem p;
  p.dtype = dtype;
  p.grad_dtype = dtype;
  p.d = d;
  return p;
}

// d = 256: sm80 for bf16/f16 on every arch but Hopper (the sm90 cases are below).
TEST(CudaFamily, ChosenFromDtypeAndAllowTf32OnEveryAcceptedArch) {
  const FamilyOverride none = FamilyOverride::none;
  for (int arch : {80, 86, 89}) {
    EXPECT_EQ(choose_family(arch, DType::bf16, 256, false, none), Family::sm80) << arch;
    EXPECT_EQ(choose_family(arch, DType::f16, 256, true, none), Family::sm80) << arch;
  }
  for (int arch : {80, 86, 89, 90}) {
    // Exact float32 at d = 256: the FMA units on every arch (no tensor-core kernel is compiled).
    EXPECT_EQ(choose_family(arch, DType::f32, 256, false, FamilyOverride::none), Family::ffma)
        << arch;
    EXPECT_EQ(choose_family(arch, DType::f32, 64, true), Family::sm80_tf32) << arch;
  }
  EXPECT_STREQ(family_name(Family::sm80_tf32), "sm80_tf32");
  EXPECT_STREQ(family_name(Family::sm80_3xtf32), "sm80_3xtf32");
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
  EXPECT_TRUE(family_supports(Family::sm80_3xtf32, problem(DType::f32, kMaxTf32HeadDim)).ok);
  const Support no3 = family_supports(Family::sm80_3xtf32, problem(DType::f32, 132));
  EXPECT_FALSE(no3.ok);
  EXPECT_NE(no3.reason.find("ffma"), std::string::npos) << no3.reason;
}

TEST(CudaFamily, Bf16AndF16RunOnSm90OnHopperAtTheHeadDimsItIsCompiledFor) {
  // What this build and this environment allow (FLASHREF_CUDA_FAMILY=sm80 keeps mma.sync).
  const FamilyOverride env = family_override_from(std::getenv("FLASHREF_CUDA_FAMILY"));
  const Family hopper = sm90_built() && env != FamilyOverride::sm80 ? Family::sm90 : Family::sm80;
  for (DType t : {DType::bf16, DType::f16}) {
    // Every multiple of 8 up to 256: d <= 64 on the d = 64 kernels (d <= 32 padded, run 48b),
    // up to 128 on d = 128's, up to 256 on d = 256's forward with the mma.sync backward.
    for (long long d : {8, 16, 32, 40, 64, 96, 128, 136, 200, 256})
      EXPECT_EQ(choose_family(90, t, d, false), hopper) << d;
    EXPECT_EQ(choose_family(90, t, 40, true), hopper);  // allow_tf32 changes nothing for 16-bit
    EXPECT_EQ(choose_family(90, t, 20, false), Family::sm80);  // 16-byte rows
    EXPECT_EQ(choose_family(90, t, 264, false), Family::sm80);
    // sm_90a code runs on compute capability 9.0 only; Ampere and later non-Hopper archs take sm80.
    EXPECT_EQ(choose_family(80, t, 64, false), Family::sm80);
    EXPECT_EQ(choose_family(86, t, 128, false), Family::sm80);
    EXPECT_EQ(choose_family(100, t, 64, false), Family::sm80);
  }
}

// Exact float32: on Hopper at d in 33..128 as 3xTF32 on wgmma (sm90_3xtf32, where this build
// has it), elsewhere on the FMA units; FLASHREF_CUDA_FAMILY=ffma keeps the FMA units, =3xtf32
// takes 3xTF32 on mma.sync where it is compiled (d <= 128); allow_tf32 takes TF32 whatever is
// forced.
TEST(CudaFamily, Float32RunsExactOn3xTf32WgmmaOrFfmaOr3xTf32WhenAskedOrOnTf32WhenAllowed) {
  for (int arch : {80, 90}) {
    for (long long d : {4, 32, 64, 100, 128}) {
      const bool wgmma = sm90_built() && arch == 90 && d > 32;
      EXPECT_EQ(choose_family(arch, DType::f32, d, false, FamilyOverride::none),
                wgmma ? Family::sm90_3xtf32 : Family::ffma)
          << d;
      EXPECT_EQ(choose_family(arch, DType::f32, d, false, FamilyOverride::ffma), Family::ffma) << d;
      EXPECT_EQ(choose_family(arch, DType::f32, d, false, FamilyOverride::three_tf32),
                Family::sm80_3xtf32)
          << d;
      EXPECT_EQ(choose_family(arch, DType::f32, d, false, FamilyOverride::sm80),
                wgmma ? Family::sm90_3xtf32 : Family::ffma)
          << d;
      EXPECT_EQ(choose_family(arch, DType::f32, d, true, FamilyOverride::three_tf32),
                Family::sm80_tf32)
          << d;
    }
    for (long long d : {132, 256}) {
      EXPECT_EQ(choose_family(arch, DType::f32, d, false, FamilyOverride::three_tf32), Family::ffma)
          << d;
      EXPECT_EQ(choose_family(arch, DType::f32, d, false, FamilyOverride::none), Family::ffma) << d;
    }
  }
  EXPECT_STREQ(family_name(Family::sm90_3xtf32), "sm90_3xtf32");
  EXPECT_TRUE(family_supports(Family::sm90_3xtf32, problem(DType::f32, 36)).ok);
  EXPECT_FALSE(family_supports(Family::sm90_3xtf32, problem(DType::f32, 34)).ok);
  // The override does not reach bf16/f16 unless it names their family.
  EXPECT_EQ(choose_family(86, DType::bf16, 256, false, FamilyOverride::three_tf32), Family::sm80);
  if (sm90_built()) {
    EXPECT_EQ(choose_family(90, DType::bf16, 256, false, FamilyOverride::three_tf32), Family::sm90);
    EXPECT_EQ(choose_family(90, DType::bf16, 64, false, FamilyOverride::three_tf32), Family::sm90);
    EXPECT_EQ(choose_family(90, DType::bf16, 64, false, FamilyOverride::sm80), Family::sm80);
  }
}

// The compiled head dim each family runs d on: the wgmma families have no 32 (d <= 32 runs on
// sm90's 64) and sm90_3xtf32 no 256.
TEST(CudaFamily, EachFamilyRunsDOnItsCompiledHeadDims) {
  EXPECT_EQ(family_head_dim(Family::sm90, 8), 64);
  EXPECT_EQ(family_head_dim(Family::sm90, 32), 64);
  EXPECT_EQ(family_head_dim(Family::sm90, 96), 128);
  EXPECT_EQ(family_head_dim(Family::sm90, 136), 256);
  EXPECT_EQ(family_head_dim(Family::sm90_3xtf32, 136), 0);
  EXPECT_EQ(family_head_dim(Family::sm90_3xtf32, 40), 64);
  EXPECT_EQ(family_head_dim(Family::sm80, 32), 32);
  EXPECT_EQ(family_head_dim(Family::sm80, 200), 256);
  EXPECT_EQ(family_head_dim(Family::ffma, 16), 32);
}

TEST(CudaFamily, TheEnvironmentChoiceIsAutoSm80Or3xTf32OrFfmaAndAnythingElseIsNamed) {
  EXPECT_EQ(family_override_from(nullptr), FamilyOverride::none);
  EXPECT_EQ(family_override_from(""), FamilyOverride::none);
  EXPECT_EQ(family_override_from("auto"), FamilyOverride::none);
  EXPECT_EQ(family_override_from("sm80"), FamilyOverride::sm80);
  EXPECT_EQ(family_override_from("3xtf32"), FamilyOverride::three_tf32);
  EXPECT_EQ(family_override_from("ffma"), FamilyOverride::ffma);
  for (const char* wrong : {"sm90", "sm90a", "fma"}) {
    try {
      family_override_from(wrong);
      ADD_FAILURE() << "an unknown value must be refused: " << wrong;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("FLASHREF_CUDA_FAMILY"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(wrong), std::string::npos) << e.what();
    }
  }
}

// family_choice says which family runs a problem and why; the reason names what kept a problem
// off the wgmma kernels (what the cuda backend's plan() returns, and `flashref bench` prints).
TEST(CudaFamily, TheChoiceSaysWhichFamilyAndWhy) {
  const FamilyOverride none = FamilyOverride::none;
  auto has = [](const std::string& text, const std::string& part) {
    return text.find(part) != std::string::npos;
  };
  for (DType t : {DType::bf16, DType::f16}) {
    const std::string d256 = family_choice(90, t, 256, false, none);
    EXPECT_TRUE(sm90_built() ? d256.rfind("sm90: ", 0) == 0 && has(d256, "the backward on mma.sync")
                             : d256.rfind("sm80: ", 0) == 0 && has(d256, "lacks 90a"))
        << d256;
    const std::string d264 = family_choice(90, t, 264, false, none);
    EXPECT_EQ(d264.rfind("sm80: ", 0), 0u) << d264;
    EXPECT_TRUE(sm90_built() ? has(d264, "up to 256") : has(d264, "lacks 90a")) << d264;
    const std::string ampere = family_choice(86, t, 64, false, none);
    EXPECT_EQ(ampere.rfind("sm80: ", 0), 0u) << ampere;
    EXPECT_TRUE(sm90_built() ? has(ampere, "compute capability 8.6") : has(ampere, "lacks 90a"))
        << ampere;
    const std::string forced = family_choice(90, t, 64, false, FamilyOverride::sm80);
    EXPECT_TRUE(has(forced, "FLASHREF_CUDA_FAMILY=sm80")) << forced;
    if (sm90_built()) {
      EXPECT_EQ(family_choice(90, t, 64, false, none).rfind("sm90: ", 0), 0u);
      const std::string d96 = family_choice(90, t, 96, false, none);
      EXPECT_EQ(d96.rfind("sm90: ", 0), 0u) << d96;
      EXPECT_TRUE(has(d96, "d = 96 padded to 128")) << d96;
      EXPECT_TRUE(has(family_choice(90, t, 32, false, none), "d = 32 padded to 64"));
      EXPECT_TRUE(has(family_choice(90, t, 200, false, none), "d = 200 padded to 256"));
      EXPECT_TRUE(has(family_choice(90, t, 20, false, none), "not a multiple of 8"));
    }
  }
  // Every choice starts with the chosen family's name.
  for (int arch : {80, 90}) {
    for (DType t : {DType::bf16, DType::f16, DType::f32}) {
      for (long long d : {8, 20, 32, 40, 64, 96, 128, 256}) {
        for (bool tf32 : {false, true}) {
          for (FamilyOverride o :
               {none, FamilyOverride::sm80, FamilyOverride::three_tf32, FamilyOverride::ffma}) {
            const std::string name = family_name(choose_family(arch, t, d, tf32, o));
            const std::string why = family_choice(arch, t, d, tf32, o);
            EXPECT_EQ(why.rfind(name + ": ", 0), 0u) << why;
            EXPECT_GT(why.size(), name.size() + 10) << why;
          }
        }
      }
    }
  }
  const std::string ffma = family_choice(90, DType::f32, 256, false, none);
  EXPECT_EQ(ffma.rfind("ffma: ", 0), 0u) << ffma;
  EXPECT_TRUE(sm90_built() ? has(ffma, "3xTF32") && has(ffma, "d = 256 is not")
                           : has(ffma, "lacks 90a"))
      << ffma;
  EXPECT_TRUE(has(family_choice(90, DType::f32, 64, false, FamilyOverride::ffma),
                  "FLASHREF_CUDA_FAMILY=ffma"));
  EXPECT_TRUE(has(family_choice(90, DType::f32, 64, true, none), "allow_tf32"));
}

TEST(CudaFamily, Sm90NeedsWholeSixteenByteRows) {
  Problem p;
  p.dtype = DType::bf16;
  p.d = 60;
  EXPECT_FALSE(family_supports(Family::sm90, p).ok);
  p.d = 64;
  EXPECT_TRUE(family_supports(Family::sm90, p).ok);
}

// How the backward makes dQ (dispatch.cu): the fused strategies exist on sm90 alone; the
// atomic one only when asked for; the deterministic default is the ordered fused kernel from
// S_k = 8192 on, at both head dims (runs 14b, 15b), and the two passes below; their workspace is
// dQ's float32 accumulator at the compiled head dim, and one counter per 64-query tile when the
// adds are ordered.
TEST(CudaDqStrategy, FusedOnlyOnSm90AndAtomicOnlyWhenAsked) {
  for (Family f :
       {Family::sm80, Family::sm80_tf32, Family::sm80_3xtf32, Family::ffma, Family::sm90_3xtf32}) {
    EXPECT_EQ(dq_strategy(f, true, 16384, 64), DqStrategy::separate_pass) << family_name(f);
    EXPECT_EQ(dq_strategy(f, false, 16384, 64), DqStrategy::separate_pass) << family_name(f);
  }
  for (long long S_k : {1, 1024, 8192, 16384}) {
    EXPECT_EQ(dq_strategy(Family::sm90, false, S_k, 64), DqStrategy::fused_atomic);
    EXPECT_NE(dq_strategy(Family::sm90, true, S_k, 64), DqStrategy::fused_atomic);
    // d = 256's backward on sm90 is the mma.sync kernels', which fuse nothing.
    EXPECT_EQ(dq_strategy(Family::sm90, false, S_k, 256), DqStrategy::separate_pass);
    EXPECT_EQ(dq_strategy(Family::sm90, true, S_k, 256), DqStrategy::separate_pass);
  }
}

TEST(CudaDqStrategy, TheDeterministicDefaultIsFusedFromAThousandKeys) {
  if (std::getenv("FLASHREF_CUDA_TUNE") != nullptr) GTEST_SKIP() << "FLASHREF_CUDA_TUNE is set";
  EXPECT_EQ(dq_strategy(Family::sm90, true, 16384, 64), DqStrategy::fused_ordered);
  EXPECT_EQ(dq_strategy(Family::sm90, true, 8192, 64), DqStrategy::fused_ordered);
  EXPECT_EQ(dq_strategy(Family::sm90, true, 1024, 64), DqStrategy::fused_ordered);
  EXPECT_EQ(dq_strategy(Family::sm90, true, 1023, 64), DqStrategy::separate_pass);
  EXPECT_EQ(dq_strategy(Family::sm90, true, 1, 64), DqStrategy::separate_pass);
}

// The ordered fused kernel's first dQ add is a store by default, so the preprocess leaves its
// accumulator unzeroed (run 35a: the backward 5-11% faster); the kernels it launches assert the
// same of their traits (kernels/sm90/launch.cuh, backward_fused).
TEST(CudaDqStrategy, TheOrderedKernelStoresItsFirstAddByDefault) {
  if (std::getenv("FLASHREF_CUDA_TUNE") != nullptr) GTEST_SKIP() << "FLASHREF_CUDA_TUNE is set";
  EXPECT_TRUE(dq_first_store());
}

TEST(CudaDqStrategy, FusedWorkspaceIsTheAccumulatorAndTheCounters) {
  kernels::AttnArgs a;
  a.B = 2;
  a.H = 3;
  a.S_q = 200;
  a.S_q_pad = workspace_rows(a.S_q);
  a.d = 72;  // runs at the compiled head dim 128
  ASSERT_EQ(a.S_q_pad, 256);
  const long long rows = 2LL * 3 * 256;
  EXPECT_EQ(fused_dq_workspace(a, DqStrategy::separate_pass).accum_floats, 0);
  EXPECT_EQ(fused_dq_workspace(a, DqStrategy::separate_pass).semaphores, 0);
  EXPECT_EQ(fused_dq_workspace(a, DqStrategy::fused_atomic).accum_floats, rows * 128);
  EXPECT_EQ(fused_dq_workspace(a, DqStrategy::fused_atomic).semaphores, 0);
  EXPECT_EQ(fused_dq_workspace(a, DqStrategy::fused_ordered).accum_floats, rows * 128);
  EXPECT_EQ(fused_dq_workspace(a, DqStrategy::fused_ordered).semaphores,
            rows / kernels::kDqTileRows);
  EXPECT_EQ(fused_dq_workspace(a, DqStrategy::separate_pass).tile_counters, 0);
  EXPECT_EQ(fused_dq_workspace(a, DqStrategy::fused_atomic).tile_counters, 1);
  EXPECT_EQ(fused_dq_workspace(a, DqStrategy::fused_ordered).tile_counters, 1);
  // d <= 32 runs on sm90 padded to 64: the accumulator's rows are the kernel's 64 columns, not
  // the mma.sync kernels' 32.
  a.d = 32;
  EXPECT_EQ(fused_dq_workspace(a, DqStrategy::fused_ordered).accum_floats, rows * 64);
}

}  // namespace
}  // namespace flashref::cuda

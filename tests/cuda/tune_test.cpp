// FLASHREF_CUDA_TUNE's parser (cuda/src/kernels/common/tune.hpp): every knob reaches its field,
// and what is not a known key=N in range is an error that names the entry. Host logic only.
#include <gtest/gtest.h>

#include <string>

#include "kernels/common/tune.hpp"

namespace flashref::cuda::kernels {
namespace {

// The message of the InvalidArgument `text` raises, or "" when it parses.
std::string error_of(const char* text) {
  try {
    parse_tune(text);
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.field(), "FLASHREF_CUDA_TUNE");
    return e.what();
  }
  return "";
}

TEST(CudaTune, UnsetOrEmptyIsTheDefault) {
  for (const char* text : {static_cast<const char*>(nullptr), "", ",", ",,"}) {
    const Tune t = parse_tune(text);
    EXPECT_EQ(t.fwd90, 0);
    EXPECT_EQ(t.fused90, 0);
    EXPECT_EQ(t.grid90, 0);
    EXPECT_EQ(t.poison90, 0);
  }
}

TEST(CudaTune, EachKeyReachesItsField) {
  const Tune t = parse_tune(
      "fwd=3,dq=1,dkdv=2,fwd90=32,f32=2,f32bwd=9,bwd90=1,order90=6,fused90=4,grid90=1048576,"
      "poison90=1");
  EXPECT_EQ(t.fwd, 3);
  EXPECT_EQ(t.dq, 1);
  EXPECT_EQ(t.dkdv, 2);
  EXPECT_EQ(t.fwd90, 32);
  EXPECT_EQ(t.f32, 2);
  EXPECT_EQ(t.f32bwd, 9);
  EXPECT_EQ(t.bwd90, 1);
  EXPECT_EQ(t.order90, 6);
  EXPECT_EQ(t.fused90, 4);
  EXPECT_EQ(t.grid90, 1 << 20);
  EXPECT_EQ(t.poison90, 1);
}

TEST(CudaTune, KeysAreWholeNames) {
  // "fwd" and "fwd90", "bwd90" and "f32bwd" share letters; each entry sets its own key only.
  const Tune t = parse_tune("fwd90=7,f32bwd=6");
  EXPECT_EQ(t.fwd90, 7);
  EXPECT_EQ(t.fwd, 0);
  EXPECT_EQ(t.f32bwd, 6);
  EXPECT_EQ(t.bwd90, 0);
}

TEST(CudaTune, ADeletedVariantIsAnError) {
  // fused90=5 and 6 (the in-kernel dQ finishers) were deleted after runs 43a and 44a.
  const std::string e = error_of("bwd90=1,fused90=5");
  EXPECT_NE(e.find("\"fused90=5\""), std::string::npos) << e;
  EXPECT_NE(e.find("0 to 4"), std::string::npos) << e;
}

TEST(CudaTune, AnUnknownKeyIsAnErrorThatListsTheKnownOnes) {
  const std::string e = error_of("fuzed90=4");
  EXPECT_NE(e.find("\"fuzed90=4\""), std::string::npos) << e;
  EXPECT_NE(e.find("fused90"), std::string::npos) << e;
  EXPECT_NE(error_of("fused90"), "");  // no '='
  EXPECT_NE(error_of("=1"), "");
}

TEST(CudaTune, AValueMustBeAWholeNumberInRange) {
  // fwd90's largest is 35 (d = 64's long-walk short tiles on every causal problem they take).
  for (const char* text : {"fwd90=", "fwd90=-1", "fwd90=+1", "fwd90=1x", "fwd90= 1", "fwd90=36",
                           "grid90=1048577", "grid90=999999999999", "poison90=2"})
    EXPECT_NE(error_of(text), "") << text;
  EXPECT_EQ(error_of("fwd90=35"), "");
  EXPECT_EQ(error_of("fwd90=007"), "");
  EXPECT_EQ(parse_tune("fwd90=007").fwd90, 7);
}

}  // namespace
}  // namespace flashref::cuda::kernels

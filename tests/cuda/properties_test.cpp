// The shared RapidCheck property suite (verify/'s generators: one definition for every
// backend and for `flashref fuzz`) run against the cuda backend: O, L, dQ, dK, dV pass the
// rule against the gold on random awkward problems, every mask, dtype, GQA/MQA and layout.
// Head dims are drawn as multiples of 8, the kernels' load width (supports() says so).
#include <gtest/gtest.h>
#include <rapidcheck.h>

#include <cstdlib>

#include "cuda_test_support.hpp"
#include "flashref/verify/generators.hpp"

namespace flashref {
namespace {

// Unless RC_PARAMS is set (the sanitized CI run, a replay), 200 cases.
const bool kDefaultCaseCount = [] {
  setenv("RC_PARAMS", "max_success=200", /*overwrite=*/0);
  return true;
}();

verify::CaseBounds cuda_bounds() {
  verify::CaseBounds b;
  b.max_seq = 300;  // past the largest tile (128), so every kernel sees partial tiles
  b.max_d = 256;
  b.d_multiple = 8;
  return b;
}

TEST(CudaVsGold, RandomCasesPassTheRule) {
  FLASHREF_REQUIRE_GPU();
  (void)kDefaultCaseCount;
  const bool ok = rc::check("cuda: O, L, dQ, dK, dV pass the rule", [] {
    const verify::VerifyCase c = *verify::gen_case(cuda_bounds());
    const Problem& p = c.problem;
    RC_TAG(std::string(dtype_name(p.dtype)), std::string(mask_name(p.mask)));
    RC_CLASSIFY(p.mask == Mask::causal_bottom_right && p.S_q > p.S_k, "fully masked rows");
    RC_CLASSIFY(p.H_kv < p.H, "GQA/MQA");
    const verify::VerifyReport report = verify::run_verification(c, {"cuda"});
    RC_ASSERT(report.backends.size() == 1u);
    if (!report.backends[0].available) RC_FAIL(report.backends[0].unavailable_reason);
    if (!report.passed()) RC_FAIL(verify::format_table(report));
  });
  EXPECT_TRUE(ok);
}

}  // namespace
}  // namespace flashref

// Partial attention on the cuda backend: keys split into blocks placed at their global positions
// and merged by logsumexp in any order (the split-keys backend over host_staged device copies)
// pass the rule against the gold of the whole problem, forward and backward, on random awkward
// problems (every mask, dtype, GQA, partial tiles). The ring over the cuda backend (its buffers
// on the device) is ring_device_test.cpp's.
#include <gtest/gtest.h>
#include <rapidcheck.h>

#include <cstdlib>

#include "cuda_test_support.hpp"
#include "flashref/error.hpp"
#include "flashref/verify/generators.hpp"
#include "host_staged.hpp"
#include "split_keys_backend.hpp"

namespace flashref {
namespace {

// Unless RC_PARAMS is set (a replay), 100 cases per property.
const bool kDefaultCaseCount = [] {
  setenv("RC_PARAMS", "max_success=100", /*overwrite=*/0);
  return true;
}();

verify::CaseBounds cuda_bounds() {
  verify::CaseBounds b;
  b.max_seq = 300;  // past the largest tile (128): blocks cut tiles anywhere
  b.max_d = 128;
  b.d_multiple = 8;
  return b;
}

TEST(CudaPartialAttention, SplitKeysMergedPassTheRuleAgainstTheWholeProblem) {
  FLASHREF_REQUIRE_GPU();
  (void)kDefaultCaseCount;
  const std::unique_ptr<Backend> staged = cuda_test::host_staged(make_backend("cuda"));
  const bool ok = rc::check("cuda: key blocks merged by logsumexp pass the rule", [&] {
    const verify::VerifyCase c = *verify::gen_case(cuda_bounds());
    const ring::testing::KeySplit split = ring::testing::gen_split(c.problem.S_k);
    RC_TAG(std::string(mask_name(c.problem.mask)), split.order.size() > 1 ? "split" : "whole");
    const ring::testing::SplitKeysBackend backend(*staged, split);
    const verify::VerifyReport report = verify::verify_backends(c, {&backend});
    if (!report.passed()) RC_FAIL(describe(split) + "\n" + verify::format_table(report));
  });
  EXPECT_TRUE(ok);
}

TEST(HostStaged, RefusesAHostBackend) {
  EXPECT_THROW(cuda_test::host_staged(make_backend("cpu")), InvalidArgument);
  EXPECT_THROW(cuda_test::host_staged(nullptr), InvalidArgument);
}

}  // namespace
}  // namespace flashref

// Partial attention on the cuda backend, and ring attention over it on one GPU (the in-process
// transport, the ranks' buffers on the device): keys split into blocks placed at their global
// positions and merged by logsumexp in any order (the split-keys backend over host_staged
// device copies), and R = 1..4 ranks, pass the rule against the gold of the whole problem,
// forward and backward, on random awkward problems (every mask, dtype, GQA, partial tiles); a
// fixed R gives the same bits.
#include <gtest/gtest.h>
#include <rapidcheck.h>

#include <cstdlib>
#include <cstring>

#include "cuda_test_support.hpp"
#include "flashref/error.hpp"
#include "flashref/ring/host_staged.hpp"
#include "flashref/ring/ring_backend.hpp"
#include "flashref/verify/generators.hpp"
#include "flashref/verify/runner.hpp"
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
  const std::unique_ptr<Backend> staged = ring::host_staged(make_backend("cuda"));
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

TEST(CudaRing, OneToFourRanksPassTheRuleAgainstTheGold) {
  FLASHREF_REQUIRE_GPU();
  const bool ok = rc::check("ring<R>(cuda) passes the rule", [] {
    verify::VerifyCase c = *verify::gen_case(cuda_bounds());
    c.ranks = *rc::gen::inRange(1, 5);
    RC_TAG(c.ranks, std::string(mask_name(c.problem.mask)));
    const verify::VerifyReport report = verify::run_verification(c, {"cuda"});
    RC_ASSERT(report.backends.size() == 1u);
    if (!report.backends[0].available) RC_FAIL(report.backends[0].unavailable_reason);
    if (!report.passed()) RC_FAIL(verify::format_table(report));
  });
  EXPECT_TRUE(ok);
}

bool same_bits(const verify::HostTensor& a, const verify::HostTensor& b) {
  return a.bytes() == b.bytes() && std::memcmp(a.data(), b.data(), a.bytes()) == 0;
}

TEST(CudaRing, FixedRankCountGivesIdenticalBits) {
  FLASHREF_REQUIRE_GPU();
  const auto ring = ring::make_ring_backend(make_backend("cuda"), 3);
  const bool ok = rc::check("ring3(cuda) twice: the same bits", [&] {
    const verify::VerifyCase c = *verify::gen_case(cuda_bounds());
    const verify::ProblemData data = verify::make_problem_data(c.problem, verify::input_options(c));
    verify::RunOptions run;
    run.exec = verify::exec_options(c);
    run.layout = c.layout;
    run.backward = true;
    const verify::RunOutputs a = verify::run_backend(*ring, data, run);
    const verify::RunOutputs b = verify::run_backend(*ring, data, run);
    RC_ASSERT(same_bits(a.o, b.o));
    RC_ASSERT(std::memcmp(a.lse.data(), b.lse.data(), a.lse.size() * sizeof(float)) == 0);
    RC_ASSERT(same_bits(a.dq, b.dq));
    RC_ASSERT(same_bits(a.dk, b.dk));
    RC_ASSERT(same_bits(a.dv, b.dv));
  });
  EXPECT_TRUE(ok);
}

TEST(HostStaged, RefusesAHostBackend) {
  EXPECT_THROW(ring::host_staged(make_backend("cpu")), InvalidArgument);
  EXPECT_THROW(ring::host_staged(nullptr), InvalidArgument);
}

}  // namespace
}  // namespace flashref

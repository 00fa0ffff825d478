// Properties of the cpu backend (tiled FlashAttention-2) over random awkward problems: every
// tensor passes the rule against the gold, and the thread count never changes a bit.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cstring>

#include "flashref/verify/report.hpp"
#include "flashref/verify/verification.hpp"
#include "property_support.hpp"

namespace flashref::verify {
namespace {

RC_GTEST_PROP(CpuVsGold, OLAndGradientsPassTheRule, ()) {
  const VerifyCase c = *gen_case();
  testing::classify(c);
  const VerifyReport report = run_verification(c, {"cpu"});
  // The table ends with the `flashref verify` command that reproduces the case.
  if (!report.passed()) RC_FAIL(format_table(report));
}

bool same_bits(const HostTensor& a, const HostTensor& b) {
  return a.bytes() == b.bytes() && std::memcmp(a.data(), b.data(), a.bytes()) == 0;
}

RC_GTEST_PROP(CpuDeterminism, OneAndManyThreadsGiveIdenticalBits, ()) {
  const VerifyCase c = *gen_case();
  const int threads = *rc::gen::inRange(2, 5);
  RC_TAG(threads);
  const ProblemData data = make_problem_data(c.problem, input_options(c));
  const std::unique_ptr<Backend> cpu = make_backend("cpu");
  RunOptions one;
  one.exec = exec_options(c);
  one.exec.num_threads = 1;
  one.layout = c.layout;
  one.backward = true;
  RunOptions many = one;
  many.exec.num_threads = threads;
  const RunOutputs a = run_backend(*cpu, data, one);
  const RunOutputs b = run_backend(*cpu, data, many);
  VerifyCase replay = c;
  replay.threads = threads;
  const std::string context =
      "1 vs " + std::to_string(threads) +
      " threads differ; the many-thread run: " + reproduce_command(replay, {"cpu"});
  const bool lse_same = std::memcmp(a.lse.data(), b.lse.data(), a.lse.size() * sizeof(float)) == 0;
  if (!same_bits(a.o, b.o)) RC_FAIL("O: " + context);
  if (!lse_same) RC_FAIL("L: " + context);
  if (!same_bits(a.dq, b.dq)) RC_FAIL("dQ: " + context);
  if (!same_bits(a.dk, b.dk)) RC_FAIL("dK: " + context);
  if (!same_bits(a.dv, b.dv)) RC_FAIL("dV: " + context);
}

}  // namespace
}  // namespace flashref::verify

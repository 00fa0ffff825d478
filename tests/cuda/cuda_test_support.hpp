// Shared by the cuda tests: whether a GPU is here (every GPU test skips, saying why, when not:
// CI builds these binaries on a machine without one), and judging a case under the rule.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>

#include "flashref/backend.hpp"
#include "flashref/verify/report.hpp"
#include "flashref/verify/verification.hpp"

namespace flashref::cuda_test {

// The cuda backend's answer for a trivial problem: ok exactly when a usable GPU is present.
inline const Support& gpu_support() {
  static const Support s =
      make_backend("cuda")->supports(make_problem(1, 1, 1, 1, 1, 64, Mask::none, DType::bf16));
  return s;
}

#define FLASHREF_REQUIRE_GPU()                                            \
  do {                                                                    \
    if (!::flashref::cuda_test::gpu_support().ok)                         \
      GTEST_SKIP() << "skipped: no GPU to run the cuda backend on ("      \
                   << ::flashref::cuda_test::gpu_support().reason << ")"; \
  } while (0)

// FLASHREF_TEST_NONDETERMINISTIC=1: the suites run the cuda backward with the atomic dQ
// allowed (ExecutionOptions::deterministic = false), judged by the same rule: how
// scripts/device-run repeats them on the sm90 family's atomic option.
inline bool nondeterministic_requested() {
  const char* v = std::getenv("FLASHREF_TEST_NONDETERMINISTIC");
  return v != nullptr && std::string(v) == "1";
}

// Runs the case on "cuda" against the gold and the baseline; on failure prints the table,
// which ends with the command that reproduces the case.
inline ::testing::AssertionResult verified(verify::VerifyCase c) {
  if (nondeterministic_requested()) c.deterministic = false;
  const verify::VerifyReport r = verify::run_verification(c, {"cuda"});
  if (r.backends.empty() || !r.backends[0].available) {
    return ::testing::AssertionFailure()
           << "cuda unavailable: " << (r.backends.empty() ? "" : r.backends[0].unavailable_reason);
  }
  if (!r.passed()) return ::testing::AssertionFailure() << verify::format_table(r);
  // FLASHREF_TEST_VERBOSE=1 prints passing tables too: how close each check came to failing.
  if (std::getenv("FLASHREF_TEST_VERBOSE") != nullptr) std::cout << verify::format_table(r);
  return ::testing::AssertionSuccess();
}

}  // namespace flashref::cuda_test

// The RapidCheck driver behind every fuzzer: draws cases from gen_case (generators.hpp), hands
// each to a judge, stops after a number of cases or seconds, and shrinks the first failure to a
// minimal case. `flashref fuzz` judges a backend with it (cli/fuzz_session.cpp); the Python
// package judges a Python function with it (python/src/fuzz.cpp). What "judging" means is the
// caller's; the batches, the clock, the progress and the shrinking are here, once.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "flashref/verify/generators.hpp"
#include "flashref/verify/verify_case.hpp"

namespace flashref::verify {

struct FuzzLimits {
  std::int64_t cases = 0;  // stop after this many cases (0: no limit; then `seconds` is)
  double seconds = 0.0;    // stop after this long (0: no limit)
  std::uint64_t seed = 0;
  // Polled between cases: true ends the run early (SIGINT, Ctrl-C in Python), keeping any
  // failure found so far.
  std::function<bool()> interrupted;
};

struct FuzzProgress {
  std::int64_t cases = 0;         // cases judged
  std::int64_t unsupported = 0;   // cases the judge could not run (discarded)
  std::int64_t failures = 0;      // 0, or 1 once a failing case was found
  std::int64_t shrink_steps = 0;  // shrinks accepted so far
  std::int64_t shrink_tries = 0;  // shrinks tried so far
  double elapsed_s = 0.0;
  bool shrinking = false;
};

// What judging one case found.
struct CaseOutcome {
  enum class Kind : std::uint8_t { pass, unsupported, fail };
  Kind kind = Kind::pass;
  std::string reason;  // unsupported: why; fail: one line per failing tensor (or the error)
};

struct FuzzDriverResult {
  FuzzProgress progress;
  bool passed = true;  // no failure, not given up, not interrupted
  // The minimal failing case after shrinking (as the judge last adjusted it) and why it failed.
  std::optional<VerifyCase> minimal;
  std::string failure;
  std::string gave_up;       // RapidCheck gave up (too many unsupported cases), why
  bool interrupted = false;  // limits.interrupted() ended the run before its cases or time
};

// `judge` sees every drawn case and may adjust it before judging (the precision to apply, a
// fixed scale); a failing case's adjusted form is what `minimal` holds. Shrinking tries smaller
// failing cases and calls `judge` for each; the last failing call is the minimal case, so a
// judge that keeps state about its failure (a report) keeps that of its last failing call.
// `who` names what is judged in the gave-up message ("backend 'cpu'", "fn").
// `on_progress` is called after every case and shrink attempt.
FuzzDriverResult run_fuzz_cases(const FuzzLimits& limits, const CaseBounds& bounds,
                                const std::function<CaseOutcome(VerifyCase&)>& judge,
                                const std::string& who,
                                const std::function<void(const FuzzProgress&)>& on_progress);

}  // namespace flashref::verify

// The engine of `flashref fuzz`: the fuzz driver (verify/fuzz_driver.hpp) drawing verification
// cases from the generator the property tests use, judging one backend on each, shrinking the
// first failure to a minimal case.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "flashref/verify/fuzz_driver.hpp"
#include "flashref/verify/generators.hpp"
#include "flashref/verify/verification.hpp"

namespace flashref::cli {

struct FuzzSettings {
  std::string backend = "cpu";
  std::int64_t cases = 0;  // stop after this many cases (0: no limit; then `seconds` is)
  double seconds = 0.0;    // stop after this long (0: no limit)
  std::uint64_t seed = 0;
  verify::CaseBounds bounds;
  verify::Precision precision;  // --allow-tf32, --lse-dtype: applied to every case drawn
  bool deterministic = true;    // --nondeterministic: applied to every case drawn
  // Testing the fuzzer: bugs planted in the cpu backend for every case (a bit set of
  // cpu::Fault, flashref/cpu/faults.hpp); the backend must then be "cpu".
  std::uint32_t planted_faults = 0;
  // R >= 1: the backend runs as R ranks of the in-process ring (--ranks); 0: alone.
  int ranks = 0;
  // Polled between cases: true ends the run early (SIGINT), keeping any failure found so far.
  std::function<bool()> interrupted;
};

using verify::FuzzProgress;

struct FuzzResult {
  FuzzProgress progress;
  bool passed = true;
  // The minimal failing case after shrinking, its report, and what RapidCheck said.
  std::optional<verify::VerifyCase> minimal;
  std::optional<verify::VerifyReport> minimal_report;
  std::string failure;  // why the minimal case failed, one line per failing tensor
  std::string gave_up;  // RapidCheck gave up (too many unsupported cases), why
  bool interrupted = false;  // settings.interrupted() ended the run before its cases or time
};

// Runs until `cases` cases, `seconds` elapsed, or the first failure (then shrinks it).
// `on_progress` is called after every case and shrink attempt.
FuzzResult run_fuzz(const FuzzSettings& settings,
                    const std::function<void(const FuzzProgress&)>& on_progress);

// One line per failing tensor of the report (or the backend's error).
std::string failure_summary(const verify::VerifyReport& report);

}  // namespace flashref::cli

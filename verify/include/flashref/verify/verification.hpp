// Judging backends: runs a case on each backend and on the baseline, compares every tensor
// with the gold, and applies the rule (rule.hpp). This is the one place verification happens;
// `flashref verify`, the property tests and `flashref fuzz` all come through here.
#pragma once

#include <string>
#include <vector>

#include "flashref/verify/gold.hpp"
#include "flashref/verify/rule.hpp"
#include "flashref/verify/runner.hpp"
#include "flashref/verify/verify_case.hpp"

namespace flashref::verify {

struct TensorReport {
  TensorId tensor = TensorId::O;
  ErrorStats candidate;  // candidate vs gold
  ErrorStats baseline;   // baseline vs gold
  RuleCheck rule;
};

struct BackendReport {
  std::string backend;
  bool available = true;           // supports() said yes
  std::string unavailable_reason;  // supports()'s reason when !available
  std::string error;               // what the backend threw while running, if it did
  std::vector<TensorReport> tensors;
  // Available, ran without throwing, and every tensor passed.
  bool passed() const;
};

struct VerifyReport {
  VerifyCase verify_case;
  std::vector<BackendReport> backends;
  // Every available backend passed (unavailable ones are listed, not failed).
  bool passed() const;
  bool any_available() const;
};

// Judges each candidate tensor present (O and L; dQ, dK, dV when both runs have them).
// Worst indices are placed in tiles of tile_q query rows and tile_k key rows.
std::vector<TensorReport> judge(const Problem& problem, const GoldOutputs& gold,
                                const RunOutputs& baseline, const RunOutputs& candidate,
                                std::int64_t tile_q, std::int64_t tile_k);

// Validates the case (InvalidArgument on bad input or an unknown backend name), generates its
// inputs, computes the gold and the baseline once, and judges each named backend. A backend
// whose supports() says no is reported unavailable; one that throws while running fails.
VerifyReport run_verification(const VerifyCase& c, const std::vector<std::string>& backends);

}  // namespace flashref::verify

// Judging backends: runs a case on each backend and on the baseline, compares every tensor
// with the gold, and applies the rule (rule.hpp). This is the one place verification happens;
// `flashref verify`, the property tests and `flashref fuzz` all come through here.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "flashref/verify/gold.hpp"
#include "flashref/verify/noise_floor.hpp"
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

// Which O and L the baseline backward ran from when a candidate's gradients were judged. A
// backward's error depends on the O and L it is given (D = rowsum(dO * O), P = exp(S - L)), so
// the gradients are judged given the inputs the candidate's backward really received, when
// those passed their own checks.
enum class BackwardInputs : std::uint8_t {
  none,       // no gradients were judged
  candidate,  // the candidate's O and L, which both passed their checks
  baseline,   // the baseline's own O and L: the candidate's O or L failed, or was not given
};
std::string_view backward_inputs_name(BackwardInputs b);  // "none", "candidate", "baseline"

struct BackendReport {
  std::string backend;
  bool available = true;           // supports() said yes
  std::string unavailable_reason;  // supports()'s reason when !available
  std::string error;               // what the backend threw while running, if it did
  std::vector<TensorReport> tensors;
  BackwardInputs backward_inputs = BackwardInputs::none;
  std::string backward_inputs_reason;  // why the baseline's own O and L were used; else empty
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

// Judges O and L under the rule with the noise floor of `noise`. Worst indices are placed in
// tiles of tile_q query rows.
std::vector<TensorReport> judge_forward(const Problem& problem, const GoldOutputs& gold,
                                        const ScoreNoise& noise, const RunOutputs& baseline,
                                        const RunOutputs& candidate, std::int64_t tile_q);
// Judges dQ, dK and dV (nothing unless gold, baseline and candidate all have them), placing
// worst indices in tiles of tile_q query rows (dQ) and tile_k key rows (dK, dV).
// `baseline` holds the baseline backward's gradients: run from the candidate's O and L when
// both passed (run_backward_from), else the baseline's own.
std::vector<TensorReport> judge_backward(const Problem& problem, const GoldOutputs& gold,
                                         const ScoreNoise& noise, const RunOutputs& baseline,
                                         const RunOutputs& candidate, std::int64_t tile_q,
                                         std::int64_t tile_k);

// "O", "L", "O and L": the forward tensors among `reports` that failed; empty when none did.
std::string failed_forward_tensors(const std::vector<TensorReport>& reports);

// Validates the case (InvalidArgument on bad input or an unknown backend name), generates its
// inputs, computes the gold, the score-rounding noise and the baseline once, and judges each
// named backend: O and L first, then the gradients against the baseline backward run from the
// backend's O and L when both passed (from the baseline's own otherwise; BackendReport says
// which). A backend whose supports() says no is reported unavailable; one that throws while
// running fails.
VerifyReport run_verification(const VerifyCase& c, const std::vector<std::string>& backends);
// run_verification for backend objects the caller made (e.g. cpu::make_backend(cpu::Options)
// with a trace or planted faults), reported under their name(); none may be null. The baseline
// is always the registry's "reference" backend. (Another name than run_verification: a braced
// list of names would also convert to a vector of pointers, by its iterator-pair constructor.)
VerifyReport verify_backends(const VerifyCase& c, const std::vector<const Backend*>& backends);

}  // namespace flashref::verify

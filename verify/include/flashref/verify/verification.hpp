// Judging backends: runs a case on each backend and on the baseline, compares every tensor
// with the gold, and applies the rule (rule.hpp). This is the one place verification happens:
// `flashref verify`, the property tests and `flashref fuzz` come through run_verification, and
// `flashref check` (check.hpp) through the same judge and choose_gradient_baseline.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "flashref/verify/gold.hpp"
#include "flashref/verify/noise_floor.hpp"
#include "flashref/verify/rule.hpp"
#include "flashref/verify/runner.hpp"
#include "flashref/verify/sum_magnitude.hpp"
#include "flashref/verify/tensor_set.hpp"
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
  // Non-finite inputs and scores beyond float32's range (nonfinite.hpp, input_notes).
  std::vector<std::string> input_notes;
  // Every available backend passed (unavailable ones are listed, not failed).
  bool passed() const;
  bool any_available() const;
};

// The rule applied to one tensor: the statistics of the candidate and of the baseline against
// the gold, the worst index placed in a tile of `tile` rows along seq_axis(id), and
// apply_rule with the floor's noise part from `noise_sigma` (ScoreNoise::max_sigma) and its
// cancellation part from `sum_magnitude` (SumMagnitudes::max_magnitude). Canonical
// layout (tensor_set.hpp).
TensorReport judge(TensorId id, const Problem& problem, const xt::xarray<double>& candidate,
                   const xt::xarray<double>& baseline, const xt::xarray<double>& gold,
                   double noise_sigma, std::int64_t tile, DType lse_dtype = DType::f32,
                   double sum_magnitude = 0.0);

// `lse_dtype` (--lse-dtype) is the dtype L was stored in: L's floor is a rounding step of it.
// judge() for each tensor of `ids` that `candidate` has, in the order of `ids`: the query
// tensors (O, L, dQ) in tiles of tile_q rows, the key tensors (dK, dV) of tile_k rows. `gold`
// and `baseline` must have every tensor judged. For the gradients, `baseline` holds the baseline
// backward's gradients chosen by choose_gradient_baseline.
std::vector<TensorReport> judge(const Problem& problem, std::span<const TensorId> ids,
                                const TensorSet& candidate, const TensorSet& baseline,
                                const TensorSet& gold, const ScoreNoise& noise,
                                const SumMagnitudes& sums, std::int64_t tile_q,
                                std::int64_t tile_k, DType lse_dtype = DType::f32);

struct GradientBaseline {
  BackwardInputs inputs = BackwardInputs::none;
  std::string reason;  // why the baseline's own O and L are used; else empty
};
// Which O and L the baseline backward runs from when a candidate's gradients are judged, from
// the reports of the candidate's O and L: the candidate's own when both were judged and passed
// (the caller then runs run_backward_from with them), else the baseline's own, with the reason
// ("<candidate>'s O failed", "<candidate>'s O and L were not both given").
GradientBaseline choose_gradient_baseline(const std::vector<TensorReport>& forward,
                                          const std::string& candidate);

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

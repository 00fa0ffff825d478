// The baseline-relative rule of design.md, "How correctness is judged":
//
//   pass  iff  candidate max abs error <= k * baseline max abs error + floor
//         and  the candidate has no NaN or infinity that the gold lacks
//         and  every non-finite gold value (-inf in L for a fully masked row) is matched,
//
// where both errors are measured against the gold, the baseline is the reference backend run
// in the candidate's precision on the same inputs, k = 2 for O and L and 3 for dQ, dK, dV, and
// floor = 2 * rounding_step(output dtype, max |gold|) (L's output dtype is float32).
#pragma once

#include <string>

#include "flashref/verify/stats.hpp"

namespace flashref::verify {

// "pass iff max_abs_err <= k * baseline_err + floor; ...": printed at the top of every report.
std::string rule_text();

double rule_k(TensorId t);  // 2 (O, L) or 3 (dQ, dK, dV)
// 2 * rounding_step(dtype, max_abs_gold): twice one rounding step of the output dtype at the
// tensor's largest gold magnitude.
double rule_floor(DType output_dtype, double max_abs_gold);

struct RuleCheck {
  TensorId tensor = TensorId::O;
  double k = 0.0;
  double floor = 0.0;
  double baseline_err = 0.0;   // baseline max abs error vs the gold
  double candidate_err = 0.0;  // candidate max abs error vs the gold
  double limit = 0.0;          // k * baseline_err + floor
  double ratio = 0.0;          // candidate_err / limit: the margin, > 1 fails
  bool pass = false;
  std::string reason;  // why it failed; empty when it passed
};

// `output_dtype`: output_dtype(tensor, problem). Fails when either side has non-finite
// mismatches: for the baseline, because the limit would then mean nothing.
RuleCheck apply_rule(TensorId tensor, DType output_dtype, const ErrorStats& candidate,
                     const ErrorStats& baseline);

}  // namespace flashref::verify

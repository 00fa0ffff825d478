// The baseline-relative rule (docs/verification.md, "The rule"):
//
//   pass  iff  candidate max abs error <= k * baseline max abs error + floor
//         and  the candidate has no NaN or infinity that the gold lacks
//         and  every non-finite gold value (-inf in L for a fully masked row) is matched,
//
// where both errors are measured against the gold, the baseline is the reference backend run
// in the candidate's precision on the same inputs, k = 2 for O and L and 3 for dQ, dK, dV, and
//
//   floor = 2 * rounding_step(output dtype, max |gold|)     (L's output dtype is float32)
//         + 3 * max_e sigma_T(e)                            (noise_floor.hpp)
//         + 2^-23 * max_e M_T(e)                            (sum_magnitude.hpp)
//
// The first part is one rounding of the output on each side; the second is the spread that
// the float32 rounding of the scores (and, for dQ and dK, of dP - D) alone gives two correct
// kernels; the third is one float32 epsilon of the terms each output sums, which bounds a
// correct kernel's error where those terms cancel. The gradients' baseline is the reference backward run from the candidate's own O
// and L when both pass (the inputs the candidate's backward received), else from the
// baseline's own (verification.hpp).
#pragma once

#include <string>

#include "flashref/verify/stats.hpp"

namespace flashref::verify {

// "pass iff max_abs_err <= k * baseline_err + floor; ...": printed at the top of every report.
std::string rule_text();

double rule_k(TensorId t);  // 2 (O, L) or 3 (dQ, dK, dV)
// The floor's rounding part: 2 * rounding_step(dtype, max_abs_gold), twice one rounding step
// of the output dtype at the tensor's largest gold magnitude.
double rule_floor(DType output_dtype, double max_abs_gold);

// How many standard deviations of rounding noise (noise_floor.hpp) the floor allows.
inline constexpr double kNoiseSigmas = 3.0;
// The floor's noise part: kNoiseSigmas * max_sigma (ScoreNoise::max_sigma of the tensor).
double rule_noise_floor(double max_sigma);

struct RuleCheck {
  TensorId tensor = TensorId::O;
  double k = 0.0;
  double floor = 0.0;           // floor_rounding + floor_noise + floor_cancellation
  double floor_rounding = 0.0;  // 2 rounding steps of the output dtype at max|gold|
  double floor_noise = 0.0;     // kNoiseSigmas * max_sigma: float32 rounding of S (and dP - D)
  double noise_sigma = 0.0;     // max_e sigma_T(e)
  double floor_cancellation = 0.0;  // kSumEpsilon * sum_magnitude: the terms the sums add up
  double sum_magnitude = 0.0;       // max_e M_T(e) (sum_magnitude.hpp)
  double baseline_err = 0.0;    // baseline max abs error vs the gold
  double candidate_err = 0.0;   // candidate max abs error vs the gold
  double limit = 0.0;           // k * baseline_err + floor
  double ratio = 0.0;           // candidate_err / limit: the margin, > 1 fails
  bool pass = false;
  std::string reason;  // why it failed; empty when it passed
};

// `output_dtype`: output_dtype(tensor, problem); `noise_sigma`: score_rounding_noise(...)
// .max_sigma(tensor) (0 leaves only the rounding part, as callers without the inputs must).
// `sum_magnitude`: sum_magnitudes(...).max_magnitude(tensor) (0 leaves the term out).
// Fails when either side has non-finite mismatches: for the baseline, because the limit would
// then mean nothing.
RuleCheck apply_rule(TensorId tensor, DType output_dtype, const ErrorStats& candidate,
                     const ErrorStats& baseline, double noise_sigma = 0.0,
                     double sum_magnitude = 0.0);

}  // namespace flashref::verify

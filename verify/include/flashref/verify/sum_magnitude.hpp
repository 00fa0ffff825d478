// The rule's cancellation term: the size of the terms each output sums, not of the result.
//
// Every output of attention is a float32 sum whose terms can cancel: O_ic = sum_j P_ij V_jc
// with V of both signs is near zero while its terms are near |V|. A correct kernel's rounding
// error is a few units of roundoff of the terms' magnitude (the standard bound of a dot
// product: |fl(sum x_j y_j) - sum x_j y_j| <= gamma_n sum |x_j y_j|), but the rule's other
// floor is a rounding step of the result at max|gold|, and its baseline's error, measured at
// its own worst element, may happen to be one ulp. docs/verification.md ("The cancellation
// floor") derives the term and measures it; per element e of tensor T:
//
//   M_O(i,c)  = sum_j P_ij |V_jc|                    M_L(i)    = |m_i| + log l_i + 2 lag_i
//   M_dV(j,c) = sum_i P_ij |dO_ic|                   M_dQ(i,c) = |scale| sum_j |dS_ij| |K_jc|
//   M_dK(j,c) = |scale| sum_i |dS_ij| |Q_ic|
//
// over the visible (i, j) (for dK and dV, i runs over every query head of the key/value head's
// group), with P, dS = P (dP - D), m = max_j S_ij and l = sum_j exp(S_ij - m) from the inputs in
// double: the gold's quantities. The rule adds kSumEpsilon * max_e M_T(e) to T's floor.
// lag_i = min(kConditionalRescale, m_i - min_j S_ij): a kernel that defers its rescale adds
// L = m + log l from a running max up to lag_i below m and a log l up to lag_i above it
// (docs/verification.md, "The conditional rescale").
#pragma once

#include <array>
#include <numbers>

#include "flashref/verify/problem_data.hpp"
#include "flashref/verify/tensor_id.hpp"

namespace flashref::verify {

// The machine epsilon of the accumulation dtype, float32 in every backend (2 unit roundoffs).
inline constexpr double kSumEpsilon = 0x1p-23;

// The largest growth of the running max that a correct kernel may leave unrescaled, in
// natural-log units: FlashAttention-4's conditional rescale, 2^8 (8 ln 2), which flashref's own
// sm90 forward uses at d = 128 (FwdTraitsLazyRescale).
inline constexpr double kConditionalRescale = 8.0 * std::numbers::ln2;

struct SumMagnitudes {
  // max_e M_T(e) by TensorId (0 for a gradient when the backward was not asked for, and for
  // a problem whose every row sees no key).
  std::array<double, 5> max_by_tensor{};
  // max |S_ij| over the visible pairs: the pass computes the scores anyway, and a report says
  // when they exceed float32's range (nonfinite.hpp, input_notes).
  double max_abs_score = 0.0;
  double max_magnitude(TensorId t) const { return max_by_tensor[static_cast<std::size_t>(t)]; }
};

// One pass over the visible (i, j) pairs in double, O(B H S_q S_k d), like the gold. `backward`
// also computes the gradients' magnitudes and needs data.dO (InvalidArgument "dO" otherwise).
// Non-finite inputs leave the magnitudes of their rows out of the max (the rule fails those
// elements on their own).
SumMagnitudes sum_magnitudes(const ProblemData& data, bool backward);

// The floor's cancellation part: kSumEpsilon * max_e M_T(e) (SumMagnitudes::max_magnitude).
double cancellation_floor(double max_magnitude);

}  // namespace flashref::verify

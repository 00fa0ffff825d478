// Shared by the property tests: the number of cases, and how a case is labelled.
#pragma once

#include <cstdlib>
#include <string>

#include <rapidcheck.h>

#include "flashref/verify/generators.hpp"

namespace flashref::verify::testing {

// RapidCheck reads RC_PARAMS once, when the first property runs. Unless the caller set it
// (the sanitized CI run sets max_success=60; a user replays with "reproduce=..."), run 300
// cases per property.
inline const bool kDefaultCaseCount = [] {
  setenv("RC_PARAMS", "max_success=300", /*overwrite=*/0);
  return true;
}();

// The mix of a run, printed by RapidCheck: dtype, mask, and whether the case has fully masked
// rows (the shape features are checked by generators_test.cpp).
inline void classify(const VerifyCase& c) {
  const Problem& p = c.problem;
  RC_TAG(std::string(dtype_name(p.dtype)), std::string(mask_name(p.mask)));
  RC_CLASSIFY(p.mask == Mask::causal_bottom_right && p.S_q > p.S_k, "fully masked rows");
}

}  // namespace flashref::verify::testing

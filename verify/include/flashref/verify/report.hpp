// Verification reports: a text table for people, JSON for programs.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "flashref/verify/verification.hpp"

namespace flashref::verify {

// The problem, the case, the rule, one line per (tensor, backend) with the candidate error,
// baseline error, k, the floor and its two parts (rounding, noise), limit, ratio, verdict and
// worst index, then which O and L the gradients' baseline ran from, the failures in detail
// and the unavailable backends.
std::string format_table(const VerifyReport& report);

// Which O and L the baseline backward ran from, in words: "the baseline backward ran from
// cpu's O and L, which passed: ..." or "... from its own O and L (cpu's O failed)".
std::string backward_inputs_text(BackwardInputs inputs, const std::string& reason,
                                 const std::string& candidate);

nlohmann::json to_json(const Problem& p);
nlohmann::json to_json(const ErrorStats& s);
nlohmann::json to_json(const TensorReport& t);
// {"inputs": "candidate" | "baseline", "reason", "text"}, or null when no gradient was judged.
nlohmann::json to_json(BackwardInputs inputs, const std::string& reason,
                       const std::string& candidate);
// {"command", "problem", "dtype", "case", "rule", "backends": [...], "passed"}. Non-finite
// numbers appear as null (JSON has no NaN or infinity).
nlohmann::json to_json(const VerifyReport& report);

}  // namespace flashref::verify

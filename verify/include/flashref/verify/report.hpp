// Verification reports: a text table for people, JSON for programs.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "flashref/verify/verification.hpp"

namespace flashref::verify {

// The problem, the case, the rule, one line per (tensor, backend) with the candidate error,
// baseline error, k, floor, limit, ratio, verdict and worst index, then the failures in detail
// and the unavailable backends.
std::string format_table(const VerifyReport& report);

nlohmann::json to_json(const Problem& p);
nlohmann::json to_json(const ErrorStats& s);
nlohmann::json to_json(const TensorReport& t);
// {"command", "problem", "dtype", "case", "rule", "backends": [...], "passed"}. Non-finite
// numbers appear as null (JSON has no NaN or infinity).
nlohmann::json to_json(const VerifyReport& report);

}  // namespace flashref::verify

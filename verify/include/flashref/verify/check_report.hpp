// The report of `flashref check` (check.hpp): the table for people and the JSON for programs.
// One definition for the CLI and the Python package (python/), so `str(report)` there is the
// CLI's table and `report.to_dict()` its JSON.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "flashref/problem.hpp"
#include "flashref/verify/check.hpp"

namespace flashref::verify {

// The problem, the precision, the rule, one line per tensor (error, baseline error, k, floor
// and its parts, limit, ratio, verdict, rel L2, NaN/inf mismatches, worst index and its tile),
// the gradients' baseline, the failures' reasons, the diagnosis, and the result.
std::string format_check(const Problem& p, const CheckResult& r);

// {"command": "check", "problem", "dtype", "grad_dtype", "precision", "rule", "tensors",
// "baseline_backward", "findings", "lead", "passed"} and "diagnosis_scope" when set.
nlohmann::json to_json(const Problem& p, const CheckResult& r);

}  // namespace flashref::verify

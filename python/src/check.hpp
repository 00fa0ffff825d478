// flashref.check and flashref.reference: the judge of `flashref check` (verify/check.hpp) and
// the gold and baseline, on arrays from Python.
#pragma once

#include <optional>
#include <string>

#include <nanobind/nanobind.h>
#include <nlohmann/json.hpp>

#include "flashref/verify/check.hpp"
#include "states.hpp"

namespace flashref::python {

// A judged candidate: the problem, the CheckResult of its outputs (no tensors when only
// states were given) and its judged states, with the CLI's table and JSON.
struct CheckReport {
  Problem problem;
  verify::CheckResult result;
  std::optional<StatesPart> states = std::nullopt;

  bool passed() const;
  std::string table() const;   // as `flashref check` prints it
  nlohmann::json json() const;  // as `flashref check --json` prints it
};

// Tensors of a candidate or of the reference, keyed by the CLI's names: "o", "lse", "dq", "dk",
// "dv".
inline constexpr const char* kCandidateNames[] = {"o", "lse", "dq", "dk", "dv"};

// The candidate's tensors from a dict {"o": array, "lse": array, ...} of host arrays in the
// canonical layout (Python has turned the course's 3-D layout into 4-D views); absent or None
// entries are left out. ValueError naming the key for a shape the problem does not have.
verify::TensorSet candidate_set(const nanobind::dict& tensors, const Problem& p);

void bind_check(nanobind::module_& m);

}  // namespace flashref::python

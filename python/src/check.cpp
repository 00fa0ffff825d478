#include "check.hpp"

#include <optional>
#include <string>

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "arrays.hpp"
#include "flashref/error.hpp"
#include "flashref/verify/check_report.hpp"
#include "flashref/verify/gold.hpp"
#include "flashref/verify/report.hpp"
#include "flashref/verify/runner.hpp"
#include "flashref/verify/tensor_set.hpp"
#include "problem_args.hpp"

namespace flashref::python {
namespace {

verify::Precision precision_of(bool allow_tf32, bool three_tf32, const std::string& lse_dtype) {
  verify::Precision precision;
  precision.allow_tf32 = allow_tf32;
  precision.three_tf32 = three_tf32;
  precision.lse_dtype = verify::parse_lse_dtype(lse_dtype, "lse_dtype");
  return precision;
}

// `states`: None, a dict of the states' arrays or a folder (states.hpp), in the tiles and the
// selection given; Python has refused what `flashref check --states` refuses before any file
// is read (states without tile, with allow_tf32 or three_tf32; select without states).
CheckReport check(const AnyArray& q, const AnyArray& k, const AnyArray& v, const nb::dict& tensors,
                  const std::optional<AnyArray>& dO, const ProblemArgs& args, bool allow_tf32,
                  bool three_tf32, const std::string& lse_dtype, std::int64_t tile_q,
                  std::int64_t tile_k, const nb::object& states,
                  const std::vector<std::int64_t>& select) {
  const verify::Precision precision = precision_of(allow_tf32, three_tf32, lse_dtype);
  const verify::StatesGrid grid = states_grid(tile_q, tile_k, select);
  verify::ProblemData data = problem_data(q, k, v, dO, args);
  const verify::TensorSet candidate = candidate_set(tensors, data.problem);
  if (candidate.empty() && states.is_none()) {
    throw InvalidArgument("o", "nothing to check: give o (and lse, dq, dk, dv), or states=");
  }
  const bool gradients = candidate.has(verify::TensorId::dQ) ||
                         candidate.has(verify::TensorId::dK) || candidate.has(verify::TensorId::dV);
  if (gradients && data.dO.empty()) {
    throw InvalidArgument("do", "checking dq, dk or dv needs do, the gradient of O");
  }
  // Every file read and checked before any work.
  std::optional<StatesInput> states_input;
  if (!states.is_none()) states_input = read_states_arg(data, grid, states);
  CheckReport report;
  report.problem = data.problem;
  {
    // The judge is C++ through and through (OpenMP inside): other Python threads may run.
    nb::gil_scoped_release release;
    if (!candidate.empty()) {
      report.result = verify::check_candidate(data, candidate, tile_q, tile_k, precision);
    }
    if (states_input) report.states = judge_states(data, *states_input);
  }
  return report;
}

// {"gold": {...}, "baseline": {...}}: float64 gold; the baseline (the reference backend in the
// problem's precision) as float32 arrays, in the canonical layout.
nb::dict reference(const AnyArray& q, const AnyArray& k, const AnyArray& v,
                   const std::optional<AnyArray>& dO, const ProblemArgs& args, bool allow_tf32) {
  const verify::ProblemData data = problem_data(q, k, v, dO, args);
  const bool backward = !data.dO.empty();
  verify::TensorSet gold, baseline;
  {
    nb::gil_scoped_release release;
    gold = verify::compute_gold(data, backward);
    verify::RunOptions run;
    run.backward = backward;
    run.exec.allow_tf32 = allow_tf32;
    const std::unique_ptr<Backend> ref = make_backend("reference");
    baseline = verify::run_backend(*ref, data, run).values;
  }
  nb::dict gold_out, baseline_out;
  constexpr verify::TensorId ids[] = {verify::TensorId::O, verify::TensorId::L,
                                      verify::TensorId::dQ, verify::TensorId::dK,
                                      verify::TensorId::dV};
  for (std::size_t i = 0; i < 5; ++i) {
    if (gold.has(ids[i]))
      gold_out[kCandidateNames[i]] = to_numpy(xt::xarray<double>(gold.at(ids[i])));
    if (baseline.has(ids[i])) baseline_out[kCandidateNames[i]] = to_numpy_f32(baseline.at(ids[i]));
  }
  nb::dict out;
  out["gold"] = gold_out;
  out["baseline"] = baseline_out;
  return out;
}

}  // namespace

bool CheckReport::passed() const {
  return result.passed() && (!states || states->passed());
}

// Assembled as cmd_check.cpp does: the outputs' table without its verdict, the states, one
// verdict.
std::string CheckReport::table() const {
  std::string text;
  if (!result.tensors.empty()) {
    text = verify::format_check(problem, result);
    if (states) text.erase(text.rfind("\nresult: "));
  } else {
    text = "problem: " + describe(problem) + "\n";
  }
  if (states) {
    text += states_text(*states);
    text += std::string("\nresult: ") + (passed() ? "PASS" : "FAIL") + "\n";
  }
  return text;
}

nlohmann::json CheckReport::json() const {
  nlohmann::json j = !result.tensors.empty()
                         ? verify::to_json(problem, result)
                         : nlohmann::json{{"command", "check"},
                                          {"problem", verify::to_json(problem)},
                                          {"dtype", std::string(dtype_name(problem.dtype))}};
  if (states) add_states_json(j, *states);
  j["passed"] = passed();
  return j;
}

verify::TensorSet candidate_set(const nb::dict& tensors, const Problem& p) {
  constexpr verify::TensorId ids[] = {verify::TensorId::O, verify::TensorId::L,
                                      verify::TensorId::dQ, verify::TensorId::dK,
                                      verify::TensorId::dV};
  verify::TensorSet set;
  for (std::size_t i = 0; i < 5; ++i) {
    const char* name = kCandidateNames[i];
    if (!tensors.contains(name) || tensors[name].is_none()) continue;
    const AnyArray a = nb::cast<AnyArray>(tensors[name]);
    xt::xarray<double> values = to_double(a, name);
    const std::vector<std::size_t> want = verify::canonical_shape(ids[i], p);
    if (std::vector<std::size_t>(values.shape().begin(), values.shape().end()) != want) {
      std::string got, need;
      for (std::size_t s : values.shape()) got += (got.empty() ? "" : ", ") + std::to_string(s);
      for (std::size_t s : want) need += (need.empty() ? "" : ", ") + std::to_string(s);
      throw InvalidArgument(name, "shape is (" + got + ") but the problem needs (" + need + ")");
    }
    set[ids[i]] = std::move(values);
  }
  return set;
}

void bind_check(nb::module_& m) {
  nb::class_<ProblemArgs>(m, "ProblemArgs",
                          "The problem's keywords: mask, scale, dtype, grad_dtype.")
      .def(nb::init<>())
      .def_rw("mask", &ProblemArgs::mask)
      .def_rw("scale", &ProblemArgs::scale)
      .def_rw("dtype", &ProblemArgs::dtype)
      .def_rw("grad_dtype", &ProblemArgs::grad_dtype);
  nb::class_<CheckReport>(m, "CheckReport", "A judged candidate (flashref.Report wraps it).")
      .def_prop_ro("passed", &CheckReport::passed)
      .def("table", &CheckReport::table, "The report as `flashref check` prints it.")
      .def(
          "json", [](const CheckReport& r) { return r.json().dump(); },
          "The report as `flashref check --json` prints it.");
  m.def(
      "finding_codes",
      [] {
        std::vector<std::string> codes;
        for (std::string_view c : verify::diagnosis::kDiagnosisCodes) codes.emplace_back(c);
        return codes;
      },
      "The stable codes of the diagnosis' findings.");
  m.def("check", &check, nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("tensors"),
        nb::arg("do_").none(), nb::arg("args"), nb::arg("allow_tf32"), nb::arg("three_tf32"),
        nb::arg("lse_dtype"), nb::arg("tile_q"), nb::arg("tile_k"), nb::arg("states").none(),
        nb::arg("select"),
        "Judges a candidate's tensors (canonical 4-D layout) and states against the gold.");
  m.def("reference", &reference, nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("do_").none(),
        nb::arg("args"), nb::arg("allow_tf32"),
        "The gold (float64) and the baseline (float32 values) of a problem.");
}

}  // namespace flashref::python

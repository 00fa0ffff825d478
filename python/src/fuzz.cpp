#include "fuzz.hpp"

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "arrays.hpp"
#include "check.hpp"
#include "flashref/error.hpp"
#include "flashref/verify/check.hpp"
#include "flashref/verify/fuzz_driver.hpp"
#include "flashref/verify/generators.hpp"
#include "flashref/verify/problem_data.hpp"
#include "flashref/verify/report.hpp"
#include "problem_args.hpp"

namespace flashref::python {
namespace {

using Clock = std::chrono::steady_clock;

// What flashref.fuzz's keywords become (python/flashref/_fuzz.py fills it).
struct FuzzArgs {
  std::int64_t cases = 0;
  double seconds = 0.0;
  std::uint64_t seed = 0;
  std::vector<std::string> dtypes{"f32", "f16", "bf16"};
  std::vector<std::string> masks{"none", "causal"};
  std::int64_t max_seq = 160;
  std::vector<std::int64_t> head_dims;  // empty: 1..max_d, biased to awkward ones
  std::int64_t max_d = 130;
  bool gqa = true;
  bool other_scales = true;
  bool backward = true;
  int tile_q = 0, tile_k = 0;  // the kernel's B_q, B_k (0: unknown)
  bool allow_tf32 = false;
  bool three_tf32 = false;
  std::string lse_dtype = "f32";
};

struct FuzzOutcome {
  bool passed = true;
  std::int64_t cases = 0, unsupported = 0, shrink_steps = 0, shrink_tries = 0;
  double elapsed_s = 0.0;
  bool interrupted = false;
  std::string gave_up;
  std::string failure;
  std::optional<verify::VerifyCase> minimal;
  std::optional<CheckReport> report;  // none when the minimal case failed by raising
};

// The case as a dict for Python: the problem and the settings that reproduce its inputs.
nb::dict case_dict(const verify::VerifyCase& c) {
  const Problem& p = c.problem;
  nb::dict d;
  d["B"] = p.B;
  d["H"] = p.H;
  d["H_kv"] = p.H_kv;
  d["S_q"] = p.S_q;
  d["S_k"] = p.S_k;
  d["d"] = p.d;
  d["mask"] = std::string(mask_name(p.mask));
  d["scale"] = p.scale;
  d["dtype"] = std::string(dtype_name(p.dtype));
  d["seed"] = c.seed;
  d["large"] = c.large;
  d["backward"] = c.backward;
  d["description"] = describe(p);
  return d;
}

// The inputs as float32 numpy arrays (exact: every f16 and bf16 value is a float32), canonical
// (B, H, S, d); Python turns them into the case's dtype and array type.
nb::dict input_dict(const verify::ProblemData& data) {
  nb::dict d;
  d["q"] = to_numpy_f32(data.q.to_double());
  d["k"] = to_numpy_f32(data.k.to_double());
  d["v"] = to_numpy_f32(data.v.to_double());
  if (!data.dO.empty()) d["do"] = to_numpy_f32(data.dO.to_double());
  return d;
}

// The case a dict of case_dict's keys describes (a fuzz counterexample, or one written by hand).
verify::VerifyCase case_from_dict(const nb::dict& d) {
  const auto get = [&](const char* key) -> nb::object {
    if (!d.contains(key)) throw InvalidArgument("case", std::string("has no '") + key + "'");
    return d[key];
  };
  verify::VerifyCase c;
  Problem& p = c.problem;
  try {
    p.B = nb::cast<std::int64_t>(get("B"));
    p.H = nb::cast<std::int64_t>(get("H"));
    p.H_kv = d.contains("H_kv") ? nb::cast<std::int64_t>(d["H_kv"]) : p.H;
    p.S_q = nb::cast<std::int64_t>(get("S_q"));
    p.S_k = d.contains("S_k") ? nb::cast<std::int64_t>(d["S_k"]) : p.S_q;
    p.d = nb::cast<std::int64_t>(get("d"));
    p.mask = parse_mask_arg(d.contains("mask") ? nb::cast<std::string>(d["mask"]) : "none",
                            "case['mask']");
    p.dtype = parse_dtype_arg(d.contains("dtype") ? nb::cast<std::string>(d["dtype"]) : "f32",
                              "case['dtype']");
    p.grad_dtype = p.dtype;
    p.scale = d.contains("scale") && !d["scale"].is_none() ? nb::cast<double>(d["scale"])
                                                           : default_scale(p.d);
    c.seed = d.contains("seed") ? nb::cast<std::uint64_t>(d["seed"]) : 0;
    c.large = d.contains("large") && nb::cast<bool>(d["large"]);
    c.backward = !d.contains("backward") || nb::cast<bool>(d["backward"]);
  } catch (const nb::cast_error&) {
    throw nb::type_error(
        "case: B, H, H_kv, S_q, S_k, d, seed must be ints, scale a float, "
        "mask and dtype strings, large and backward bools");
  }
  try {
    validate(p);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument("case", e.what());
  }
  return c;
}

// Hands the case's inputs to `run` and returns what it gave back as the candidate. The caller
// holds the GIL; run's exceptions propagate as nb::python_error.
verify::TensorSet run_candidate(const nb::callable& run, const verify::VerifyCase& c,
                                const verify::ProblemData& data) {
  nb::object out = run(case_dict(c), input_dict(data));
  return candidate_set(nb::cast<nb::dict>(out), c.problem);
}

std::string failure_lines(const verify::CheckResult& r) {
  std::string out;
  for (const verify::TensorReport& t : r.tensors) {
    if (!t.rule.pass)
      out += std::string(verify::tensor_name(t.tensor)) + ": " + t.rule.reason + "\n";
  }
  for (const verify::diagnosis::Finding& f : r.diagnosis.findings)
    out += "[" + f.code + "] " + f.explanation + "\n";
  return out;
}

verify::CaseBounds bounds_of(const FuzzArgs& a) {
  verify::CaseBounds b;
  b.max_seq = a.max_seq;
  b.max_d = a.max_d;
  b.head_dims = a.head_dims;
  b.gqa = a.gqa;
  b.other_scales = a.other_scales;
  b.backward = a.backward;
  b.tile_q = a.tile_q;
  b.tile_k = a.tile_k;
  b.dtypes.clear();
  for (const std::string& t : a.dtypes) b.dtypes.push_back(parse_dtype_arg(t, "dtypes"));
  b.masks.clear();
  for (const std::string& m : a.masks) b.masks.push_back(parse_mask_arg(m, "masks"));
  if (b.dtypes.empty()) throw InvalidArgument("dtypes", "is empty: give one or more");
  if (b.masks.empty()) throw InvalidArgument("masks", "is empty: give one or more");
  return b;
}

// `run` is the Python side: run(case: dict, inputs: dict) -> {"o": ..., "lse": ..., ...} of host
// arrays in the canonical layout. NotImplementedError from it means "this case is not
// supported" (discarded); any other exception fails the case; KeyboardInterrupt ends the run.
FuzzOutcome fuzz(const nb::callable& run, const FuzzArgs& args, const nb::object& progress) {
  const verify::CaseBounds bounds = bounds_of(args);
  verify::Precision precision;
  precision.allow_tf32 = args.allow_tf32;
  precision.three_tf32 = args.three_tf32;
  precision.lse_dtype = verify::parse_lse_dtype(args.lse_dtype, "lse_dtype");
  verify::validate(precision);
  if (args.cases < 0) throw InvalidArgument("max_cases", "must be >= 0");
  if (!(args.seconds >= 0.0)) throw InvalidArgument("seconds", "must be >= 0");
  if (args.max_seq < 1 || args.max_seq > 4096)
    throw InvalidArgument("max_seq", "must be in 1..4096");
  for (std::int64_t d : args.head_dims) {
    if (d < 1 || d > 256)
      throw InvalidArgument("head_dims", "each must be in 1..256, got " + std::to_string(d));
  }
  // Where worst indices are placed: the kernel's tiles when given, else the cpu backend's.
  const std::int64_t report_tile_q = args.tile_q > 0 ? args.tile_q : 64;
  const std::int64_t report_tile_k = args.tile_k > 0 ? args.tile_k : 64;

  FuzzOutcome outcome;
  bool interrupted = false;
  const auto judge = [&](verify::VerifyCase& c) -> verify::CaseOutcome {
    c.allow_tf32 = precision.allow_tf32;
    c.lse_dtype = precision.lse_dtype;
    const verify::ProblemData data = verify::make_problem_data(c.problem, verify::input_options(c));
    verify::TensorSet candidate;
    {
      nb::gil_scoped_acquire gil;
      try {
        candidate = run_candidate(run, c, data);
      } catch (nb::python_error& e) {
        if (e.matches(PyExc_KeyboardInterrupt)) {
          interrupted = true;
          return {};
        }
        if (e.matches(PyExc_NotImplementedError)) {
          return {verify::CaseOutcome::Kind::unsupported, e.what()};
        }
        outcome.report.reset();
        return {verify::CaseOutcome::Kind::fail, std::string("fn raised ") + e.what()};
      } catch (const std::exception& e) {
        // Outputs of the wrong shape or dtype: the function is wrong on this case.
        outcome.report.reset();
        return {verify::CaseOutcome::Kind::fail, std::string("fn's outputs: ") + e.what()};
      }
    }
    CheckReport report{c.problem, {}};
    try {
      report.result =
          verify::check_candidate(data, candidate, report_tile_q, report_tile_k, precision);
    } catch (const std::exception& e) {
      // The judge refused what fn returned (a tensor of the wrong shape): fn is wrong here.
      outcome.report.reset();
      return {verify::CaseOutcome::Kind::fail, std::string("fn's outputs: ") + e.what()};
    }
    if (report.result.passed()) return {};
    verify::CaseOutcome fail{verify::CaseOutcome::Kind::fail, failure_lines(report.result)};
    outcome.report = std::move(report);
    return fail;
  };
  Clock::time_point last_report{};
  const auto on_progress = [&](const verify::FuzzProgress& p) {
    if (progress.is_none()) return;
    // A terminal is slow next to a small case: at most ten redraws a second.
    const Clock::time_point now = Clock::now();
    if (now - last_report < std::chrono::milliseconds(100)) return;
    last_report = now;
    nb::gil_scoped_acquire gil;
    try {
      progress(p.cases, p.failures, p.shrink_steps, p.elapsed_s, p.shrinking);
    } catch (nb::python_error& e) {
      // A broken progress display must not end the run; Python reports it as unraisable.
      e.discard_as_unraisable("flashref.fuzz progress");
    }
  };
  verify::FuzzLimits limits;
  limits.cases = args.cases;
  limits.seconds = args.seconds;
  limits.seed = args.seed;
  limits.interrupted = [&] {
    if (interrupted) return true;
    nb::gil_scoped_acquire gil;
    if (PyErr_CheckSignals() != 0) {
      PyErr_Clear();
      interrupted = true;
    }
    return interrupted;
  };
  verify::FuzzDriverResult r;
  {
    nb::gil_scoped_release release;
    r = verify::run_fuzz_cases(limits, bounds, judge, "fn", on_progress);
  }
  outcome.passed = r.passed;
  outcome.cases = r.progress.cases;
  outcome.unsupported = r.progress.unsupported;
  outcome.shrink_steps = r.progress.shrink_steps;
  outcome.shrink_tries = r.progress.shrink_tries;
  outcome.elapsed_s = r.progress.elapsed_s;
  outcome.interrupted = r.interrupted;
  outcome.gave_up = r.gave_up;
  outcome.failure = r.failure;
  outcome.minimal = r.minimal;
  if (!r.minimal) outcome.report.reset();
  return outcome;
}

// flashref.check_function on one case: run, then the judge. The function's exceptions reach
// the caller.
CheckReport check_case(const nb::callable& run, const nb::dict& case_, bool allow_tf32,
                       bool three_tf32, const std::string& lse_dtype, std::int64_t tile_q,
                       std::int64_t tile_k) {
  verify::VerifyCase c = case_from_dict(case_);
  verify::Precision precision;
  precision.allow_tf32 = allow_tf32;
  precision.three_tf32 = three_tf32;
  precision.lse_dtype = verify::parse_lse_dtype(lse_dtype, "lse_dtype");
  verify::validate(precision);
  c.allow_tf32 = precision.allow_tf32;
  c.lse_dtype = precision.lse_dtype;
  if (tile_q < 1 || tile_k < 1) throw InvalidArgument("tile", "B_q and B_k must be >= 1");
  verify::ProblemData data;
  {
    nb::gil_scoped_release release;
    data = verify::make_problem_data(c.problem, verify::input_options(c));
  }
  const verify::TensorSet candidate = run_candidate(run, c, data);
  CheckReport report{c.problem, {}};
  {
    nb::gil_scoped_release release;
    report.result = verify::check_candidate(data, candidate, tile_q, tile_k, precision);
  }
  return report;
}

}  // namespace

void bind_fuzz(nb::module_& m) {
  nb::class_<FuzzArgs>(m, "FuzzArgs", "flashref.fuzz's keywords, as the C++ driver takes them.")
      .def(nb::init<>())
      .def_rw("cases", &FuzzArgs::cases)
      .def_rw("seconds", &FuzzArgs::seconds)
      .def_rw("seed", &FuzzArgs::seed)
      .def_rw("dtypes", &FuzzArgs::dtypes)
      .def_rw("masks", &FuzzArgs::masks)
      .def_rw("max_seq", &FuzzArgs::max_seq)
      .def_rw("head_dims", &FuzzArgs::head_dims)
      .def_rw("max_d", &FuzzArgs::max_d)
      .def_rw("gqa", &FuzzArgs::gqa)
      .def_rw("other_scales", &FuzzArgs::other_scales)
      .def_rw("backward", &FuzzArgs::backward)
      .def_rw("tile_q", &FuzzArgs::tile_q)
      .def_rw("tile_k", &FuzzArgs::tile_k)
      .def_rw("allow_tf32", &FuzzArgs::allow_tf32)
      .def_rw("three_tf32", &FuzzArgs::three_tf32)
      .def_rw("lse_dtype", &FuzzArgs::lse_dtype);
  nb::class_<FuzzOutcome>(m, "FuzzOutcome",
                          "What the C++ fuzz driver found (flashref.FuzzResult wraps it).")
      .def_ro("passed", &FuzzOutcome::passed)
      .def_ro("cases", &FuzzOutcome::cases)
      .def_ro("unsupported", &FuzzOutcome::unsupported)
      .def_ro("shrink_steps", &FuzzOutcome::shrink_steps)
      .def_ro("shrink_tries", &FuzzOutcome::shrink_tries)
      .def_ro("elapsed_s", &FuzzOutcome::elapsed_s)
      .def_ro("interrupted", &FuzzOutcome::interrupted)
      .def_ro("gave_up", &FuzzOutcome::gave_up)
      .def_ro("failure", &FuzzOutcome::failure)
      .def_prop_ro("minimal",
                   [](const FuzzOutcome& o) -> nb::object {
                     if (!o.minimal) return nb::none();
                     return case_dict(*o.minimal);
                   })
      .def_ro("report", &FuzzOutcome::report);
  m.def("check_case", &check_case, nb::arg("run"), nb::arg("case"), nb::arg("allow_tf32"),
        nb::arg("three_tf32"), nb::arg("lse_dtype"), nb::arg("tile_q"), nb::arg("tile_k"),
        "Generates the case's inputs, calls run(case, inputs) and judges what it returns.");
  m.def(
      "case_inputs",
      [](const nb::dict& case_) {
        const verify::VerifyCase c = case_from_dict(case_);
        return input_dict(verify::make_problem_data(c.problem, verify::input_options(c)));
      },
      nb::arg("case"), "The case's inputs (q, k, v, do) as float32 arrays, (B, H, S, d).");
  m.def("fuzz", &fuzz, nb::arg("run"), nb::arg("args"), nb::arg("progress").none(),
        "Draws cases, calls run(case, inputs) on each, judges what it returns, shrinks the "
        "first failure.");
}

}  // namespace flashref::python

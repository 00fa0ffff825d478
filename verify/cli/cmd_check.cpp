// `flashref check`: judge another kernel's dumped tensors against the gold under the rule, and
// when one fails, say what the kernel most likely did wrong (check.hpp, diagnosis/).
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "command.hpp"
#include "flashref/error.hpp"
#include "flashref/verify/check.hpp"
#include "flashref/verify/report.hpp"
#include "feasibility.hpp"
#include "npy_problem.hpp"
#include "option_parsers.hpp"

namespace flashref::cli {
namespace {

// Where worst indices are placed when --tile is not given: the cpu backend's default tiles,
// the same as `flashref verify`.
constexpr int kReportTile = 64;

struct CheckSettings {
  NpyProblemOptions inputs;
  std::string o, lse, dq, dk, dv;
  std::string grad_dtype;
  std::string lse_dtype = "f32";
  bool allow_tf32 = false;
  bool json = false;
};

std::string sci(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3e", x);
  return buf;
}

// Left-aligned in `width` columns, always followed by at least one space.
std::string pad(std::string s, std::size_t width) {
  if (s.size() + 1 < width) s.append(width - 1 - s.size(), ' ');
  return s + " ";
}

std::string format_check(const Problem& p, const verify::CheckResult& r) {
  std::ostringstream o;
  o << "problem: " << describe(p) << "\n";
  o << "precision: " << verify::describe(r.precision, p) << "\n";
  o << "rule:    " << verify::rule_text() << "\n";
  for (const std::string& n : r.input_notes) o << "inputs:  " << n << "\n";
  o << "\n";
  o << pad("tensor", 7) << pad("max abs err", 12) << pad("baseline err", 13) << pad("k", 3)
    << pad("floor", 11) << pad("= rounding", 11) << pad("+ noise", 11) << pad("+ cancel", 11) << pad("limit", 11)
    << pad("ratio", 9) << pad("verdict", 8) << "rel L2     NaN/inf  worst (b,h,s,i) and tile\n";
  for (const verify::TensorReport& t : r.tensors) {
    const verify::ErrorStats& s = t.candidate;
    char ratio[32];
    std::snprintf(ratio, sizeof ratio, t.rule.ratio < 1000.0 ? "%.2f" : "%.1e", t.rule.ratio);
    std::ostringstream worst;
    worst << "(" << s.worst.b << "," << s.worst.h << "," << s.worst.s;
    if (t.tensor != verify::TensorId::L) worst << "," << s.worst.i;
    worst << ") " << (s.axis == verify::SeqAxis::query ? "q" : "k") << "-tile " << s.worst_tile;
    o << pad(std::string(verify::tensor_name(t.tensor)), 7) << pad(sci(t.rule.candidate_err), 12)
      << pad(sci(t.rule.baseline_err), 13) << pad(std::to_string(static_cast<int>(t.rule.k)), 3)
      << pad(sci(t.rule.floor), 11) << pad(sci(t.rule.floor_rounding), 11)
      << pad(sci(t.rule.floor_noise), 11) << pad(sci(t.rule.floor_cancellation), 11)
      << pad(sci(t.rule.limit), 11) << pad(ratio, 9)
      << pad(t.rule.pass ? "PASS" : "FAIL", 8) << pad(sci(s.rel_l2), 11)
      << pad(std::to_string(s.nonfinite_mismatches()), 9) << worst.str() << "\n";
  }
  if (r.backward_inputs != verify::BackwardInputs::none) {
    o << "gradients: "
      << verify::backward_inputs_text(r.backward_inputs, r.backward_inputs_reason, "the candidate")
      << "\n";
  }
  for (const verify::TensorReport& t : r.tensors) {
    if (!t.rule.pass) o << "  " << verify::tensor_name(t.tensor) << ": " << t.rule.reason << "\n";
  }
  if (!r.passed()) {
    o << "\ndiagnosis:\n";
    if (r.diagnosis.findings.empty()) {
      o << "  no known mistake fits; the worst elements above say where to look\n";
    }
    for (const verify::diagnosis::Finding& f : r.diagnosis.findings) {
      std::string tensors;
      for (verify::TensorId id : f.tensors) {
        tensors += (tensors.empty() ? "" : ", ") + std::string(verify::tensor_name(id));
      }
      o << "  [" << f.code << "] (" << tensors << ") " << f.explanation << "\n";
    }
    for (const verify::diagnosis::Lead& l : r.diagnosis.lead) {
      o << "  lead (" << verify::tensor_name(l.tensor) << "): " << l.summary << "\n";
    }
    if (!r.diagnosis.scope_note.empty()) o << "  (" << r.diagnosis.scope_note << ")\n";
  }
  o << "\nresult: " << (r.passed() ? "PASS" : "FAIL") << "\n";
  return o.str();
}

nlohmann::json check_json(const Problem& p, const verify::CheckResult& r) {
  nlohmann::json tensors = nlohmann::json::array();
  for (const verify::TensorReport& t : r.tensors) tensors.push_back(verify::to_json(t));
  nlohmann::json j = {
      {"command", "check"},
      {"problem", verify::to_json(p)},
      {"dtype", std::string(dtype_name(p.dtype))},
      {"grad_dtype", std::string(dtype_name(p.grad_dtype))},
      {"precision", verify::to_json(r.precision, p)},
      {"rule", verify::rule_text()},
      {"tensors", tensors},
      {"baseline_backward",
       verify::to_json(r.backward_inputs, r.backward_inputs_reason, "the candidate")},
      {"findings", verify::diagnosis::to_json(r.diagnosis)["findings"]},
      {"lead", verify::diagnosis::to_json(r.diagnosis)["lead"]},
      {"input_notes", r.input_notes},
      {"passed", r.passed()}};
  if (!r.diagnosis.scope_note.empty()) j["diagnosis_scope"] = r.diagnosis.scope_note;
  return j;
}

int run_check(const CheckSettings& s) {
  // The options first, the files after: a usage error costs no reading.
  auto [tile_q, tile_k] = s.inputs.tiles();
  const std::optional<DType> grad_dtype =
      s.grad_dtype.empty() ? std::nullopt
                           : std::optional(parse_dtype_option(s.grad_dtype, "--grad-dtype"));
  NpyProblem input = load_npy_problem(s.inputs);
  Problem& p = input.data.problem;
  if (grad_dtype) p.grad_dtype = *grad_dtype;
  verify::Precision precision;
  precision.allow_tf32 = s.allow_tf32;
  precision.lse_dtype = verify::parse_lse_dtype(s.lse_dtype);

  if (input.data.dO.empty() && (!s.dq.empty() || !s.dk.empty() || !s.dv.empty())) {
    throw InvalidArgument("--do", "checking --dq, --dk or --dv needs --do, the gradient of O");
  }
  verify::TensorSet candidate;
  const std::pair<const std::string*, verify::TensorId> files[] = {{&s.o, verify::TensorId::O},
                                                                   {&s.lse, verify::TensorId::L},
                                                                   {&s.dq, verify::TensorId::dQ},
                                                                   {&s.dk, verify::TensorId::dK},
                                                                   {&s.dv, verify::TensorId::dV}};
  for (const auto& [path, id] : files) {
    if (!path->empty()) candidate[id] = load_candidate(*path, id, p);
  }
  if (candidate.empty()) {
    throw InvalidArgument("--o", "nothing to check: give --o (and --lse, --dq, --dk, --dv)");
  }
  if (tile_q == 0) tile_q = kReportTile;
  if (tile_k == 0) tile_k = kReportTile;
  // Before any work: the gold and the baseline must fit in memory (feasibility.hpp).
  require_memory(s.inputs.q, p, judge_need(p, !input.data.dO.empty(), 0));
  verify::CheckResult result =
      verify::check_candidate(input.data, candidate, tile_q, tile_k, precision);
  // Values the files held finite that the problem's dtype could not: named first.
  for (auto n = input.overflows.rbegin(); n != input.overflows.rend(); ++n) {
    result.input_notes.insert(result.input_notes.begin(), "input " + *n);
  }
  if (s.json) {
    std::cout << check_json(p, result).dump(2) << "\n";
  } else {
    std::cout << format_check(p, result);
  }
  return result.passed() ? kExitPass : kExitFail;
}

}  // namespace

Command add_check_command(CLI::App& app) {
  auto settings = std::make_shared<CheckSettings>();
  CLI::App* sub = app.add_subcommand(
      "check",
      "Judge another kernel's outputs, dumped as .npy, against the gold reference under the\n"
      "baseline-relative rule (the baseline is the naive reference in the given dtype), and\n"
      "diagnose the failures: a missing scale, log base 2, the mask, the last partial tile, a\n"
      "wrong D, ... Each finding has a stable code.\n"
      "Exit 0: every given tensor passes; 1: one fails; 2: bad input (the message names the\n"
      "file).");
  settings->inputs.add_to(
      *sub, "B_q,B_k: your kernel's tiles, to place the worst elements in them (default 64,64)");
  sub->add_option("--o", settings->o, "the candidate's O: the shape of Q");
  sub->add_option("--lse", settings->lse, "the candidate's L (logsumexp): (B, H, S_q) or (B, S_q)");
  sub->add_option("--dq", settings->dq, "the candidate's dQ (needs --do)");
  sub->add_option("--dk", settings->dk, "the candidate's dK (needs --do)");
  sub->add_option("--dv", settings->dv, "the candidate's dV (needs --do)");
  sub->add_option("--grad-dtype", settings->grad_dtype,
                  "precision the gradients were stored in (default: --dtype)");
  sub->add_flag("--allow-tf32", settings->allow_tf32,
                "the candidate's float32 products take TF32 inputs (Triton's tl.dot default): "
                "judge it against the TF32 baseline");
  sub->add_option("--lse-dtype", settings->lse_dtype,
                  "precision the candidate stored L in: f32 (FlashAttention's), bf16 or f16; "
                  "L's floor follows it")
      ->capture_default_str();
  sub->add_flag("--json", settings->json, "print the report as JSON");
  return {sub, [settings] { return run_check(*settings); }};
}

}  // namespace flashref::cli

// `flashref check`: judge another kernel's dumped tensors against the gold under the rule, and
// when one fails, say what the kernel most likely did wrong (check.hpp, diagnosis/).
#include <iostream>
#include <memory>
#include <optional>

#include <nlohmann/json.hpp>

#include "command.hpp"
#include "feasibility.hpp"
#include "flashref/error.hpp"
#include "flashref/verify/check.hpp"
#include "flashref/verify/check_report.hpp"
#include "flashref/verify/report.hpp"
#include "npy_problem.hpp"
#include "option_parsers.hpp"
#include "states_files.hpp"

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
  bool three_tf32 = false;
  bool json = false;
  std::string states, select;  // --states DIR, --select b,h[,i]
};

int run_check(const CheckSettings& s) {
  // The options first, the files after: a usage error costs no reading.
  auto [tile_q, tile_k] = s.inputs.tiles();
  const std::optional<DType> grad_dtype =
      s.grad_dtype.empty() ? std::nullopt
                           : std::optional(parse_dtype_option(s.grad_dtype, "--grad-dtype"));
  // The states: the kernel's own tiles, and the mirror has no TF32 products.
  verify::StatesGrid states_grid{tile_q, tile_k};
  if (!s.states.empty()) {
    if (tile_q == 0 || tile_k == 0) {
      throw InvalidArgument("--tile", "--states needs your kernel's tiles: give --tile B_q,B_k");
    }
    if (s.allow_tf32) {
      throw InvalidArgument("--allow-tf32",
                            "the states are judged against the cpu mirror, "
                            "which has no TF32 products: drop --allow-tf32 or "
                            "--states");
    }
    if (s.three_tf32) {
      throw InvalidArgument("--three-tf32",
                            "the states are judged against the cpu mirror, "
                            "whose products are float32: drop --three-tf32 or "
                            "--states");
    }
    if (!s.select.empty()) parse_select(s.select, states_grid);
  } else if (!s.select.empty()) {
    throw InvalidArgument("--select",
                          "--select says which part of the problem --states holds: "
                          "give --states DIR");
  }
  verify::Precision precision;
  precision.allow_tf32 = s.allow_tf32;
  precision.three_tf32 = s.three_tf32;
  precision.lse_dtype = verify::parse_lse_dtype(s.lse_dtype);
  verify::validate(precision);
  NpyProblem input = load_npy_problem(s.inputs);
  Problem& p = input.data.problem;
  if (grad_dtype) p.grad_dtype = *grad_dtype;

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
  if (candidate.empty() && s.states.empty()) {
    throw InvalidArgument("--o",
                          "nothing to check: give --o (and --lse, --dq, --dk, --dv), or "
                          "--states DIR");
  }
  std::optional<verify::StatesGrid> grid;
  std::optional<verify::StatesShape> shape;
  verify::CandidateStates states;
  verify::CandidateBackwardStates backward_states;
  std::vector<std::string> state_files, backward_files;
  bool forward_given = false, backward_given = false;
  if (!s.states.empty()) {
    grid = states_grid;
    shape = verify::states_shape(p, *grid);
    forward_given = has_forward_states(s.states);
    backward_given = has_backward_states(s.states);
    if (backward_given && input.data.dO.empty()) {
      throw InvalidArgument("--do", s.states +
                                        " holds backward states (D, P, dP, dS, dQ, dV, "
                                        "dK): judging them needs --do, the gradient of O");
    }
    if (forward_given || !backward_given) {
      require_states_fit(p, *shape);
      states = read_states(s.states, p, *shape, state_files);
    }
    if (backward_given) {
      require_backward_states_fit(p, *shape);
      backward_states = read_backward_states(s.states, p, *shape, backward_files);
    }
  }
  if (tile_q == 0) tile_q = kReportTile;
  if (tile_k == 0) tile_k = kReportTile;
  // Before any work: the gold and the baseline must fit in memory (feasibility.hpp).
  MemoryNeed need = judge_need(p, !input.data.dO.empty(), 0);
  if (forward_given)
    need.bytes += 8.0 * 8.0 * shape->elements();  // gold, sigmas, baseline, candidate
  // The backward's gold, its three floors, the baseline and the candidate.
  if (backward_given) need.bytes += 6.0 * 8.0 * shape->backward_elements();
  require_memory(s.inputs.q, p, need);
  std::optional<verify::CheckResult> result;
  if (!candidate.empty()) {
    result = verify::check_candidate(input.data, candidate, tile_q, tile_k, precision);
    // Values the files held finite that the problem's dtype could not: named first.
    for (auto n = input.overflows.rbegin(); n != input.overflows.rend(); ++n) {
      result->input_notes.insert(result->input_notes.begin(), "input " + *n);
    }
  }
  std::optional<verify::StatesReport> report;
  std::optional<verify::BackwardStatesReport> backward;
  if (forward_given) report = verify::judge_forward_states(input.data, *grid, states);
  if (backward_given) {
    backward = verify::judge_backward_states(input.data, *grid, backward_states);
  }
  const bool passed = (!result || result->passed()) && (!report || report->passed()) &&
                      (!backward || backward->passed());
  if (s.json) {
    nlohmann::json j = result ? verify::to_json(p, *result)
                              : nlohmann::json{{"command", "check"},
                                               {"problem", verify::to_json(p)},
                                               {"dtype", std::string(dtype_name(p.dtype))}};
    if (report) {
      j["states"] = verify::to_json(*report);
      j["states"]["files"] = state_files;
      j["states"]["B_q"] = shape->B_q;
      j["states"]["B_k"] = shape->B_k;
      j["first_divergence"] = j["states"]["first_divergence"];
    }
    if (backward) {
      j["backward_states"] = verify::to_json(*backward);
      j["backward_states"]["files"] = backward_files;
      j["backward_states"]["B_q"] = shape->B_q;
      j["backward_states"]["B_k"] = shape->B_k;
      // Algorithm 1 runs first: its divergence, when there is one, is the first.
      if (!report || report->passed()) {
        j["first_divergence"] = j["backward_states"]["first_divergence"];
      }
    }
    j["passed"] = passed;
    std::cout << j.dump(2) << "\n";
  } else {
    if (result) {
      std::string text = format_check(p, *result);
      // One verdict at the end, after the states.
      if (report || backward) text.erase(text.rfind("\nresult: "));
      std::cout << text;
    } else {
      std::cout << "problem: " << describe(p) << "\n";
    }
    if (report) std::cout << "\n" << format_states(*report, *shape, state_files);
    if (backward) std::cout << "\n" << format_backward_states(*backward, *shape, backward_files);
    if (report || backward) std::cout << "\nresult: " << (passed ? "PASS" : "FAIL") << "\n";
  }
  return passed ? kExitPass : kExitFail;
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
  sub->add_flag("--three-tf32", settings->three_tf32,
                "the candidate's float32 products are 3xTF32 (each operand split into two TF32 "
                "halves: CUTLASS's FastF32, PyTorch's memory-efficient kernel, Triton's "
                "tf32x3): judge it as float32 with each product's own error in the floor");
  sub->add_option("--lse-dtype", settings->lse_dtype,
                  "precision the candidate stored L in: f32 (FlashAttention's), bf16 or f16; "
                  "L's floor follows it")
      ->capture_default_str();
  sub->add_option("--states", settings->states,
                  "a folder of your kernel's per-step states (m.npy, l.npy, acc.npy; with --do "
                  "also D.npy, P.npy, dP.npy, dS.npy, dQ.npy, dV.npy, dK.npy; "
                  "docs/checking-your-kernel.md, \"States\"): find the first step (b, h, i, j) "
                  "where they leave Algorithm 1 (2); needs --tile")
      ->group("States");
  sub->add_option("--select", settings->select,
                  "b,h or b,h,i: the states hold only batch b, head h (and query tile i)")
      ->group("States");
  sub->add_flag("--json", settings->json, "print the report as JSON");
  return {sub, [settings] { return run_check(*settings); }};
}

}  // namespace flashref::cli

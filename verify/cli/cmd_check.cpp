// `flashref check`: judge another kernel's dumped tensors against the gold under the rule, and
// when one fails, say what the kernel most likely did wrong (check.hpp, diagnosis/).
#include <iostream>
#include <memory>
#include <optional>

#include <nlohmann/json.hpp>

#include "command.hpp"
#include "flashref/error.hpp"
#include "flashref/verify/check.hpp"
#include "flashref/verify/check_report.hpp"
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
  const verify::CheckResult result =
      verify::check_candidate(input.data, candidate, tile_q, tile_k, precision);
  if (s.json) {
    std::cout << verify::to_json(p, result).dump(2) << "\n";
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

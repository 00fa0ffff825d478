// `flashref verify`: run one problem on each backend, judge O, L, dQ, dK, dV against the gold
// under the baseline-relative rule, print a table (or JSON), exit 0 / 1 / 2.
#include <iostream>
#include <memory>

#include "command.hpp"
#include "feasibility.hpp"
#include "flashref/backend.hpp"
#include "flashref/error.hpp"
#include "flashref/verify/report.hpp"
#include "flashref/verify/verification.hpp"
#include "option_parsers.hpp"
#include "problem_options.hpp"
#include "ring_options.hpp"

namespace flashref::cli {
namespace {

struct VerifySettings {
  ProblemOptions problem;
  std::uint64_t seed = 0;
  bool backward = false;
  bool forward_only = false;
  bool large = false;
  bool allow_tf32 = false;
  bool nondeterministic = false;
  std::string lse_dtype = "f32";
  int ranks = 0;
  CLI::Option* ranks_opt = nullptr;
  bool json = false;
};

int run_verify(const VerifySettings& s) {
  verify::VerifyCase c;
  c.problem = s.problem.problem();
  std::tie(c.tile_q, c.tile_k) = s.problem.tiles();
  c.threads = s.problem.threads();
  c.seed = s.seed;
  c.layout = s.problem.layout();
  c.large = s.large;
  if (s.backward && s.forward_only) {
    throw InvalidArgument("--forward-only", "contradicts --backward: give one of them");
  }
  c.backward = !s.forward_only;
  c.allow_tf32 = s.allow_tf32;
  c.deterministic = !s.nondeterministic;
  c.lse_dtype = verify::parse_lse_dtype(s.lse_dtype);

  const bool ring = s.ranks_opt->count() > 0;
  c.ranks = ring ? checked_ranks(s.ranks) : 0;
  const std::vector<std::string> backends = s.problem.backends(backend_names());
  // Before any work: the gold and the baseline must fit in memory (feasibility.hpp).
  require_memory("--shape", c.problem, judge_need(c.problem, c.backward, c.threads));
  // An explicitly requested backend that cannot run this problem is a usage error; by default
  // such a backend is listed as unavailable and the run goes on without it.
  if (s.problem.backends_given()) {
    for (const std::string& name : backends) {
      const Support support = make_backend(name)->supports(c.problem);
      if (!support.ok) {
        throw Unsupported("backend '" + name + "' cannot run this problem: " + support.reason);
      }
    }
  }
  const verify::VerifyReport report = verify::run_verification(c, backends);
  if (s.json) {
    std::cout << verify::to_json(report).dump(2) << "\n";
  } else {
    std::cout << verify::format_table(report);
  }
  return report.passed() ? kExitPass : kExitFail;
}

}  // namespace

Command add_verify_command(CLI::App& app) {
  auto settings = std::make_shared<VerifySettings>();
  CLI::App* sub = app.add_subcommand(
      "verify",
      "Run one problem on each backend and judge O, L (and dQ, dK, dV) against the gold\n"
      "reference under the baseline-relative rule. With no options: B=2, H=4, H_kv=2, S=300,\n"
      "d=64, causal, bf16, forward and backward, on every backend of the build.\n"
      "Exit 0: all checks pass; 1: a check failed; 2: bad usage or input, or a requested\n"
      "backend cannot run the problem.");
  const verify::VerifyCase d = verify::default_case();
  settings->problem.add_to(*sub, {"2,4,300,300,64", d.problem.H_kv, "causal", "bf16"});
  add_seed_option(*sub, settings->seed, "seed of the random inputs");
  sub->add_flag("--backward", settings->backward, "judge dQ, dK, dV too (the default)");
  sub->add_flag("--forward-only", settings->forward_only, "judge O and L only");
  sub->add_flag("--large", settings->large,
                "large-magnitude Q and K (scores of several hundred) to stress the softmax");
  sub->add_flag("--allow-tf32", settings->allow_tf32,
                "let f32 device backends use TF32 (the baseline is then TF32 too)");
  add_nondeterministic_flag(*sub, settings->nondeterministic);
  sub->add_option("--lse-dtype", settings->lse_dtype,
                  "judge each backend's L as stored in f32, bf16 or f16 (rounded to it; L's "
                  "floor follows it)")
      ->capture_default_str();
  settings->ranks_opt = add_ranks_option(*sub, settings->ranks);
  sub->add_flag("--json", settings->json, "print the report as JSON");
  return {sub, [settings] { return run_verify(*settings); }};
}

}  // namespace flashref::cli

// `flashref bench`: forward (and backward, forward+backward) medians after warm-up, GFLOP/s
// and peak extra memory, for one problem or a named sweep (verify/sweeps.cpp).
#include <iostream>
#include <memory>

#include "command.hpp"
#include "feasibility.hpp"
#include "flashref/backend.hpp"
#include "flashref/error.hpp"
#include "flashref/ring/ring_backend.hpp"
#include "flashref/verify/bench/bench.hpp"
#include "flashref/verify/bench/sweeps.hpp"
#include "option_parsers.hpp"
#include "problem_options.hpp"
#include "ring_options.hpp"

namespace flashref::cli {
namespace {

// Bounds on the repetitions: a median of 1000 runs is as stable as a timer gets; more is a
// typo that would run for hours.
constexpr int kMaxReps = 1000;
constexpr int kMaxWarmup = 100;

struct BenchSettings {
  ProblemOptions problem;
  bool backward = false;
  int reps = 5;
  int warmup = 1;
  std::uint64_t seed = 0;
  bool no_flush = false;
  bool allow_tf32 = false;
  bool nondeterministic = false;
  std::string sweep;
  bool list_sweeps = false;
  int ranks = 0;
  CLI::Option* ranks_opt = nullptr;
  bool json = false;
};

int run_bench(const BenchSettings& s) {
  if (s.list_sweeps) {
    for (const verify::Sweep& sw : verify::sweeps()) {
      std::cout << sw.name << ": " << sw.description << "\n";
    }
    return kExitPass;
  }
  const auto [tile_q, tile_k] = s.problem.tiles();
  const int threads = s.problem.threads();  // checked: 0 to kMaxThreads
  if (s.reps < 1 || s.reps > kMaxReps) {
    throw InvalidArgument("--reps", "must be from 1 to " + std::to_string(kMaxReps) + ", got " +
                                        std::to_string(s.reps));
  }
  if (s.warmup < 0 || s.warmup > kMaxWarmup) {
    throw InvalidArgument("--warmup", "must be from 0 to " + std::to_string(kMaxWarmup) +
                                          ", got " + std::to_string(s.warmup));
  }
  if (!s.sweep.empty() && !s.problem.given_problem_option().empty()) {
    throw InvalidArgument(s.problem.given_problem_option(),
                          "conflicts with --sweep, whose points define their own problems: give "
                          "one or the other");
  }
  verify::BenchConfig base;
  base.exec.tile_q = tile_q;
  base.exec.tile_k = tile_k;
  base.exec.num_threads = threads;
  base.exec.allow_tf32 = s.allow_tf32;
  base.exec.deterministic = !s.nondeterministic;
  base.layout = s.problem.layout();
  base.warmup = s.warmup;
  base.reps = s.reps;
  base.seed = s.seed;
  base.flush_l2 = !s.no_flush;

  std::vector<verify::SweepPoint> points;
  std::vector<std::string> fallback = backend_names();
  std::string sweep_name;
  if (!s.sweep.empty()) {
    const verify::Sweep& sweep = verify::find_sweep(s.sweep);
    points = sweep.points();
    if (!sweep.backends.empty()) fallback = sweep.backends;
    sweep_name = sweep.name;
  } else {
    points.push_back({s.problem.problem(), s.backward, ""});
  }
  const bool ring = s.ranks_opt->count() > 0;
  const int ranks = ring ? checked_ranks(s.ranks) : 0;
  const std::vector<std::string> names =
      s.problem.backends(fallback);
  // Before any work: every point must fit in memory on every backend (feasibility.hpp).
  for (const verify::SweepPoint& point : points) {
    for (const std::string& name : names) {
      require_memory(sweep_name.empty() ? "--shape" : "--sweep", point.problem,
                     backend_need(point.problem, name, point.backward, threads, tile_q, tile_k));
    }
  }

  std::vector<verify::BenchRow> rows;
  for (const verify::SweepPoint& point : points) {
    for (const std::string& name : names) {
      std::unique_ptr<Backend> backend = make_backend(name);
      // With --ranks the backend runs as the ranks of an in-process ring, named "ringR(name)".
      if (ring) backend = ring::make_ring_backend(std::move(backend), ranks);
      const Support support = backend->supports(point.problem);
      if (!support.ok) {
        // Asked for by name on a single problem: a usage error. Otherwise skip, and say so.
        if (s.problem.backends_given() && sweep_name.empty()) {
          throw Unsupported("backend '" + name + "' cannot run this problem: " + support.reason);
        }
        std::cerr << "flashref bench: skipping " << name << " (" << support.reason << ")\n";
        continue;
      }
      verify::BenchConfig config = base;
      config.problem = point.problem;
      config.backward = point.backward;
      if (!s.json) {
        const std::string plan = backend->plan(point.problem, config.exec);
        std::cerr << "flashref bench: " << name << ": " << describe(point.problem)
                  << (plan.empty() ? "" : " on " + plan) << "\n";
      }
      for (verify::BenchRow& row : verify::bench_backend(*backend, config)) {
        row.sweep = sweep_name;
        row.label = point.label;
        rows.push_back(std::move(row));
      }
    }
  }
  if (s.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const verify::BenchRow& row : rows) out.push_back(verify::to_json(row));
    std::cout << out.dump(2) << "\n";
  } else {
    std::cout << verify::format_bench_table(rows);
    if (!rows.empty()) {
      std::cout << "timer: " << rows.front().timer << ", median of " << s.reps << " after "
                << s.warmup << " warm-up; memory: " << rows.front().memory_method << "\n";
    }
  }
  return kExitPass;
}

}  // namespace

Command add_bench_command(CLI::App& app) {
  auto settings = std::make_shared<BenchSettings>();
  CLI::App* sub = app.add_subcommand(
      "bench",
      "Time backends: forward (with --backward also backward and forward+backward) medians\n"
      "after warm-up, GFLOP/s (FlashAttention's FLOP count), and peak extra memory.\n"
      "A single problem from the options, or a named sweep (--sweep, --list-sweeps).");
  settings->problem.add_to(*sub, {"1,8,2048,2048,64", 8, "causal", "f32"});
  sub->add_flag("--backward", settings->backward, "also time backward and forward+backward");
  sub->add_option("--reps", settings->reps,
                  "timed repetitions, 1 to " + std::to_string(kMaxReps) + " (the median is reported)")
      ->capture_default_str();
  sub->add_option("--warmup", settings->warmup,
                  "untimed runs first, 0 to " + std::to_string(kMaxWarmup))
      ->capture_default_str();
  add_seed_option(*sub, settings->seed, "seed of the random inputs");
  sub->add_flag("--no-flush", settings->no_flush, "device backends: do not flush L2 between runs");
  sub->add_flag("--allow-tf32", settings->allow_tf32, "let f32 device backends use TF32");
  add_nondeterministic_flag(*sub, settings->nondeterministic);
  sub->add_option("--sweep", settings->sweep, "run a named sweep instead of one problem");
  sub->add_flag("--list-sweeps", settings->list_sweeps, "list the named sweeps and exit");
  settings->ranks_opt = add_ranks_option(*sub, settings->ranks);
  sub->add_flag("--json", settings->json, "print an array of rows, one per (backend, pass)");
  return {sub, [settings] { return run_bench(*settings); }};
}

}  // namespace flashref::cli

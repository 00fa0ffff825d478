// `flashref fuzz`: property-based fuzzing of one backend against the gold, with the generator
// the test suite uses, a progress line on a terminal, shrinking, and the command that
// reproduces the minimal failure.
#include <signal.h>
#include <unistd.h>

#include <csignal>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "command.hpp"
#include "feasibility.hpp"
#include "flashref/backend.hpp"
#include "flashref/cpu/faults.hpp"
#include "flashref/error.hpp"
#include "flashref/verify/report.hpp"
#include "fuzz_session.hpp"
#include "option_parsers.hpp"
#include "problem_options.hpp"
#include "ring_options.hpp"

namespace flashref::cli {
namespace {

constexpr std::int64_t kDefaultCases = 100;
// Exit code of a run ended by SIGINT before a failure: 128 + SIGINT, as a shell reports it.
constexpr int kExitInterrupted = 130;

volatile std::sig_atomic_t g_interrupted = 0;
extern "C" void on_sigint(int) {
  g_interrupted = 1;
}
// Fuzzing is many small cases: generators.hpp bounds B * H * S_q * S_k * d by 2^23, so longer
// sequences only draw lopsided shapes, and one gold of 4096 x 4096 already takes seconds.
constexpr std::int64_t kMaxSeq = 4096;

struct FuzzOptions {
  FuzzSettings settings;
  std::string dtypes;  // comma list
  std::string masks;   // comma list
  std::string plant_fault;
  std::string lse_dtype = "f32";
  int ranks = 0;
  CLI::Option* ranks_opt = nullptr;
  bool forward_only = false;
  bool nondeterministic = false;
  bool json = false;
  CLI::Option* cases_opt = nullptr;
  CLI::Option* seconds_opt = nullptr;
  CLI::Option* dtypes_opt = nullptr;
  CLI::Option* masks_opt = nullptr;
};

// A comma list parsed by `parse`; empty keeps `fallback`.
template <class T, class Parse>
std::vector<T> parse_list(const std::string& text, Parse parse, std::vector<T> fallback) {
  if (text.empty()) return fallback;
  std::vector<T> out;
  for (const std::string& part : split_commas(text)) out.push_back(parse(part));
  return out;
}

void print_progress(const FuzzProgress& p, const std::string& backend) {
  // Redraw at most ten times a second; a terminal is slow compared with a small case.
  static double last = -1.0;
  if (p.elapsed_s - last < 0.1) return;
  last = p.elapsed_s;
  const double rate = p.elapsed_s > 0.0 ? static_cast<double>(p.cases) / p.elapsed_s : 0.0;
  std::fprintf(stderr, "\rfuzz %s: %lld cases, %lld failures, %.1f cases/s, %.1f s",
               backend.c_str(), static_cast<long long>(p.cases), static_cast<long long>(p.failures),
               rate, p.elapsed_s);
  if (p.shrinking) {
    std::fprintf(stderr, "; shrinking: %lld steps (%lld tried)",
                 static_cast<long long>(p.shrink_steps), static_cast<long long>(p.shrink_tries));
  }
  std::fprintf(stderr, "   ");
  std::fflush(stderr);
}

nlohmann::json case_json(const verify::VerifyCase& c) {
  return {{"problem", verify::to_json(c.problem)},
          {"tile_q", c.tile_q},
          {"tile_k", c.tile_k},
          {"seed", c.seed},
          {"layout", std::string(verify::layout_name(c.layout))},
          {"large", c.large},
          {"backward", c.backward},
          {"description", verify::describe(c)}};
}

int run_fuzz_command(FuzzOptions& o) {
  FuzzSettings& s = o.settings;
  const bool by_cases = o.cases_opt->count() > 0, by_time = o.seconds_opt->count() > 0;
  if (by_cases && s.cases < 1) {
    throw InvalidArgument("--cases", "must be >= 1, got " + std::to_string(s.cases));
  }
  if (by_time && !(std::isfinite(s.seconds) && s.seconds > 0.0)) {
    throw InvalidArgument("--seconds", "must be a finite number > 0, got " + std::to_string(s.seconds));
  }
  if (!by_cases && !by_time) s.cases = kDefaultCases;
  if (s.bounds.max_seq < 1 || s.bounds.max_seq > kMaxSeq) {
    throw InvalidArgument("--max-seq", "must be from 1 to " + std::to_string(kMaxSeq) + ", got " +
                                           std::to_string(s.bounds.max_seq));
  }
  for (const auto& [option, list] : {std::pair{o.dtypes_opt, &o.dtypes}, std::pair{o.masks_opt, &o.masks}}) {
    if (option->count() > 0 && list->empty()) {
      throw InvalidArgument(option->get_name(), "is empty: give one or more, comma separated "
                                                "(leave the option out for all of them)");
    }
  }
  s.bounds.dtypes = parse_list<DType>(o.dtypes, parse_dtype, s.bounds.dtypes);
  s.bounds.masks = parse_list<Mask>(o.masks, parse_mask, s.bounds.masks);
  // Before any work: the largest case the bounds allow must fit in memory (feasibility.hpp).
  {
    const Problem largest = make_problem(1, 1, 1, s.bounds.max_seq, s.bounds.max_seq,
                                         s.bounds.max_d, Mask::none, DType::f32);
    require_memory("--max-seq", largest, judge_need(largest, !o.forward_only, 0));
  }
  s.bounds.backward = !o.forward_only;
  s.precision.lse_dtype = verify::parse_lse_dtype(o.lse_dtype);
  s.deterministic = !o.nondeterministic;
  if (o.ranks_opt->count() > 0) s.ranks = checked_ranks(o.ranks);
  // The CUDA kernels are compiled for head dims that are multiples of 8.
  if (s.backend == "cuda") s.bounds.d_multiple = 8;
  // The planted faults' names as given, for the report: `flashref verify` runs the backend
  // without them, so the reproduce command alone does not plant them.
  std::vector<std::string> planted;
  std::string planted_list;
  if (!o.plant_fault.empty()) {
    if (s.backend != "cpu") {
      throw InvalidArgument("--plant-fault", "planted faults exist only in the cpu backend");
    }
    for (const std::string& name : split_commas(o.plant_fault)) {
      s.planted_faults |= static_cast<std::uint32_t>(cpu::parse_fault(name));
      planted.push_back(name);
      planted_list += (planted_list.empty() ? "" : ", ") + name;
    }
  }
  // SIGINT ends the run with its summary (a second one kills: SA_RESETHAND).
  struct sigaction action {};
  action.sa_handler = on_sigint;
  action.sa_flags = SA_RESETHAND;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  s.interrupted = [] { return g_interrupted != 0; };
  const bool terminal = !o.json && isatty(STDERR_FILENO) != 0;
  const FuzzResult r = run_fuzz(s, [&](const FuzzProgress& p) {
    if (terminal) print_progress(p, s.backend);
  });
  if (terminal) std::fprintf(stderr, "\n");

  const FuzzProgress& p = r.progress;
  const std::string reproduce =
      r.minimal ? verify::reproduce_command(*r.minimal, {s.backend}) : std::string();
  if (o.json) {
    nlohmann::json j = {
        {"command", "fuzz"}, {"backend", s.backend},         {"seed", s.seed},
        {"cases", p.cases},  {"unsupported", p.unsupported}, {"seconds", p.elapsed_s},
        {"passed", r.passed}, {"interrupted", r.interrupted}};
    j["deterministic"] = s.deterministic;
    j["precision"] = {{"allow_tf32", s.precision.allow_tf32},
                      {"lse_dtype", std::string(dtype_name(s.precision.lse_dtype))}};
    if (r.minimal) {
      j["failure"] = {{"case", case_json(*r.minimal)},
                      {"reason", r.failure},
                      {"shrink_steps", p.shrink_steps},
                      {"reproduce", reproduce}};
      if (!planted.empty()) j["failure"]["planted_faults"] = planted;
    }
    if (!r.gave_up.empty()) j["gave_up"] = r.gave_up;
    std::cout << j.dump(2) << "\n";
  } else {
    std::printf("fuzz %s: seed %llu, %lld cases in %.1f s", s.backend.c_str(),
                static_cast<unsigned long long>(s.seed), static_cast<long long>(p.cases),
                p.elapsed_s);
    if (p.unsupported > 0)
      std::printf(" (%lld unsupported, skipped)", static_cast<long long>(p.unsupported));
    std::printf("\n");
    if (r.interrupted) {
      std::printf("interrupted (SIGINT) after %lld cases; rerun with --seed %llu for the same "
                  "cases\n",
                  static_cast<long long>(p.cases), static_cast<unsigned long long>(s.seed));
    }
    if (r.minimal) {
      std::printf("FAIL: shrunk in %lld steps (%lld tried) to a minimal case:\n  %s\n",
                  static_cast<long long>(p.shrink_steps), static_cast<long long>(p.shrink_tries),
                  verify::describe(*r.minimal).c_str());
      std::printf("%s", r.failure.c_str());
      std::printf("reproduce: %s\n", reproduce.c_str());
      if (!planted.empty()) {
        std::printf(
            "planted faults: %s (the command runs the cpu backend without them; the "
            "tests plant them with cpu::make_backend({.faults = ...}))\n",
            planted_list.c_str());
      }
    } else if (!r.gave_up.empty()) {
      std::printf("gave up: %s\n", r.gave_up.c_str());
    } else if (r.interrupted) {
      std::printf("no failure in the cases run\n");
    } else {
      std::printf("PASS\n");
    }
  }
  if (r.minimal) return kExitFail;
  if (r.interrupted) return kExitInterrupted;
  return r.passed ? kExitPass : kExitUsage;
}

}  // namespace

Command add_fuzz_command(CLI::App& app) {
  auto o = std::make_shared<FuzzOptions>();
  CLI::App* sub = app.add_subcommand(
      "fuzz",
      "Property-based fuzzing of one backend against the gold: random problems (every mask,\n"
      "dtype, GQA/MQA, awkward shapes and tiles, large inputs), forward and backward, judged\n"
      "by the rule; the same generator as the test suite. The first failure is shrunk to a\n"
      "minimal case and printed with the `flashref verify` command that reproduces it.\n"
      "Exit 0: all cases pass; 1: a case failed; 2: bad usage; 130: interrupted (SIGINT) with\n"
      "no failure so far (the summary says how many cases ran and the seed).");
  sub->add_option("--backend", o->settings.backend, "backend to fuzz")->capture_default_str();
  o->cases_opt = sub->add_option("--cases", o->settings.cases,
                                 "number of cases (default " + std::to_string(kDefaultCases) + ")");
  o->seconds_opt = sub->add_option("--seconds", o->settings.seconds, "run for this long instead");
  o->cases_opt->excludes(o->seconds_opt);
  add_seed_option(*sub, o->settings.seed, "RapidCheck seed: the same seed, the same cases");
  sub->add_option("--max-seq", o->settings.bounds.max_seq,
                  "largest S_q and S_k drawn, at most " + std::to_string(kMaxSeq))
      ->capture_default_str();
  o->dtypes_opt =
      sub->add_option("--dtype", o->dtypes, "dtypes to draw from, comma separated (default all)");
  o->masks_opt =
      sub->add_option("--mask", o->masks, "masks to draw from, comma separated (default all)");
  sub->add_flag("--forward-only", o->forward_only, "judge O and L only");
  sub->add_flag("--allow-tf32", o->settings.precision.allow_tf32,
                "judge every case with TF32 products allowed (the baseline is TF32 too)");
  add_nondeterministic_flag(*sub, o->nondeterministic);
  sub->add_option("--lse-dtype", o->lse_dtype,
                  "judge L as stored in f32, bf16 or f16 (rounded to it) in every case")
      ->capture_default_str();
  o->ranks_opt = add_ranks_option(*sub, o->ranks);
  sub->add_flag("--json", o->json, "print the result as JSON (no progress line)");
  sub->add_option("--plant-fault", o->plant_fault,
                  "for testing the fuzzer itself: plant a named bug in the cpu backend for every "
                  "case (cpu/faults.hpp: no_scale, lse_base2, tail_rows, ...)")
      ->group("Testing the fuzzer");
  return {sub, [o] { return run_fuzz_command(*o); }};
}

}  // namespace flashref::cli

// `flashref trace`: the teaching walkthrough. Runs the tiled cpu backend with its trace hook on
// a tiny problem and prints Algorithm 1 (or 2) step by step with the line numbers and values.
#include <cmath>
#include <iostream>
#include <memory>

#include "command.hpp"
#include "flashref/error.hpp"
#include "flashref/params.hpp"
#include "flashref/verify/problem_data.hpp"
#include "feasibility.hpp"
#include "flashref/cpu/backend.hpp"
#include "option_parsers.hpp"
#include "problem_options.hpp"
#include "trace_render.hpp"
#include "trace_states.hpp"

namespace flashref::cli {
namespace {

struct TraceOptions {
  std::string shape = "1,1,8,8,4";
  std::int64_t heads_kv = 0;
  std::string tile = "4,4";
  std::string mask = "none";
  std::string dtype = "f32";
  std::string format = "text";
  double scale = 0.0;
  CLI::Option* scale_opt = nullptr;
  std::uint64_t seed = 0;
  bool backward = false;
  bool grid_only = false;
  bool json = false;
  // The states on the user's own inputs (trace_states.hpp): --q --k --v --out [--select].
  StatesTraceOptions states;
  CLI::Option* shape_opt = nullptr;
  CLI::Option* seed_opt = nullptr;
  CLI::Option* dtype_opt = nullptr;
  CLI::Option* tile_opt = nullptr;
};

// Trace is for problems a person reads: every score of every head is printed. At most
// kTraceMaxScores scores B * H * S_q * S_k (one head of 256 x 256); --grid prints one cell per
// tile pair, at most kTraceMaxGridCells of them (a 256 x 256 grid). docs/verification.md.
constexpr std::int64_t kTraceMaxScores = std::int64_t{1} << 16;
constexpr std::int64_t kTraceMaxGridCells = std::int64_t{1} << 16;

void require_readable(const Problem& p, int tile_q, int tile_k, bool grid_only) {
  const auto ceil_div = [](std::int64_t a, std::int64_t b) { return (a + b - 1) / b; };
  const double scores = static_cast<double>(p.B) * static_cast<double>(p.H) *
                        static_cast<double>(p.S_q) * static_cast<double>(p.S_k);
  const std::int64_t cells = ceil_div(p.S_q, tile_q) * ceil_div(p.S_k, tile_k);
  if (!grid_only && scores > static_cast<double>(kTraceMaxScores)) {
    throw InvalidArgument(
        "--shape", "trace prints every score: B * H * S_q * S_k must be at most " +
                       std::to_string(kTraceMaxScores) + " (one head of 256 x 256), got " +
                       describe(p) + "; use --grid for the tile grid of a larger problem, or "
                       "`flashref verify` to check one");
  }
  if (grid_only && cells > kTraceMaxGridCells) {
    throw InvalidArgument("--tile", "--grid prints one cell per tile pair: at most " +
                                        std::to_string(kTraceMaxGridCells) + " (256 x 256), got " +
                                        std::to_string(cells) + " for tiles " +
                                        std::to_string(tile_q) + "," + std::to_string(tile_k) +
                                        " on " + describe(p) + "; give larger tiles");
  }
}

int run_trace(const TraceOptions& o) {
  if (!o.states.q.empty() || !o.states.k.empty() || !o.states.v.empty() ||
      !o.states.dO.empty() || !o.states.out.empty() || !o.states.select.empty()) {
    // The given options that belong to the random walkthrough only.
    const std::pair<CLI::Option*, const char*> random_only[] = {
        {o.shape_opt, "--shape"}, {o.seed_opt, "--seed"}};
    for (const auto& [opt, name] : random_only) {
      if (opt->count() > 0) {
        throw InvalidArgument(name, std::string(name) +
                                        " is for the random walkthrough; the states of --q --k "
                                        "--v take their shape from the files");
      }
    }
    if (o.grid_only || o.heads_kv > 0 || o.format != "text") {
      throw InvalidArgument("--out", "the states of --q --k --v are written as .npy files: "
                                     "--grid, --heads-kv and --format do not apply");
    }
    // --do is what makes the backward's states; --backward alone would have no dO.
    if (o.backward && o.states.dO.empty()) {
      throw InvalidArgument("--do", "the backward's states of your inputs need dO: give --do "
                                    "(--backward is then implied)");
    }
    StatesTraceOptions s = o.states;
    if (o.tile_opt->count() == 0) {
      throw InvalidArgument("--tile", "the states depend on the tiles: give your kernel's "
                                      "B_q,B_k");
    }
    s.tile = o.tile;
    s.mask = o.mask;
    s.dtype = o.dtype_opt->count() > 0 ? o.dtype : "";
    s.scale_given = o.scale_opt->count() > 0;
    s.scale = o.scale;
    s.json = o.json;
    return run_trace_states(s);
  }
  const auto shape = parse_shape(o.shape, "--shape");
  auto [tile_q, tile_k] = parse_tiles(o.tile, "--tile");
  if (tile_q == 0) tile_q = cpu::kDefaultTileQ;
  if (tile_k == 0) tile_k = cpu::kDefaultTileK;
  const std::int64_t heads_kv = o.heads_kv > 0 ? o.heads_kv : shape[1];
  Problem p = make_problem(shape[0], shape[1], heads_kv, shape[2], shape[3], shape[4],
                           parse_mask(o.mask), parse_dtype(o.dtype));
  if (o.scale_opt->count() > 0) p.scale = o.scale;
  validate(p);
  require_readable(p, tile_q, tile_k, o.grid_only);
  // Before any work: the run must fit in memory (feasibility.hpp).
  require_memory("--shape", p, backend_need(p, "cpu", o.backward, 0, tile_q, tile_k));
  const TraceFormat format = parse_trace_format(o.format);

  verify::InputOptions inputs;
  inputs.seed = o.seed;
  verify::ProblemData data = verify::make_problem_data(p, inputs);
  // One decimal per input value, so a reader can follow the arithmetic by hand.
  for (verify::HostTensor* t : {&data.q, &data.k, &data.v, &data.dO}) {
    for (std::int64_t b = 0; b < t->B(); ++b)
      for (std::int64_t h = 0; h < t->H(); ++h)
        for (std::int64_t s = 0; s < t->S(); ++s)
          for (std::int64_t i = 0; i < t->d(); ++i)
            t->set(b, h, s, i, std::round(t->get(b, h, s, i) * 10.0f) / 10.0f);
  }

  TraceSettings settings;
  settings.tile_q = tile_q;
  settings.tile_k = tile_k;
  settings.backward = o.backward;
  settings.grid_only = o.grid_only;
  const Trace trace = record_trace(data, settings);
  for (const std::string& w : trace.warnings) std::cerr << "flashref trace: warning: " << w << "\n";
  if (o.json) {
    std::cout << trace_json(trace).dump(2) << "\n";
  } else if (o.grid_only) {
    render_grid(std::cout, trace, format);
  } else {
    render_trace(std::cout, trace, format);
  }
  return kExitPass;
}

}  // namespace

Command add_trace_command(CLI::App& app) {
  auto o = std::make_shared<TraceOptions>();
  CLI::App* sub = app.add_subcommand(
      "trace",
      "The walkthrough: run the tiled cpu backend on a tiny problem and print Algorithm 1\n"
      "(forward) step by step with its line numbers and the values of S, m, P~, l, the rescale\n"
      "factor and O; with --backward, Algorithm 2 (D, P, dV, dP, dS, dQ, dK). Causal masks show\n"
      "which tiles are skipped, run without index comparison, or compare indices. Inputs are\n"
      "random (--seed), rounded to one decimal. Exit 0, or 2 on bad usage.\n"
      "With --q --k --v --tile B_q,B_k --out DIR: write the per-step states m, l, acc of your\n"
      "own inputs in your tiles, for `flashref check --states`; with --do also the backward's\n"
      "D, P, dP, dS, dQ, dV, dK.");
  o->shape_opt = sub->add_option("--shape", o->shape, "B,H,S_q,S_k,d, or B,H,S,d when S_q = S_k")
      ->capture_default_str();
  sub->add_option("--heads-kv", o->heads_kv, "key/value heads H_kv (default H)");
  o->tile_opt = sub->add_option("--tile", o->tile, "B_q,B_k (or one size for both; 0: the cpu's default)")
      ->capture_default_str();
  sub->add_option("--mask", o->mask, "none, causal or causal-bottom-right")->capture_default_str();
  o->dtype_opt = sub->add_option("--dtype", o->dtype,
                                 "f32, f16 or bf16 (with --q: default the dtype of Q's file)")
                     ->capture_default_str();
  o->scale_opt = sub->add_option("--scale", o->scale, "softmax scale (default 1/sqrt(d))");
  o->seed_opt = add_seed_option(*sub, o->seed, "seed of the random inputs");
  sub->add_flag("--backward", o->backward, "walk Algorithm 2 (the backward) instead");
  sub->add_option("--format", o->format, "text or markdown")->capture_default_str();
  sub->add_flag("--grid", o->grid_only, "print only the tile grid (skipped/full/diagonal tiles)");
  sub->add_flag("--json", o->json, "print every step as JSON (with --out: what was written)");
  sub->add_option("--q", o->states.q,
                  "your inputs instead of random ones: Q as .npy, (B, H, S_q, d) or (B, S_q, d)")
      ->group("States on your inputs");
  sub->add_option("--k", o->states.k, "K: (B, H_kv, S_k, d) or (B, S_k, d)")
      ->group("States on your inputs");
  sub->add_option("--v", o->states.v, "V: the shape of K")->group("States on your inputs");
  sub->add_option("--do", o->states.dO,
                  "dO: the shape of Q; also write the backward's states (Algorithm 2): D, P, dP, "
                  "dS, dQ, dV, dK")
      ->group("States on your inputs");
  sub->add_option("--out", o->states.out,
                  "write the states of Algorithm 1 for your tiles (--tile) into this folder: "
                  "m.npy, l.npy, acc.npy (with --do also Algorithm 2's D.npy, P.npy, dP.npy, "
                  "dS.npy, dQ.npy, dV.npy, dK.npy; the cpu mirror, float32) and gold/ (float64); "
                  "docs/checking-your-kernel.md, \"States\"")
      ->group("States on your inputs");
  sub->add_option("--select", o->states.select,
                  "b,h or b,h,i: keep only batch b, head h (and query tile i)")
      ->group("States on your inputs");
  return {sub, [o] { return run_trace(*o); }};
}

}  // namespace flashref::cli

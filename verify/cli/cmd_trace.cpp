// `flashref trace`: the teaching walkthrough. Runs the tiled cpu backend with its trace hook on
// a tiny problem and prints Algorithm 1 (or 2) step by step with the line numbers and values.
#include <cmath>
#include <iostream>
#include <memory>

#include "command.hpp"
#include "flashref/error.hpp"
#include "flashref/params.hpp"
#include "flashref/verify/problem_data.hpp"
#include "problem_options.hpp"
#include "trace_render.hpp"

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
};

std::vector<std::int64_t> integers(const std::string& text, std::size_t count,
                                   const std::string& option, const std::string& expected) {
  const std::vector<std::string> parts = split_commas(text);
  std::vector<std::int64_t> values;
  if (parts.size() == count) {
    for (const std::string& part : parts) {
      std::size_t used = 0;
      try {
        const long long v = std::stoll(part, &used);
        if (used == part.size() && v >= 1) values.push_back(v);
      } catch (const std::exception&) {
      }
    }
  }
  if (values.size() != count) {
    throw InvalidArgument(option, "expected " + expected + ", each >= 1, got '" + text + "'");
  }
  return values;
}

int run_trace(const TraceOptions& o) {
  const auto shape = integers(o.shape, 5, "--shape", "B,H,S_q,S_k,d");
  const auto tiles = integers(o.tile, 2, "--tile", "B_q,B_k");
  const std::int64_t heads_kv = o.heads_kv > 0 ? o.heads_kv : shape[1];
  Problem p = make_problem(shape[0], shape[1], heads_kv, shape[2], shape[3], shape[4],
                           parse_mask(o.mask), parse_dtype(o.dtype));
  if (o.scale_opt->count() > 0) p.scale = o.scale;
  validate(p);
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
  settings.tile_q = static_cast<int>(tiles[0]);
  settings.tile_k = static_cast<int>(tiles[1]);
  settings.backward = o.backward;
  settings.grid_only = o.grid_only;
  const Trace trace = record_trace(data, settings);
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
      "random (--seed), rounded to one decimal. Exit 0, or 2 on bad usage.");
  sub->add_option("--shape", o->shape, "B,H,S_q,S_k,d")->capture_default_str();
  sub->add_option("--heads-kv", o->heads_kv, "key/value heads H_kv (default H)");
  sub->add_option("--tile", o->tile, "B_q,B_k")->capture_default_str();
  sub->add_option("--mask", o->mask, "none, causal or causal-bottom-right")->capture_default_str();
  sub->add_option("--dtype", o->dtype, "f32, f16 or bf16")->capture_default_str();
  o->scale_opt = sub->add_option("--scale", o->scale, "softmax scale (default 1/sqrt(d))");
  sub->add_option("--seed", o->seed, "seed of the random inputs")->capture_default_str();
  sub->add_flag("--backward", o->backward, "walk Algorithm 2 (the backward) instead");
  sub->add_option("--format", o->format, "text or markdown")->capture_default_str();
  sub->add_flag("--grid", o->grid_only, "print only the tile grid (skipped/full/diagonal tiles)");
  sub->add_flag("--json", o->json, "print every step as JSON");
  return {sub, [o] { return run_trace(*o); }};
}

}  // namespace flashref::cli

// `flashref run`: compute with one backend from .npy inputs and write .npy outputs, so another
// kernel's developer can compare against flashref's tensors in their own tools.
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "command.hpp"
#include "flashref/backend.hpp"
#include "flashref/error.hpp"
#include "flashref/limits.hpp"
#include "flashref/verify/nonfinite.hpp"
#include "flashref/verify/npy.hpp"
#include "flashref/verify/report.hpp"
#include "feasibility.hpp"
#include "npy_problem.hpp"
#include "option_parsers.hpp"
#include "output_dir.hpp"

namespace flashref::cli {
namespace {

struct RunSettings {
  NpyProblemOptions inputs;
  std::string backend = "cpu";
  std::string out_dir;
  int threads = 0;
  bool allow_tf32 = false;
  bool nondeterministic = false;
  std::string lse_dtype = "f32";
  bool json = false;
};

int run_run(const RunSettings& s) {
  check_threads(s.threads, "--threads");
  const auto [tile_q, tile_k] = s.inputs.tiles();
  const DType lse_dtype = verify::parse_lse_dtype(s.lse_dtype);
  const std::unique_ptr<Backend> backend = make_backend(s.backend);
  const NpyProblem input = load_npy_problem(s.inputs);
  const Problem& p = input.data.problem;
  const Support support = backend->supports(p);
  if (!support.ok) {
    throw Unsupported("backend '" + s.backend + "' cannot run this problem: " + support.reason);
  }
  // Before any work: the run must fit in memory (feasibility.hpp).
  require_memory(s.inputs.q, p,
                 backend_need(p, s.backend, !input.data.dO.empty(), s.threads, tile_q, tile_k));
  verify::RunOptions options;
  options.exec.tile_q = tile_q;
  options.exec.tile_k = tile_k;
  options.exec.num_threads = s.threads;
  options.exec.allow_tf32 = s.allow_tf32;
  options.exec.deterministic = !s.nondeterministic;
  options.layout = verify::Layout::bhsd;
  options.backward = !input.data.dO.empty();
  for (const std::string& note : input.overflows) {
    std::cerr << "flashref run: warning: input " << note << "\n";
  }
  verify::RunOutputs out;
  if (lse_dtype == DType::f32) {
    out = verify::run_backend(*backend, input.data, options);
  } else {
    // L stored in lse_dtype (written as float32 holding those values), and the backward run
    // from it, as a kernel keeping L in that dtype computes.
    verify::RunOptions forward_only = options;
    forward_only.backward = false;
    out = verify::run_backend(*backend, input.data, forward_only);
    for (float& x : out.lse) x = round_to(lse_dtype, x);
    if (options.backward) {
      out = verify::run_backward_from(*backend, input.data, options, out.o, out.lse);
    }
  }

  // Everything is computed before the first file is created, and the files are renamed into
  // place together once all were written (output_dir.hpp): an error leaves DIR as it was.
  const WrittenOutputs written_outputs =
      write_outputs(s.out_dir, output_arrays(out, p, input.course_layout),
                    {"o", "lse", "dq", "dk", "dv"});
  if (!written_outputs.note.empty()) std::cerr << "flashref run: note: " << written_outputs.note << "\n";
  nlohmann::json written = written_outputs.paths;
  const std::vector<std::string> warnings = verify::nonfinite_warnings(out.values, input.data);
  for (const std::string& w : warnings) std::cerr << "flashref run: warning: " << w << "\n";
  if (s.json) {
    nlohmann::json j = {
        {"command", "run"},
        {"backend", s.backend},
        {"problem", verify::to_json(p)},
        {"course_layout", input.course_layout},
        {"precision", verify::to_json(verify::Precision{s.allow_tf32, lse_dtype}, p)},
        {"outputs", written},
        {"warnings", warnings},
        {"input_overflows", input.overflows}};
    std::cout << j.dump(2) << "\n";
  } else {
    std::cout << "problem: " << describe(p) << "\nbackend: " << s.backend
              << "\nprecision: " << verify::describe(verify::Precision{s.allow_tf32, lse_dtype}, p)
              << "\nwrote:";
    for (const auto& path : written) std::cout << " " << path.get<std::string>();
    std::cout << "\n";
  }
  return kExitPass;
}

}  // namespace

Command add_run_command(CLI::App& app) {
  auto settings = std::make_shared<RunSettings>();
  CLI::App* sub = app.add_subcommand(
      "run",
      "Compute attention with one backend from .npy inputs and write .npy outputs:\n"
      "DIR/o.npy and DIR/lse.npy, and with --do also DIR/dq.npy, DIR/dk.npy, DIR/dv.npy.\n"
      "Outputs are float32 holding exactly the values the backend produced, in the inputs'\n"
      "layout. Exit 0 on success, 2 on bad input (the message names the file).");
  sub->add_option("--backend", settings->backend, "backend to run")->capture_default_str();
  settings->inputs.add_to(*sub, "B_q,B_k: tile sizes of the cpu backend (default its own)");
  sub->add_option("--out", settings->out_dir,
                  "directory for the outputs (created if missing); the outputs of an earlier "
                  "run there are replaced all together")
      ->required();
  sub->add_option("--threads", settings->threads,
                  "OpenMP threads of the cpu backend, 0 to " + std::to_string(kMaxThreads) +
                      " (0: default)");
  sub->add_flag("--allow-tf32", settings->allow_tf32,
                "let f32 device backends use TF32 (the reference backend then computes the TF32 "
                "baseline)");
  add_nondeterministic_flag(*sub, settings->nondeterministic);
  sub->add_option("--lse-dtype", settings->lse_dtype,
                  "store L rounded to f32, bf16 or f16 (written as float32 values)")
      ->capture_default_str();
  sub->add_flag("--json", settings->json, "print what was written as JSON");
  return {sub, [settings] { return run_run(*settings); }};
}

}  // namespace flashref::cli

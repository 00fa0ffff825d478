// `flashref trace --q --k --v [--do] --tile B_q,B_k --out DIR`: runs the cpu mirror with its
// trace observer on the user's inputs, in the user's tiles, and writes the states of Algorithm
// 1 (with --do also of Algorithm 2) (the baseline, float32) and the gold's (float64) for
// `flashref check --states`.
#include <iostream>
#include <optional>

#include <nlohmann/json.hpp>

#include "command.hpp"
#include "flashref/error.hpp"
#include "flashref/verify/npy.hpp"
#include "flashref/verify/states.hpp"
#include "feasibility.hpp"
#include "npy_problem.hpp"
#include "option_parsers.hpp"
#include "problem_options.hpp"
#include "states_files.hpp"
#include "trace_states.hpp"

namespace flashref::cli {

int run_trace_states(const StatesTraceOptions& o) {
  // The options first, the files after: a usage error costs no reading.
  if (o.q.empty() || o.k.empty() || o.v.empty()) {
    throw InvalidArgument("--q", "the states need your inputs: give --q, --k and --v");
  }
  if (o.out.empty()) {
    throw InvalidArgument("--out", "give --out DIR, the folder the states are written to");
  }
  const auto [tile_q, tile_k] = parse_tiles(o.tile, "--tile");
  verify::StatesGrid grid{tile_q, tile_k};
  if (!o.select.empty()) parse_select(o.select, grid);

  NpyProblemOptions files;
  files.q = o.q;
  files.k = o.k;
  files.v = o.v;
  files.dO = o.dO;
  files.mask = o.mask;
  files.dtype = o.dtype;
  NpyProblem input = load_npy_problem(files);
  Problem& p = input.data.problem;
  if (o.scale_given) {
    p.scale = o.scale;
    validate(p);
  }
  const verify::StatesShape shape = verify::states_shape(p, grid);
  const bool backward = !input.data.dO.empty();
  require_states_fit(p, shape);
  if (backward) require_backward_states_fit(p, shape);
  // The mirror runs the selected heads; the arrays are 3 copies of the states (the backward's:
  // the gold, its three floors and the baseline) (feasibility.hpp).
  MemoryNeed need = backend_need(p, "cpu", backward, 1, tile_q, tile_k);
  need.bytes += 3.0 * 8.0 * shape.elements();
  if (backward) need.bytes += 5.0 * 8.0 * shape.backward_elements();
  require_memory(o.q, p, need);

  // Everything is computed before anything is written.
  const verify::ForwardStates base = verify::baseline_forward_states(input.data, grid);
  const verify::GoldForwardStates gold = verify::gold_forward_states(input.data, grid);
  std::optional<verify::BackwardStates> base_bwd;
  std::optional<verify::GoldBackwardStates> gold_bwd;
  if (backward) {
    base_bwd = verify::baseline_backward_states(input.data, grid);
    gold_bwd = verify::gold_backward_states(input.data, grid);
  }
  std::vector<WrittenState> written = write_states(o.out, base, gold.value);
  if (backward) {
    for (WrittenState& w : write_backward_states(o.out, *base_bwd, gold_bwd->value))
      written.push_back(std::move(w));
  }

  if (o.json) {
    nlohmann::json list = nlohmann::json::array();
    for (const WrittenState& w : written) {
      list.push_back({{"path", w.path}, {"quantity", w.quantity}, {"dtype", w.dtype},
                      {"shape", w.shape}});
    }
    std::cout << nlohmann::json{{"command", "trace"},
                                {"problem", describe(p)},
                                {"B_q", shape.B_q},
                                {"B_k", shape.B_k},
                                {"T_q", shape.T_q},
                                {"T_k", shape.T_k},
                                {"select", {grid.b, grid.h, grid.i}},
                                {"files", list}}
                     .dump(2)
              << "\n";
    return kExitPass;
  }
  std::cout << "problem: " << describe(p) << "\n";
  std::cout << "tiles:   B_q = " << shape.B_q << ", B_k = " << shape.B_k << ": T_q = " << shape.T_q
            << " query tiles, T_k = " << shape.T_k << " key tiles";
  if (grid.b >= 0) {
    std::cout << "; selected batch " << grid.b << ", head " << grid.h;
    if (grid.i >= 0) std::cout << ", query tile " << grid.i;
  }
  std::cout << "\nwrote the states after each key tile j of each query tile i (Algorithm 1 "
               "lines 10, 12, 13):\n";
  for (const WrittenState& w : written) {
    std::cout << "  " << w.path << "  " << verify::shape_string(w.shape) << " " << w.dtype
              << (w.dtype == "float32" ? "  the cpu mirror in " + std::string(dtype_name(p.dtype))
                                       : "  the gold (double)")
              << "\n";
  }
  std::cout << "key tiles a causal kernel skips hold the last visited state; rows past S_q hold "
               "NaN\n";
  if (backward) {
    std::cout << "backward (Algorithm 2, D then the dQ pass then the dK/dV pass): D (line 2); "
                 "P, dP, dS per tile pair (lines 12, 14, 15, no scale); dQ_i after each key "
                 "tile (16), dV_j and dK_j of each query head after each query tile (13, 17), "
                 "without the scale; skipped tile pairs hold P = dS = 0, dP = NaN\n";
  }
  return kExitPass;
}

}  // namespace flashref::cli

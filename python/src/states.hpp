// flashref.trace_states and the states of flashref.check(states=): the per-step states of
// Algorithm 1 and, given dO, of Algorithm 2 (verify/states.hpp) on arrays from Python, in the
// layout `flashref trace --out` writes and `flashref check --states` reads
// (docs/checking-your-kernel.md, section 7).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nanobind/nanobind.h>
#include <nlohmann/json.hpp>

#include "flashref/verify/problem_data.hpp"
#include "flashref/verify/states.hpp"

namespace flashref::python {

// The tiles and the selection from Python (`select` empty, (b, h) or (b, h, i)). ValueError
// naming "tile" for tiles < 1.
verify::StatesGrid states_grid(std::int64_t tile_q, std::int64_t tile_k,
                               const std::vector<std::int64_t>& select);

// A candidate's states, read and checked against the layout before any work: the forward's
// (m, l, acc) and the backward's (D, P, dP, dS, dQ, dV, dK), either part possibly absent.
struct StatesInput {
  verify::StatesGrid grid;
  verify::StatesShape shape;
  std::optional<verify::CandidateStates> forward;
  std::optional<verify::CandidateBackwardStates> backward;
  // The states given, in the layout's order: "m", "l", "acc" (a dict) or "m.npy", ...
  std::vector<std::string> files, backward_files;
};

// `states` is a dict {"m": array, "l": ..., "dS": ...} of host arrays (Python has checked the
// keys and left out None), or a str: the folder `flashref check --states` reads. Arrays in
// the layout for `grid`; with one head the head axis may be left out; D may also be the
// kernel's (B, H, S_q) buffer when no query tile is selected. As `flashref check --states`:
// the forward is judged when any of its states is given (or none of either), the backward
// when any of its states is given, which needs dO. ValueError naming "select" for a selection
// outside the problem or states past the size limit, states['m'] (or the file) for a shape the
// layout does not have, "states" for a folder that holds none, "do" for backward states
// without dO.
StatesInput read_states_arg(const verify::ProblemData& data, const verify::StatesGrid& grid,
                            const nanobind::object& states);

// The judged states of a check, with what the CLI's text and JSON show of them.
struct StatesPart {
  std::optional<verify::StatesReport> forward;
  std::optional<verify::BackwardStatesReport> backward;
  verify::StatesShape shape;
  std::vector<std::string> files, backward_files;
  bool passed() const {
    return (!forward || forward->passed()) && (!backward || backward->passed());
  }
};

// Runs the mirror and the gold on the inputs and judges the candidate step by step. Call
// without the GIL.
StatesPart judge_states(const verify::ProblemData& data, const StatesInput& input);

// The states part of check's text and JSON, as `flashref check --states` prints them: the
// forward's section, the backward's, and the first divergence (Algorithm 1's when it has one,
// it runs first; else Algorithm 2's).
std::string states_text(const StatesPart& s);
void add_states_json(nlohmann::json& j, const StatesPart& s);

void bind_states(nanobind::module_& m);

}  // namespace flashref::python

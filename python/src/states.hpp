// flashref.trace_states and the states of flashref.check(states=): the per-step states of
// Algorithm 1 (verify/states.hpp) on arrays from Python, in the layout `flashref trace --out`
// writes and `flashref check --states` reads (docs/checking-your-kernel.md, section 7).
// Forward only for now: the backward's states join here when verify/states.hpp has them.
#pragma once

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

// A candidate's states, read and checked against the layout before any work.
struct StatesInput {
  verify::StatesGrid grid;
  verify::StatesShape shape;
  verify::CandidateStates candidate;
  std::vector<std::string> files;  // the states given: "m", "l", "acc" (a dict) or "m.npy", ...
};

// `states` is a dict {"m": array, "l": ..., "acc": ...} of host arrays (Python has checked the
// keys and left out None), or a str: the folder `flashref check --states` reads. Arrays in
// the layout for `grid`; with one head the head axis may be left out. ValueError naming
// "select" for a selection outside the problem or states past the size limit, states['m'] (or
// the file) for a shape the layout does not have, "states" for a folder that holds none.
StatesInput read_states_arg(const verify::ProblemData& data, const verify::StatesGrid& grid,
                            const nanobind::object& states);

// The judged states of a check, with what the CLI's text and JSON show of them.
struct StatesPart {
  verify::StatesReport report;
  verify::StatesShape shape;
  std::vector<std::string> files;
};

// Runs the mirror and the gold on the inputs and judges the candidate step by step. Call
// without the GIL.
StatesPart judge_states(const verify::ProblemData& data, const StatesInput& input);

// The states part of check's text and JSON, as `flashref check --states` prints them.
std::string states_text(const StatesPart& s);
void add_states_json(nlohmann::json& j, const StatesPart& s);

void bind_states(nanobind::module_& m);

}  // namespace flashref::python

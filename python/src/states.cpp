#include "states.hpp"

#include <cstdio>
#include <optional>

#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "arrays.hpp"
#include "cli/states_files.hpp"  // the CLI's reader, size limit and text: one of each
#include "flashref/error.hpp"
#include "problem_args.hpp"

namespace flashref::python {
namespace {

std::string shape_text(const std::vector<std::size_t>& shape) {
  std::string s;
  for (std::size_t x : shape) s += (s.empty() ? "" : ", ") + std::to_string(x);
  return "(" + s + ")";
}

std::string sci(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3e", x);
  return buf;
}

// states_shape's errors name the CLI's options; here they name the Python arguments.
verify::StatesShape python_states_shape(const Problem& p, const verify::StatesGrid& grid) {
  verify::StatesShape shape;
  try {
    shape = verify::states_shape(p, grid);
  } catch (const InvalidArgument& e) {
    const std::string field = e.field() == "--tile" ? "tile" : "select";
    throw InvalidArgument(field, std::string(e.what()).substr(e.field().size() + 2));
  }
  if (shape.elements() > cli::kMaxStateElements) {
    throw InvalidArgument(
        "select", "the states of " + describe(p) + " in tiles (" + std::to_string(shape.B_q) +
                      ", " + std::to_string(shape.B_k) + ") hold " + sci(shape.elements()) +
                      " accumulator values (T_k * S_q * d per head, over " +
                      std::to_string(shape.nb * shape.nh) + " heads); at most " +
                      sci(cli::kMaxStateElements) +
                      " are computed or judged at once: keep one head with select=(b, h) (or "
                      "one query tile with select=(b, h, i))");
  }
  return shape;
}

// One state from the dict, in the layout's shape; with one head the head axis may be absent.
template <std::size_t N>
xt::xtensor<double, N> state_array(const nb::handle& value, const std::string& name,
                                   const std::vector<std::size_t>& want, const Problem& p) {
  const xt::xarray<double> a = to_double(nb::cast<AnyArray>(value), name);
  const std::vector<std::size_t> got(a.shape().begin(), a.shape().end());
  std::vector<std::size_t> no_head = want;
  no_head.erase(no_head.begin() + 1);
  if (got != want && !(p.H == 1 && got == no_head)) {
    throw InvalidArgument(name, "shape " + shape_text(got) + " is not the states layout's " +
                                    shape_text(want) + ": (B, H, T_q, T_k, B_q" +
                                    (N == 6 ? ", d" : "") +
                                    ") for q, k, v, tile and select given" +
                                    (p.H == 1 ? " (with one head, the H axis may be left out)" : ""));
  }
  xt::xtensor<double, N> out = xt::xtensor<double, N>::from_shape(want);
  std::copy(a.begin(), a.end(), out.begin());
  return out;
}

// {"baseline": {"m", "l", "acc"}, "gold": {...}}: the mirror's states in the problem's
// precision (float32 arrays, as `flashref trace --out` writes them) and the gold's (float64),
// in the canonical layout (B, H, T_q, T_k, B_q[, d]).
nb::dict trace_states(const AnyArray& q, const AnyArray& k, const AnyArray& v,
                      const ProblemArgs& args, std::int64_t tile_q, std::int64_t tile_k,
                      const std::vector<std::int64_t>& select) {
  const verify::StatesGrid grid = states_grid(tile_q, tile_k, select);
  const verify::ProblemData data = problem_data(q, k, v, std::nullopt, args);
  python_states_shape(data.problem, grid);
  verify::ForwardStates base;
  verify::GoldForwardStates gold;
  {
    nb::gil_scoped_release release;
    base = verify::baseline_forward_states(data, grid);
    gold = verify::gold_forward_states(data, grid);
  }
  nb::dict base_out, gold_out;
  base_out["m"] = to_numpy_f32(xt::xarray<double>(base.m));
  base_out["l"] = to_numpy_f32(xt::xarray<double>(base.l));
  base_out["acc"] = to_numpy_f32(xt::xarray<double>(base.acc));
  gold_out["m"] = to_numpy(xt::xarray<double>(gold.value.m));
  gold_out["l"] = to_numpy(xt::xarray<double>(gold.value.l));
  gold_out["acc"] = to_numpy(xt::xarray<double>(gold.value.acc));
  nb::dict out;
  out["baseline"] = base_out;
  out["gold"] = gold_out;
  return out;
}

}  // namespace

verify::StatesGrid states_grid(std::int64_t tile_q, std::int64_t tile_k,
                               const std::vector<std::int64_t>& select) {
  if (tile_q < 1) throw InvalidArgument("tile", "B_q must be >= 1, got " + std::to_string(tile_q));
  if (tile_k < 1) throw InvalidArgument("tile", "B_k must be >= 1, got " + std::to_string(tile_k));
  verify::StatesGrid grid{tile_q, tile_k};
  if (select.size() >= 2) {
    grid.b = select[0];
    grid.h = select[1];
  }
  if (select.size() == 3) grid.i = select[2];
  return grid;
}

StatesInput read_states_arg(const verify::ProblemData& data, const verify::StatesGrid& grid,
                            const nb::object& states) {
  const Problem& p = data.problem;
  StatesInput in;
  in.grid = grid;
  in.shape = python_states_shape(p, grid);
  if (nb::isinstance<nb::str>(states)) {
    try {
      in.candidate = cli::read_states(nb::cast<std::string>(states), p, in.shape, in.files);
    } catch (const InvalidArgument& e) {
      if (e.field() != "--states") throw;  // a file's error names the file
      throw InvalidArgument("states", std::string(e.what()).substr(e.field().size() + 2));
    }
    return in;
  }
  const nb::dict arrays = nb::cast<nb::dict>(states);
  const auto given = [&](const char* key) {
    return arrays.contains(key) && !arrays[key].is_none();
  };
  const auto name = [](const char* key) { return std::string("states['") + key + "']"; };
  if (given("m")) in.candidate.m = state_array<5>(arrays["m"], name("m"), in.shape.vector_shape(), p);
  if (given("l")) in.candidate.l = state_array<5>(arrays["l"], name("l"), in.shape.vector_shape(), p);
  if (given("acc")) {
    in.candidate.acc = state_array<6>(arrays["acc"], name("acc"), in.shape.matrix_shape(), p);
  }
  for (const char* key : {"m", "l", "acc"}) {
    if (given(key)) in.files.emplace_back(key);
  }
  if (in.files.empty()) {
    throw InvalidArgument("states", "no state to judge: give any of 'm', 'l', 'acc'");
  }
  return in;
}

StatesPart judge_states(const verify::ProblemData& data, const StatesInput& input) {
  StatesPart part;
  part.report = verify::judge_forward_states(data, input.grid, input.candidate);
  part.shape = input.shape;
  part.files = input.files;
  return part;
}

std::string states_text(const StatesPart& s) {
  return cli::format_states(s.report, s.shape, s.files);
}

void add_states_json(nlohmann::json& j, const StatesPart& s) {
  j["states"] = verify::to_json(s.report);
  j["states"]["files"] = s.files;
  j["states"]["B_q"] = s.shape.B_q;
  j["states"]["B_k"] = s.shape.B_k;
  j["first_divergence"] = j["states"]["first_divergence"];
}

void bind_states(nb::module_& m) {
  m.def("trace_states", &trace_states, nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("args"),
        nb::arg("tile_q"), nb::arg("tile_k"), nb::arg("select"),
        "The mirror's states (float32) and the gold's (float64) after each key tile of each "
        "query tile, canonical layout.");
}

}  // namespace flashref::python

#include "states.hpp"

#include <cstdio>
#include <limits>
#include <optional>

#include <nanobind/stl/optional.h>
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
  try {
    return verify::states_shape(p, grid);
  } catch (const InvalidArgument& e) {
    const std::string field = e.field() == "--tile" ? "tile" : "select";
    throw InvalidArgument(field, std::string(e.what()).substr(e.field().size() + 2));
  }
}

// The CLI's size limits (states_files.hpp), with messages naming select=.
void require_forward_fit(const Problem& p, const verify::StatesShape& shape) {
  if (shape.elements() <= cli::kMaxStateElements) return;
  throw InvalidArgument(
      "select", "the states of " + describe(p) + " in tiles (" + std::to_string(shape.B_q) + ", " +
                    std::to_string(shape.B_k) + ") hold " + sci(shape.elements()) +
                    " accumulator values (T_k * S_q * d per head, over " +
                    std::to_string(shape.nb * shape.nh) + " heads); at most " +
                    sci(cli::kMaxStateElements) +
                    " are computed or judged at once: keep one head with select=(b, h) (or "
                    "one query tile with select=(b, h, i))");
}

void require_backward_fit(const Problem& p, const verify::StatesShape& shape) {
  if (shape.backward_elements() <= cli::kMaxStateElements) return;
  throw InvalidArgument(
      "select",
      "the backward states of " + describe(p) + " in tiles (" + std::to_string(shape.B_q) + ", " +
          std::to_string(shape.B_k) + ") hold " + sci(shape.backward_elements()) +
          " values (P, dP, dS: about S_q * S_k per head; dQ: T_k * S_q * d; dK, dV: "
          "T_q * S_k * d; over " +
          std::to_string(shape.nb * shape.nh) + " heads); at most " + sci(cli::kMaxStateElements) +
          " are computed or judged at once: keep one head with select=(b, h) (or "
          "one query tile with select=(b, h, i))");
}

// One state from the dict, in the layout's shape (`layout` names its axes); with one head the
// head axis may be absent, and D may be the kernel's (B, H, S_q) buffer, padded here into
// query tiles as the CLI's reader does.
template <std::size_t N>
xt::xtensor<double, N> state_array(const nb::handle& value, const std::string& name,
                                   const std::vector<std::size_t>& want, const Problem& p,
                                   const verify::StatesShape& shape, const std::string& layout) {
  const xt::xarray<double> a = to_double(nb::cast<AnyArray>(value), name);
  const std::vector<std::size_t> got(a.shape().begin(), a.shape().end());
  std::vector<std::size_t> no_head = want;
  no_head.erase(no_head.begin() + 1);
  xt::xtensor<double, N> out = xt::xtensor<double, N>::from_shape(want);
  const bool is_D = N == 4;
  const std::vector<std::size_t> d_buffer = {want[0], want[1], static_cast<std::size_t>(p.S_q)};
  if (is_D && shape.nq == shape.T_q && got == d_buffer) {
    out.fill(std::numeric_limits<double>::quiet_NaN());
    std::size_t n = 0;
    for (std::size_t b = 0; b < want[0]; ++b)
      for (std::size_t h = 0; h < want[1]; ++h)
        for (std::int64_t row = 0; row < p.S_q; ++row)
          out.flat(((b * want[1] + h) * want[2] + static_cast<std::size_t>(row / shape.B_q)) *
                       want[3] +
                   static_cast<std::size_t>(row % shape.B_q)) = a.flat(n++);
    return out;
  }
  if (got != want && !(p.H == 1 && got == no_head)) {
    throw InvalidArgument(
        name, "shape " + shape_text(got) + " is not the states layout's " + shape_text(want) +
                  ": " + layout + " for q, k, v, tile and select given" +
                  (p.H == 1 ? " (with one head, the H axis may be left out)" : "") +
                  (is_D ? " (or (B, H, S_q) without a query tile selected)" : ""));
  }
  std::copy(a.begin(), a.end(), out.begin());
  return out;
}

const char* const kForwardNames[] = {"m", "l", "acc"};
const char* const kBackwardNames[] = {"D", "P", "dP", "dS", "dQ", "dV", "dK"};

// {"baseline": {"m", "l", "acc"[, "D", ..., "dK"]}, "gold": {...}}: the mirror's states in the
// problem's precision (float32 arrays, as `flashref trace --out` writes them) and the gold's
// (float64), in the canonical layout; the backward's with dO given.
nb::dict trace_states(const AnyArray& q, const AnyArray& k, const AnyArray& v,
                      const std::optional<AnyArray>& dO, const ProblemArgs& args,
                      std::int64_t tile_q, std::int64_t tile_k,
                      const std::vector<std::int64_t>& select) {
  const verify::StatesGrid grid = states_grid(tile_q, tile_k, select);
  const verify::ProblemData data = problem_data(q, k, v, dO, args);
  const bool backward = !data.dO.empty();
  const verify::StatesShape shape = python_states_shape(data.problem, grid);
  require_forward_fit(data.problem, shape);
  if (backward) require_backward_fit(data.problem, shape);
  verify::ForwardStates base;
  verify::GoldForwardStates gold;
  verify::BackwardStates base_bwd;
  verify::GoldBackwardStates gold_bwd;
  {
    nb::gil_scoped_release release;
    base = verify::baseline_forward_states(data, grid);
    gold = verify::gold_forward_states(data, grid);
    if (backward) {
      base_bwd = verify::baseline_backward_states(data, grid);
      gold_bwd = verify::gold_backward_states(data, grid);
    }
  }
  nb::dict base_out, gold_out;
  base_out["m"] = to_numpy_f32(xt::xarray<double>(base.m));
  base_out["l"] = to_numpy_f32(xt::xarray<double>(base.l));
  base_out["acc"] = to_numpy_f32(xt::xarray<double>(base.acc));
  gold_out["m"] = to_numpy(xt::xarray<double>(gold.value.m));
  gold_out["l"] = to_numpy(xt::xarray<double>(gold.value.l));
  gold_out["acc"] = to_numpy(xt::xarray<double>(gold.value.acc));
  if (backward) {
    const auto put = [](nb::dict& out, const verify::BackwardStates& s, bool is_gold) {
      const auto one = [&](const char* name, xt::xarray<double>&& a) {
        out[name] = is_gold ? to_numpy(std::move(a)) : to_numpy_f32(a);
      };
      one("D", xt::xarray<double>(s.D));
      one("P", xt::xarray<double>(s.P));
      one("dP", xt::xarray<double>(s.dP));
      one("dS", xt::xarray<double>(s.dS));
      one("dQ", xt::xarray<double>(s.dQ));
      one("dV", xt::xarray<double>(s.dV));
      one("dK", xt::xarray<double>(s.dK));
    };
    put(base_out, base_bwd, false);
    put(gold_out, gold_bwd.value, true);
  }
  nb::dict out;
  out["baseline"] = base_out;
  out["gold"] = gold_out;
  return out;
}

// The folder `flashref check --states DIR` reads, read as cmd_check.cpp reads it.
void read_states_folder(const verify::ProblemData& data, const std::string& dir, StatesInput& in) {
  const Problem& p = data.problem;
  const bool forward_given = cli::has_forward_states(dir);
  const bool backward_given = cli::has_backward_states(dir);
  if (backward_given && data.dO.empty()) {
    throw InvalidArgument("do", dir +
                                    " holds backward states (D, P, dP, dS, dQ, dV, dK): "
                                    "judging them needs do, the gradient of O");
  }
  try {
    if (forward_given || !backward_given) {
      require_forward_fit(p, in.shape);
      in.forward = cli::read_states(dir, p, in.shape, in.files);
    }
    if (backward_given) {
      require_backward_fit(p, in.shape);
      in.backward = cli::read_backward_states(dir, p, in.shape, in.backward_files);
    }
  } catch (const InvalidArgument& e) {
    if (e.field() != "--states") throw;  // a file's error names the file
    throw InvalidArgument("states", std::string(e.what()).substr(e.field().size() + 2));
  }
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
    read_states_folder(data, nb::cast<std::string>(states), in);
    return in;
  }
  const nb::dict arrays = nb::cast<nb::dict>(states);
  const auto given = [&](const char* key) {
    return arrays.contains(key) && !arrays[key].is_none();
  };
  const auto name = [](const char* key) { return std::string("states['") + key + "']"; };
  bool forward_given = false, backward_given = false;
  for (const char* key : kForwardNames) forward_given = forward_given || given(key);
  for (const char* key : kBackwardNames) backward_given = backward_given || given(key);
  if (!forward_given && !backward_given) {
    throw InvalidArgument("states",
                          "no state to judge: give any of 'm', 'l', 'acc' (the "
                          "forward's) or 'D', 'P', 'dP', 'dS', 'dQ', 'dV', 'dK' (the "
                          "backward's)");
  }
  if (backward_given && data.dO.empty()) {
    throw InvalidArgument("do",
                          "states= holds backward states (D, P, dP, dS, dQ, dV, dK): "
                          "judging them needs do, the gradient of O");
  }
  const std::string vector_axes = "(B, H, T_q, T_k, B_q)", pair_axes = "(B, H, T_q, T_k, B_q, B_k)";
  const std::string matrix_axes = "(B, H, T_q, T_k, B_q, d)", key_axes = "(B, H, T_k, T_q, B_k, d)";
  if (forward_given) {
    require_forward_fit(p, in.shape);
    verify::CandidateStates& c = in.forward.emplace();
    if (given("m"))
      c.m =
          state_array<5>(arrays["m"], name("m"), in.shape.vector_shape(), p, in.shape, vector_axes);
    if (given("l"))
      c.l =
          state_array<5>(arrays["l"], name("l"), in.shape.vector_shape(), p, in.shape, vector_axes);
    if (given("acc")) {
      c.acc = state_array<6>(arrays["acc"], name("acc"), in.shape.matrix_shape(), p, in.shape,
                             matrix_axes);
    }
    for (const char* key : kForwardNames) {
      if (given(key)) in.files.emplace_back(key);
    }
  }
  if (backward_given) {
    require_backward_fit(p, in.shape);
    verify::CandidateBackwardStates& c = in.backward.emplace();
    const auto pair = [&](const char* key, auto& slot) {
      if (given(key))
        slot =
            state_array<6>(arrays[key], name(key), in.shape.pair_shape(), p, in.shape, pair_axes);
    };
    const auto per_key = [&](const char* key, auto& slot) {
      if (given(key))
        slot = state_array<6>(arrays[key], name(key), in.shape.key_shape(), p, in.shape, key_axes);
    };
    if (given("D")) {
      c.D = state_array<4>(arrays["D"], name("D"), in.shape.row_shape(), p, in.shape,
                           "(B, H, T_q, B_q)");
    }
    pair("P", c.P);
    pair("dP", c.dP);
    pair("dS", c.dS);
    if (given("dQ")) {
      c.dQ = state_array<6>(arrays["dQ"], name("dQ"), in.shape.matrix_shape(), p, in.shape,
                            matrix_axes);
    }
    per_key("dV", c.dV);
    per_key("dK", c.dK);
    for (const char* key : kBackwardNames) {
      if (given(key)) in.backward_files.emplace_back(key);
    }
  }
  return in;
}

StatesPart judge_states(const verify::ProblemData& data, const StatesInput& input) {
  StatesPart part;
  if (input.forward) part.forward = verify::judge_forward_states(data, input.grid, *input.forward);
  if (input.backward) {
    part.backward = verify::judge_backward_states(data, input.grid, *input.backward);
  }
  part.shape = input.shape;
  part.files = input.files;
  part.backward_files = input.backward_files;
  return part;
}

std::string states_text(const StatesPart& s) {
  std::string text;
  if (s.forward) text += "\n" + cli::format_states(*s.forward, s.shape, s.files);
  if (s.backward) {
    text += "\n" + cli::format_backward_states(*s.backward, s.shape, s.backward_files);
  }
  return text;
}

void add_states_json(nlohmann::json& j, const StatesPart& s) {
  if (s.forward) {
    j["states"] = verify::to_json(*s.forward);
    j["states"]["files"] = s.files;
    j["states"]["B_q"] = s.shape.B_q;
    j["states"]["B_k"] = s.shape.B_k;
    j["first_divergence"] = j["states"]["first_divergence"];
  }
  if (s.backward) {
    j["backward_states"] = verify::to_json(*s.backward);
    j["backward_states"]["files"] = s.backward_files;
    j["backward_states"]["B_q"] = s.shape.B_q;
    j["backward_states"]["B_k"] = s.shape.B_k;
    // Algorithm 1 runs first: its divergence, when there is one, is the first.
    if (!s.forward || s.forward->passed()) {
      j["first_divergence"] = j["backward_states"]["first_divergence"];
    }
  }
}

void bind_states(nb::module_& m) {
  m.def("trace_states", &trace_states, nb::arg("q"), nb::arg("k"), nb::arg("v"),
        nb::arg("do_").none(), nb::arg("args"), nb::arg("tile_q"), nb::arg("tile_k"),
        nb::arg("select"),
        "The mirror's states (float32) and the gold's (float64) after each key tile of each "
        "query tile (with do_, also Algorithm 2's), canonical layout.");
}

}  // namespace flashref::python

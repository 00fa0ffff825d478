#include "states_files.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <ostream>
#include <sstream>

#include "flashref/error.hpp"
#include "flashref/verify/npy.hpp"
#include "problem_options.hpp"

namespace flashref::cli {
namespace {

namespace fs = std::filesystem;
using verify::StateQuantity;

std::string sci(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3e", x);
  return buf;
}

std::string ratio_text(double r) {
  char buf[32];
  std::snprintf(buf, sizeof buf, r < 1000.0 ? "%.2f" : "%.1e", r);
  return buf;
}

std::string value_text(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.7g", x);
  return buf;
}

std::string pad(std::string s, std::size_t width) {
  if (s.size() + 1 < width) s.append(width - 1 - s.size(), ' ');
  return s + " ";
}

std::string at(const verify::StepCheck& c) {
  return "(" + std::to_string(c.b) + "," + std::to_string(c.h) + "," + std::to_string(c.i) + "," +
         std::to_string(c.j) + ")";
}

std::string verdicts(const std::vector<verify::StepCheck>& checks) {
  std::string s;
  for (const verify::StepCheck& c : checks) {
    s += (s.empty() ? "" : ", ") + std::string(verify::state_name(c.quantity)) +
         (c.pass ? " right" : " WRONG") + " (ratio " + ratio_text(c.ratio) + ")";
  }
  return s;
}

}  // namespace

void parse_select(const std::string& text, verify::StatesGrid& grid) {
  const std::vector<std::string> parts = split_commas(text);
  std::vector<std::int64_t> v;
  for (const std::string& part : parts) {
    std::int64_t x = -1;
    const auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), x);
    if (ec != std::errc() || end != part.data() + part.size() || x < 0) {
      throw InvalidArgument("--select", "expected b,h or b,h,i (batch, head, query tile; each "
                                        "an integer >= 0), got '" + text + "'");
    }
    v.push_back(x);
  }
  if (v.size() != 2 && v.size() != 3) {
    throw InvalidArgument("--select", "expected b,h or b,h,i, got " + std::to_string(v.size()) +
                                          " values in '" + text + "'");
  }
  grid.b = v[0];
  grid.h = v[1];
  grid.i = v.size() == 3 ? v[2] : -1;
}

void require_states_fit(const Problem& p, const verify::StatesShape& shape) {
  if (shape.elements() <= kMaxStateElements) return;
  std::ostringstream o;
  o << "the states of " << describe(p) << " in tiles " << shape.B_q << "," << shape.B_k
    << " hold " << sci(shape.elements()) << " accumulator values (T_k * S_q * d per head, over "
    << shape.nb * shape.nh << " heads); at most " << sci(kMaxStateElements)
    << " are written or judged: keep one head with --select b,h (or one query tile with b,h,i)";
  throw InvalidArgument("--select", o.str());
}

namespace {

// Writes DIR/NAME.npy (float32) or DIR/gold/NAME.npy (float64) and lists it in `written`.
class StateWriter {
 public:
  StateWriter(const std::string& dir, std::vector<WrittenState>& written)
      : dir_(dir), written_(written) {
    std::error_code ec;
    fs::create_directories(fs::path(dir) / "gold", ec);
    if (ec) throw InvalidArgument("--out", "cannot create " + dir + "/gold: " + ec.message());
  }
  template <class Values>
  void operator()(const std::string& name, const Values& values, bool is_gold) {
    const fs::path folder = is_gold ? fs::path(dir_) / "gold" : fs::path(dir_);
    const std::string path = (folder / (name + ".npy")).string();
    if (is_gold) {
      verify::write_npy_f64(path, xt::xarray<double>(values));
    } else {
      xt::xarray<float> f = xt::xarray<float>::from_shape(
          std::vector<std::size_t>(values.shape().begin(), values.shape().end()));
      for (std::size_t n = 0; n < values.size(); ++n) f.flat(n) = static_cast<float>(values.flat(n));
      verify::write_npy(path, f);
    }
    written_.push_back({path, is_gold ? "float64" : "float32", name,
                        std::vector<std::size_t>(values.shape().begin(), values.shape().end())});
  }

 private:
  std::string dir_;
  std::vector<WrittenState>& written_;
};

const char* const kBackwardFiles[] = {"D", "P", "dP", "dS", "dQ", "dV", "dK"};

}  // namespace

void require_backward_states_fit(const Problem& p, const verify::StatesShape& shape) {
  if (shape.backward_elements() <= kMaxStateElements) return;
  std::ostringstream o;
  o << "the backward states of " << describe(p) << " in tiles " << shape.B_q << "," << shape.B_k
    << " hold " << sci(shape.backward_elements())
    << " values (P, dP, dS: about S_q * S_k per head; dQ: T_k * S_q * d; dK, dV: T_q * S_k * d; "
       "over "
    << shape.nb * shape.nh << " heads); at most " << sci(kMaxStateElements)
    << " are written or judged: keep one head with --select b,h (or one query tile with b,h,i)";
  throw InvalidArgument("--select", o.str());
}

std::vector<WrittenState> write_backward_states(const std::string& dir,
                                                const verify::BackwardStates& base,
                                                const verify::BackwardStates& gold) {
  std::vector<WrittenState> written;
  StateWriter write(dir, written);
  for (const bool is_gold : {false, true}) {
    const verify::BackwardStates& s = is_gold ? gold : base;
    write("D", s.D, is_gold);
    write("P", s.P, is_gold);
    write("dP", s.dP, is_gold);
    write("dS", s.dS, is_gold);
    write("dQ", s.dQ, is_gold);
    write("dV", s.dV, is_gold);
    write("dK", s.dK, is_gold);
  }
  return written;
}

bool has_forward_states(const std::string& dir) {
  for (const char* name : {"m", "l", "acc"})
    if (fs::exists(fs::path(dir) / (std::string(name) + ".npy"))) return true;
  return false;
}

bool has_backward_states(const std::string& dir) {
  for (const char* name : kBackwardFiles)
    if (fs::exists(fs::path(dir) / (std::string(name) + ".npy"))) return true;
  return false;
}

verify::CandidateBackwardStates read_backward_states(const std::string& dir, const Problem& p,
                                                     const verify::StatesShape& shape,
                                                     std::vector<std::string>& files_read) {
  verify::CandidateBackwardStates c;
  const auto load = [&](const std::string& name, const std::vector<std::size_t>& want,
                        const std::string& layout, auto& slot) {
    const std::string path = (fs::path(dir) / (name + ".npy")).string();
    if (!fs::exists(path)) return;
    const verify::NpyArray a = verify::read_npy(path);
    std::vector<std::size_t> got(a.values.shape().begin(), a.values.shape().end());
    std::vector<std::size_t> no_head = want;
    no_head.erase(no_head.begin() + 1);
    using Array = std::remove_reference_t<decltype(*slot)>;
    Array values = Array::from_shape(want);
    // D as the kernel's own (B, H, S_q) buffer: padded into query tiles.
    const std::vector<std::size_t> d_buffer = {want[0], want[1], static_cast<std::size_t>(p.S_q)};
    if (name == "D" && shape.nq == shape.T_q && got == d_buffer) {
      values.fill(std::numeric_limits<double>::quiet_NaN());
      std::size_t n = 0;
      for (std::size_t a0 = 0; a0 < want[0]; ++a0)
        for (std::size_t h = 0; h < want[1]; ++h)
          for (std::int64_t q = 0; q < p.S_q; ++q)
            values.flat(((a0 * want[1] + h) * want[2] + static_cast<std::size_t>(q / shape.B_q)) *
                            want[3] +
                        static_cast<std::size_t>(q % shape.B_q)) = a.values.flat(n++);
    } else if (got == want || (p.H == 1 && got == no_head)) {
      std::copy(a.values.begin(), a.values.end(), values.begin());
    } else {
      throw InvalidArgument(path, "shape " + verify::shape_string(got) +
                                      " is not the states layout's " +
                                      verify::shape_string(want) + ": " + layout +
                                      " for the inputs, --tile and --select given" +
                                      (name == "D" ? " (or (B, H, S_q) without a query tile selected)"
                                                   : ""));
    }
    slot = std::move(values);
    files_read.push_back(name + ".npy");
  };
  load("D", shape.row_shape(), "(B, H, T_q, B_q)", c.D);
  load("P", shape.pair_shape(), "(B, H, T_q, T_k, B_q, B_k)", c.P);
  load("dP", shape.pair_shape(), "(B, H, T_q, T_k, B_q, B_k)", c.dP);
  load("dS", shape.pair_shape(), "(B, H, T_q, T_k, B_q, B_k)", c.dS);
  load("dQ", shape.matrix_shape(), "(B, H, T_q, T_k, B_q, d)", c.dQ);
  load("dV", shape.key_shape(), "(B, H, T_k, T_q, B_k, d)", c.dV);
  load("dK", shape.key_shape(), "(B, H, T_k, T_q, B_k, d)", c.dK);
  return c;
}

std::vector<WrittenState> write_states(const std::string& dir, const verify::ForwardStates& base,
                                       const verify::ForwardStates& gold) {
  std::error_code ec;
  fs::create_directories(fs::path(dir) / "gold", ec);
  if (ec) throw InvalidArgument("--out", "cannot create " + dir + "/gold: " + ec.message());
  std::vector<WrittenState> written;
  const auto as_float = [](const auto& values) {
    xt::xarray<float> f = xt::xarray<float>::from_shape(
        std::vector<std::size_t>(values.shape().begin(), values.shape().end()));
    for (std::size_t n = 0; n < values.size(); ++n) f.flat(n) = static_cast<float>(values.flat(n));
    return f;
  };
  const auto write = [&](const std::string& name, const auto& values, bool is_gold) {
    const fs::path folder = is_gold ? fs::path(dir) / "gold" : fs::path(dir);
    const std::string path = (folder / (name + ".npy")).string();
    if (is_gold) {
      verify::write_npy_f64(path, xt::xarray<double>(values));
    } else {
      verify::write_npy(path, as_float(values));
    }
    written.push_back({path, is_gold ? "float64" : "float32", name,
                       std::vector<std::size_t>(values.shape().begin(), values.shape().end())});
  };
  for (const bool is_gold : {false, true}) {
    const verify::ForwardStates& s = is_gold ? gold : base;
    write("m", s.m, is_gold);
    write("l", s.l, is_gold);
    write("acc", s.acc, is_gold);
  }
  return written;
}

verify::CandidateStates read_states(const std::string& dir, const Problem& p,
                                    const verify::StatesShape& shape,
                                    std::vector<std::string>& files_read) {
  if (!fs::is_directory(dir)) {
    throw InvalidArgument("--states", dir + " is not a folder: give the folder holding m.npy, "
                                            "l.npy, acc.npy");
  }
  verify::CandidateStates c;
  const auto load = [&](const std::string& name, const std::vector<std::size_t>& want,
                        auto& slot) {
    const std::string path = (fs::path(dir) / (name + ".npy")).string();
    if (!fs::exists(path)) return;
    const verify::NpyArray a = verify::read_npy(path);
    std::vector<std::size_t> got(a.values.shape().begin(), a.values.shape().end());
    std::vector<std::size_t> no_head = want;
    no_head.erase(no_head.begin() + 1);
    if (got != want && !(p.H == 1 && got == no_head)) {
      throw InvalidArgument(path, "shape " + verify::shape_string(got) +
                                      " is not the states layout's " +
                                      verify::shape_string(want) +
                                      ": (B, H, T_q, T_k, B_q" + (name == "acc" ? ", d" : "") +
                                      ") for the inputs, --tile and --select given");
    }
    using Array = std::remove_reference_t<decltype(*slot)>;
    Array values = Array::from_shape(want);
    std::copy(a.values.begin(), a.values.end(), values.begin());
    slot = std::move(values);
    files_read.push_back(name + ".npy");
  };
  load("m", shape.vector_shape(), c.m);
  load("l", shape.vector_shape(), c.l);
  load("acc", shape.matrix_shape(), c.acc);
  if (files_read.empty()) {
    throw InvalidArgument("--states", dir + " holds none of m.npy, l.npy, acc.npy (the "
                                            "forward's) nor D.npy, P.npy, dP.npy, dS.npy, "
                                            "dQ.npy, dV.npy, dK.npy (the backward's)");
  }
  return c;
}

namespace {

// One line per quantity judged: its steps, failures and worst step.
void quantity_table(std::ostream& o, const std::vector<verify::QuantitySummary>& quantities) {
  o << pad("state", 6) << pad("line", 5) << pad("steps", 6) << pad("failed", 7)
    << pad("worst ratio", 12) << pad("at (b,h,i,j)", 13) << pad("its err", 10) << "its limit\n";
  for (const verify::QuantitySummary& q : quantities) {
    o << pad(std::string(verify::state_name(q.quantity)), 6)
      << pad(std::to_string(verify::state_line(q.quantity)), 5) << pad(std::to_string(q.steps), 6)
      << pad(std::to_string(q.failed), 7) << pad(ratio_text(q.worst.ratio), 12)
      << pad(at(q.worst), 13) << pad(sci(q.worst.candidate_err), 10) << sci(q.worst.limit)
      << "\n";
  }
}

}  // namespace

std::string format_states(const verify::StatesReport& r, const verify::StatesShape& s,
                          const std::vector<std::string>& files) {
  std::ostringstream o;
  std::string names;
  for (const std::string& f : files) names += (names.empty() ? "" : ", ") + f;
  o << "states:  " << names << " in tiles B_q = " << s.B_q << ", B_k = " << s.B_k
    << " (T_q = " << s.T_q << ", T_k = " << s.T_k << ")";
  o << "\nconventions: " << verify::describe(r.conventions) << "\n  (" << r.conventions_note
    << ")\n";
  o << "rule:    per step (b, h, i, j), over the tile's rows: max abs err <= 2 * the baseline "
       "state's err + floor; baseline = the cpu mirror of Algorithm 1 in the candidate's "
       "precision; floor = 2 float32 rounding steps at the step's max|gold| (acc: at its terms' "
       "max sum |P~ V|) + 3 sigma of the score rounding; rows past S_q and key tiles a causal kernel skips are ignored\n\n";
  quantity_table(o, r.quantities);
  if (!r.first) {
    o << "\nfirst divergence: none: every state follows Algorithm 1\n";
    return o.str();
  }
  const verify::FirstDivergence& f = *r.first;
  const verify::StepCheck& c = f.step;
  o << "\nfirst divergence: b = " << c.b << ", h = " << c.h << ", query tile i = " << c.i
    << ", key tile j = " << c.j << ": " << verify::state_name(c.quantity) << ", Alg. 1 line "
    << verify::state_line(c.quantity) << ": " << verify::state_formula(c.quantity) << "\n";
  o << "  worst row " << c.row - c.i * s.B_q << " (query " << c.row << ")";
  if (c.col >= 0) o << ", column " << c.col;
  o << ": expected " << value_text(c.expected) << ", found " << value_text(c.found) << " (err "
    << sci(c.candidate_err) << " > limit " << sci(c.limit) << " = 2 * " << sci(c.baseline_err)
    << " + " << sci(c.floor_rounding + c.floor_noise + c.floor_operand) << ")\n";
  o << "  this step:     " << verdicts(f.this_step) << "\n";
  if (f.previous_step.empty()) {
    o << "  previous step: none (the first key tile)\n";
  } else {
    o << "  previous step (j = " << c.j - 1 << "): " << verdicts(f.previous_step) << "\n";
  }
  if (!f.cause.empty()) o << "  cause: [" << f.cause << "]\n";
  o << "  " << f.explanation << "\n";
  return o.str();
}

std::string format_backward_states(const verify::BackwardStatesReport& r,
                                   const verify::StatesShape& s,
                                   const std::vector<std::string>& files) {
  std::ostringstream o;
  std::string names;
  for (const std::string& f : files) names += (names.empty() ? "" : ", ") + f;
  o << "backward states: " << names << " in tiles B_q = " << s.B_q << ", B_k = " << s.B_k
    << " (T_q = " << s.T_q << ", T_k = " << s.T_k << ")";
  o << "\nconventions: " << verify::describe(r.conventions);
  if (!r.conventions_note.empty()) o << "\n  (" << r.conventions_note << ")";
  o << "\nrule:    per step, over the step's elements: max abs err <= 3 * the baseline state's "
       "err + floor; baseline = the cpu mirror's backward (Algorithm 2 in two passes) in the "
       "candidate's precision; floor = the step's largest rounding bound (2 float32 or dtype "
       "rounding steps at the size of each element's terms) + 3 sigma of the score rounding; "
       "order: D, then the dQ pass (b, h, i, j: P, dP, dS, dQ_i), then the dK/dV pass (b, h, "
       "j, i: dV_j, dK_j); rows past S_q, keys past S_k, masked dP and skipped tile pairs are "
       "ignored\n\n";
  quantity_table(o, r.quantities);
  if (!r.first) {
    o << "\nfirst divergence: none: every backward state follows Algorithm 2\n";
    return o.str();
  }
  const verify::FirstDivergence& f = *r.first;
  const verify::StepCheck& c = f.step;
  const bool dkdv = c.quantity == verify::StateQuantity::dV || c.quantity == verify::StateQuantity::dK;
  o << "\nfirst divergence: b = " << c.b << ", h = " << c.h << ", query tile i = " << c.i;
  if (c.j >= 0) o << ", key tile j = " << c.j << (dkdv ? " (dK/dV pass)" : " (dQ pass)");
  o << ": " << verify::state_name(c.quantity) << ", Alg. 2 line " << verify::state_line(c.quantity)
    << ": " << verify::state_formula(c.quantity) << "\n";
  o << "  worst element: " << (dkdv ? "key " : "query ") << c.row;
  if (c.col >= 0) {
    const bool pair = c.quantity == verify::StateQuantity::P ||
                      c.quantity == verify::StateQuantity::dP ||
                      c.quantity == verify::StateQuantity::dS;
    o << (pair ? ", key " : ", column ") << c.col;
  }
  o << ": expected " << value_text(c.expected) << ", found " << value_text(c.found) << " (err "
    << sci(c.candidate_err) << " > limit " << sci(c.limit) << " = 3 * " << sci(c.baseline_err)
    << " + " << sci(c.floor_rounding + c.floor_noise) << ")\n";
  o << "  this step:     " << verdicts(f.this_step) << "\n";
  if (c.quantity != verify::StateQuantity::D) {
    if (f.previous_step.empty()) {
      o << "  previous step: none (" << (dkdv ? "the first query tile" : "the first key tile")
        << ")\n";
    } else {
      o << "  previous step (" << (dkdv ? "i = " + std::to_string(c.i - 1) : "j = " + std::to_string(c.j - 1))
        << "): " << verdicts(f.previous_step) << "\n";
    }
  }
  if (!f.cause.empty()) o << "  cause: [" << f.cause << "]\n";
  o << "  " << f.explanation << "\n";
  return o.str();
}

}  // namespace flashref::cli

// Judging a candidate's backward states step by step in the cpu backend's order (D, the dQ
// pass, the dK/dV pass), and naming the first step that fails (states.hpp, "Backward states";
// docs/verification.md, "Judging states").
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <numbers>
#include <sstream>
#include <tuple>

#include "flashref/error.hpp"
#include "flashref/verify/rule.hpp"
#include "flashref/verify/states.hpp"
#include "states_internal.hpp"

namespace flashref::verify {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
// Allowed ratio to the baseline state's error: the gradients' (rule.hpp).
constexpr double kBackwardStateK = 3.0;

std::size_t z(std::int64_t n) { return static_cast<std::size_t>(n); }

std::string num(double x) {
  std::ostringstream o;
  o.precision(7);
  o << x;
  return o.str();
}

// One quantity in the candidate's convention, its arrays read flat; `factor` scales the gold,
// the baseline and the floor's parts (the softmax scale in a scaled convention).
struct Quantity {
  StateQuantity q;
  std::function<double(std::size_t)> candidate;
  const xt::xtensor<double, 4>* gold4 = nullptr;  // D only
  const xt::xtensor<double, 4>* base4 = nullptr;
  const xt::xtensor<double, 4>* rounding4 = nullptr;
  const xt::xtensor<double, 4>* sigma4 = nullptr;
  const xt::xtensor<double, 6>* gold6 = nullptr;  // the others
  const xt::xtensor<double, 6>* base6 = nullptr;
  const xt::xtensor<double, 6>* rounding6 = nullptr;
  const xt::xtensor<double, 6>* sigma6 = nullptr;
  double factor = 1.0;
  double gold(std::size_t n) const { return factor * (gold4 ? gold4->flat(n) : gold6->flat(n)); }
  double base(std::size_t n) const { return factor * (base4 ? base4->flat(n) : base6->flat(n)); }
  // In a scaled convention `rounding6` is the gold's rounding_scaled, already in its units.
  double rounding(std::size_t n) const {
    return rounding4 ? rounding4->flat(n) : rounding6->flat(n);
  }
  double sigma(std::size_t n) const {
    return std::fabs(factor) * (sigma4 ? sigma4->flat(n) : sigma6->flat(n));
  }
};

// An element of a step: its flat index, row and column (StepCheck's), and whether it is judged.
struct Element {
  std::size_t n;
  std::int64_t row, col;
};

StepCheck check(const Quantity& Q, const std::vector<Element>& elements, std::int64_t b,
                std::int64_t h, std::int64_t i, std::int64_t j) {
  StepCheck c;
  c.quantity = Q.q;
  c.b = b;
  c.h = h;
  c.i = i;
  c.j = j;
  c.k = kBackwardStateK;
  double max_rounding = 0.0, max_sigma = 0.0;
  bool first = true;
  for (const Element& e : elements) {
    const double g = Q.gold(e.n), found = Q.candidate(e.n);
    const double err = detail::state_error(found, g);
    max_rounding = std::max(max_rounding, Q.rounding(e.n));
    max_sigma = std::max(max_sigma, Q.sigma(e.n));
    c.baseline_err = std::max(c.baseline_err, detail::state_error(Q.base(e.n), g));
    if (first || err > c.candidate_err || (std::isnan(found) && !std::isnan(c.found))) {
      first = false;
      c.candidate_err = std::max(c.candidate_err, err);
      c.row = e.row;
      c.col = e.col;
      c.expected = g;
      c.found = found;
    }
  }
  c.floor_rounding = max_rounding;
  c.floor_noise = rule_noise_floor(max_sigma);
  c.limit = c.k * c.baseline_err + c.floor_rounding + c.floor_noise;
  c.pass = c.candidate_err <= c.limit;
  c.ratio = c.limit > 0.0 ? c.candidate_err / c.limit : (c.candidate_err == 0.0 ? 0.0 : kInf);
  return c;
}

// The elements of each kind of step (states.hpp's layout), real rows and keys only.
class Steps {
 public:
  Steps(const Problem& p, const StatesShape& s) : p_(p), s_(s) {}

  std::int64_t rows(std::int64_t i) const { return std::min(s_.B_q, p_.S_q - i * s_.B_q); }
  std::int64_t keys(std::int64_t j) const { return std::min(s_.B_k, p_.S_k - j * s_.B_k); }

  std::vector<Element> D(std::int64_t a, std::int64_t bh, std::int64_t iq) const {
    std::vector<Element> out;
    const std::int64_t i = s_.i0 + iq;
    for (std::int64_t r = 0; r < rows(i); ++r)
      out.push_back({z(((a * s_.nh + bh) * s_.nq + iq) * s_.B_q + r), i * s_.B_q + r, -1});
    return out;
  }
  // P, dP, dS of tile pair (i, j); `visible_only` leaves out the entries the mask hides.
  std::vector<Element> pair(std::int64_t a, std::int64_t bh, std::int64_t iq, std::int64_t j,
                            bool visible_only) const {
    std::vector<Element> out;
    const std::int64_t i = s_.i0 + iq;
    for (std::int64_t r = 0; r < rows(i); ++r)
      for (std::int64_t c = 0; c < keys(j); ++c) {
        const std::int64_t q = i * s_.B_q + r, k = j * s_.B_k + c;
        if (visible_only && k > p_.last_visible_key(q)) continue;
        out.push_back(
            {z(((((a * s_.nh + bh) * s_.nq + iq) * s_.T_k + j) * s_.B_q + r) * s_.B_k + c), q,
             k});
      }
    return out;
  }
  std::vector<Element> dQ(std::int64_t a, std::int64_t bh, std::int64_t iq, std::int64_t j) const {
    std::vector<Element> out;
    const std::int64_t i = s_.i0 + iq;
    for (std::int64_t r = 0; r < rows(i); ++r)
      for (std::int64_t c = 0; c < s_.d; ++c)
        out.push_back({z(((((a * s_.nh + bh) * s_.nq + iq) * s_.T_k + j) * s_.B_q + r) * s_.d + c),
                       i * s_.B_q + r, c});
    return out;
  }
  std::vector<Element> key(std::int64_t a, std::int64_t bh, std::int64_t j, std::int64_t iq) const {
    std::vector<Element> out;
    for (std::int64_t r = 0; r < keys(j); ++r)
      for (std::int64_t c = 0; c < s_.d; ++c)
        out.push_back({z(((((a * s_.nh + bh) * s_.T_k + j) * s_.nq + iq) * s_.B_k + r) * s_.d + c),
                       j * s_.B_k + r, c});
    return out;
  }

 private:
  const Problem& p_;
  const StatesShape& s_;
};

// How badly the candidate fits the gold times `factor`: the sum over the finite entries of
// min(1, |candidate - factor gold| / the entry's own limit), the rule's limit for one entry
// (k |baseline - gold| + rounding + 3 sigma, all times |factor|). Entries whose gold is at the
// rounding's level fit both conventions and do not vote; a sum of raw differences would let
// them decide when every value is at that level (a near one-hot bf16 case with dK ~ 1e-7).
double misfit(const xt::xtensor<double, 6>& cand, const xt::xtensor<double, 6>& gold,
              const xt::xtensor<double, 6>& base, const xt::xtensor<double, 6>& rounding,
              const xt::xtensor<double, 6>& sigma, double factor) {
  double sum = 0.0;
  for (std::size_t n = 0; n < cand.size(); ++n) {
    const double c = cand.flat(n), g = gold.flat(n), b = base.flat(n);
    if (!std::isfinite(c) || !std::isfinite(g)) continue;
    const double base_err = std::isfinite(b) ? std::fabs(b - g) : 0.0;
    const double limit = std::fabs(factor) * (kBackwardStateK * base_err + rounding.flat(n) +
                                              rule_noise_floor(sigma.flat(n)));
    const double miss = std::fabs(c - g * factor);
    sum += limit > 0.0 ? std::min(1.0, miss / limit) : (miss > 0.0 ? 1.0 : 0.0);
  }
  return sum;
}

std::string ratio_text(double r) {
  std::ostringstream o;
  o.precision(r < 1000.0 ? 2 : 1);
  if (r < 1000.0) {
    o << std::fixed << r;
  } else {
    o << std::scientific << r;
  }
  return o.str();
}

std::string verdicts(const std::vector<StepCheck>& checks, StateQuantity except) {
  std::string s;
  for (const StepCheck& o : checks) {
    if (o.quantity == except) continue;
    s += (s.empty() ? "" : ", ") + std::string(state_name(o.quantity)) +
         (o.pass ? " right" : " wrong") + " (ratio " + ratio_text(o.ratio) + ")";
  }
  return s;
}

bool fits(const StepCheck& c, double hypothesis) {
  return hypothesis == c.found ||
         std::fabs(c.found - hypothesis) <= std::max(c.limit, 0.01 * c.candidate_err);
}

// The row's score S_qk (double, scaled) and L_q (the forward over every visible key).
double score(const ProblemData& data, std::int64_t b, std::int64_t h, std::int64_t q,
             std::int64_t k) {
  const Problem& p = data.problem;
  double dot = 0.0;
  for (std::int64_t c = 0; c < p.d; ++c)
    dot += static_cast<double>(data.q.get(b, h, q, c)) *
           static_cast<double>(data.k.get(b, h / p.group_size(), k, c));
  return p.scale * dot;
}
double lse(const ProblemData& data, std::int64_t b, std::int64_t h, std::int64_t q,
           std::int64_t B_k) {
  const Problem& p = data.problem;
  const detail::RowStates row =
      detail::gold_row(data, b, h, q, B_k, p.last_visible_key(q), p.S_k, false);
  return row.m.back() + std::log(row.l.back());
}

// What the failing step's numbers say, and a known mistake when one fits.
// `D_check`: the verdict on D for the step's query tile, when D was given.
void explain(FirstDivergence& f, const ProblemData& data, const StatesShape& s,
             const Quantity* P_q, const Quantity* dP_q, const Quantity* dS_q,
             const StepCheck* D_check) {
  const Problem& p = data.problem;
  const StepCheck& c = f.step;
  std::ostringstream why;
  why << state_name(c.quantity) << " is wrong at ";
  const bool dkdv = c.quantity == StateQuantity::dV || c.quantity == StateQuantity::dK;
  if (c.quantity == StateQuantity::D) {
    why << "query tile " << c.i << " (line 2, before the passes)";
  } else {
    why << "query tile " << c.i << ", key tile " << c.j
        << (dkdv ? " (the dK/dV pass)" : " (the dQ pass)");
  }
  const std::string others = verdicts(f.this_step, c.quantity);
  if (!others.empty()) why << " while " << others;
  if (c.quantity != StateQuantity::D) {
    if (f.previous_step.empty()) {
      why << (dkdv ? "; it is the first query tile that sees this key tile"
                   : "; it is the first key tile");
    } else {
      bool all_right = true;
      for (const StepCheck& o : f.previous_step) all_right = all_right && o.pass;
      if (all_right) {
        why << "; every state was right after " << (dkdv ? "query tile " : "key tile ")
            << (dkdv ? c.i - 1 : c.j - 1);
      }
    }
  }
  why << ".";
  const auto passed_here = [&](StateQuantity q) {
    for (const StepCheck& o : f.this_step)
      if (o.quantity == q) return o.pass;
    return false;
  };
  if (c.quantity == StateQuantity::D) {
    why << " Every dS, dQ_i and dK_j of these rows uses D: check that D is rowsum(dO * O) with "
           "the O the forward wrote (normalized, in its dtype).";
  } else if (c.quantity == StateQuantity::dS && P_q && dP_q && dS_q) {
    // The worst element's gold P and dP, in dS's convention.
    const std::int64_t col_in = c.col - c.j * s.B_k, row_in = c.row - c.i * s.B_q;
    const std::int64_t head = (c.b - s.b0) * s.nh + (c.h - s.h0);
    const std::int64_t tile = (head * s.nq + (c.i - s.i0)) * s.T_k + c.j;
    const std::size_t n = z((tile * s.B_q + row_in) * s.B_k + col_in);
    const double hyp = P_q->gold(n) * dP_q->gold(n) * dS_q->factor;
    if (fits(c, hyp)) {
      f.cause = "ds_without_D";
      why << " The found dS equals P * dP (" << num(hyp) << "): D_i was not subtracted (line 15)";
      if (D_check) {
        why << "; D itself was right (ratio " << ratio_text(D_check->ratio)
            << "), so line 15 read no D or a D of 0.";
      } else {
        why << ", or the D it read was 0 (give D.npy to judge D itself).";
      }
    } else if (passed_here(StateQuantity::P) && passed_here(StateQuantity::dP)) {
      why << " P and dP were right here: the error is in line 15 itself, or in the D_i it "
             "subtracts.";
    }
  } else if (c.quantity == StateQuantity::P) {
    const double S = score(data, c.b, c.h, c.row, c.col);
    const double L = lse(data, c.b, c.h, c.row, s.B_k);
    const bool masked = c.col > p.last_visible_key(c.row);
    if (masked && c.expected == 0.0 && std::isfinite(L) && fits(c, std::exp(S - L))) {
      f.cause = "P_unmasked";
      why << " Query " << c.row << " must not see key " << c.col << " (the causal mask), and "
          << "the found P is exp(S - L) = " << num(std::exp(S - L))
          << ": the backward's recomputation of S (line 11) was not masked on this diagonal "
             "tile, as the forward's was.";
    } else if (std::isfinite(L) && p.scale != 1.0 && fits(c, std::exp(S / p.scale - L))) {
      f.cause = "P_missing_scale";
      why << " The found P is exp(Q K^T - L) = " << num(std::exp(S / p.scale - L))
          << ": the backward recomputed S without the softmax scale " << num(p.scale)
          << " (line 11).";
    } else if (std::isfinite(L) && (fits(c, std::exp(S - L * std::numbers::ln2)) ||
                                    fits(c, std::exp(S - L * std::numbers::log2e)))) {
      f.cause = "P_lse_base_mismatch";
      why << " The found P is exp(S - L) with L read in the other base (log2 units against "
             "natural ones): the forward's L and the backward's exp must use the same base.";
    }
  } else if (c.quantity == StateQuantity::dQ || dkdv) {
    if (passed_here(StateQuantity::P) && passed_here(StateQuantity::dS)) {
      why << " The tile pair's P and dS were right: the error is in the update of line "
          << state_line(c.quantity) << " (" << state_formula(c.quantity) << ") itself.";
    }
  }
  f.explanation = why.str();
}

}  // namespace

std::string describe(const BackwardConventions& c) {
  return std::string(c.dS_scaled ? "dS scaled by the softmax scale" : "dS unscaled") + ", " +
         (c.dQ_scaled ? "dQ_i accumulator scaled" : "dQ_i accumulator unscaled") + ", " +
         (c.dK_scaled ? "dK_j accumulator scaled" : "dK_j accumulator unscaled") +
         " (unscaled: the scale applied after the loops)";
}

BackwardStatesReport judge_backward_states(const ProblemData& data, const StatesGrid& grid,
                                           const CandidateBackwardStates& candidate) {
  return judge_backward_states(data, grid, candidate, gold_backward_states(data, grid),
                               baseline_backward_states(data, grid));
}

BackwardStatesReport judge_backward_states(const ProblemData& data, const StatesGrid& grid,
                                           const CandidateBackwardStates& cand,
                                           const GoldBackwardStates& gold,
                                           const BackwardStates& base) {
  const Problem& p = data.problem;
  const StatesShape s = states_shape(p, grid);
  if (!cand.D && !cand.P && !cand.dP && !cand.dS && !cand.dQ && !cand.dV && !cand.dK) {
    throw InvalidArgument("states", "no backward state to judge: give D.npy, P.npy, dP.npy, "
                                    "dS.npy, dQ.npy, dV.npy or dK.npy");
  }
  if (data.dO.empty()) {
    throw InvalidArgument("--do", "the backward's states need dO, the gradient of O: give --do");
  }
  const auto require_shape = [](const auto& arr, const std::vector<std::size_t>& want,
                                const std::string& name, const char* layout) {
    const std::vector<std::size_t> got(arr.shape().begin(), arr.shape().end());
    if (got != want) {
      std::string w, g;
      for (std::size_t x : want) w += (w.empty() ? "" : ", ") + std::to_string(x);
      for (std::size_t x : got) g += (g.empty() ? "" : ", ") + std::to_string(x);
      throw InvalidArgument(name, "shape (" + g + ") is not the states layout's (" + w + "): " +
                                      layout + " for the tiles and selection given");
    }
  };
  if (cand.D) require_shape(*cand.D, s.row_shape(), "D.npy", "(B, H, T_q, B_q)");
  if (cand.P) require_shape(*cand.P, s.pair_shape(), "P.npy", "(B, H, T_q, T_k, B_q, B_k)");
  if (cand.dP) require_shape(*cand.dP, s.pair_shape(), "dP.npy", "(B, H, T_q, T_k, B_q, B_k)");
  if (cand.dS) require_shape(*cand.dS, s.pair_shape(), "dS.npy", "(B, H, T_q, T_k, B_q, B_k)");
  if (cand.dQ) require_shape(*cand.dQ, s.matrix_shape(), "dQ.npy", "(B, H, T_q, T_k, B_q, d)");
  if (cand.dV) require_shape(*cand.dV, s.key_shape(), "dV.npy", "(B, H, T_k, T_q, B_k, d)");
  if (cand.dK) require_shape(*cand.dK, s.key_shape(), "dK.npy", "(B, H, T_k, T_q, B_k, d)");

  BackwardStatesReport report;
  std::ostringstream note;
  // A scaled convention is picked when it leaves fewer than half as many entries off their
  // limit (misfit above): a kernel wrong at most entries, wrong in both conventions alike,
  // stays in the layout's, where its causes are tested (a bare majority picked the scaled one
  // for 53 of 400 random backwards without D in dS, and hid the cause).
  const auto pick = [&](const xt::xtensor<double, 6>& c, const xt::xtensor<double, 6>& g,
                        const xt::xtensor<double, 6>& b, const xt::xtensor<double, 6>& r,
                        const xt::xtensor<double, 6>& sg, const char* name, bool& scaled) {
    const double plain = misfit(c, g, b, r, sg, 1.0), scaled_fit = misfit(c, g, b, r, sg, p.scale);
    scaled = p.scale != 1.0 && scaled_fit < 0.5 * plain;
    note << (note.tellp() > 0 ? "; " : "") << name << ": entries off their limit " << num(plain)
         << " unscaled, " << num(scaled_fit) << " scaled";
  };
  if (cand.dS) {
    pick(*cand.dS, gold.value.dS, base.dS, gold.rounding.dS, gold.sigma.dS, "dS",
         report.conventions.dS_scaled);
  }
  if (cand.dQ) {
    pick(*cand.dQ, gold.value.dQ, base.dQ, gold.rounding.dQ, gold.sigma.dQ, "dQ",
         report.conventions.dQ_scaled);
  }
  if (cand.dK) {
    pick(*cand.dK, gold.value.dK, base.dK, gold.rounding.dK, gold.sigma.dK, "dK",
         report.conventions.dK_scaled);
  }
  report.conventions_note = note.str();
  const BackwardConventions& conv = report.conventions;

  const auto make6 = [&](StateQuantity q, const xt::xtensor<double, 6>& c,
                         const xt::xtensor<double, 6>& g, const xt::xtensor<double, 6>& b,
                         const xt::xtensor<double, 6>& r, const xt::xtensor<double, 6>& sg,
                         double factor) {
    Quantity Q;
    Q.q = q;
    Q.candidate = [&c](std::size_t n) { return c.flat(n); };
    Q.gold6 = &g;
    Q.base6 = &b;
    Q.rounding6 = &r;
    Q.sigma6 = &sg;
    Q.factor = factor;
    return Q;
  };
  std::optional<Quantity> D, P, dP, dS, dQ, dV, dK;
  if (cand.D) {
    Quantity Q;
    Q.q = StateQuantity::D;
    Q.candidate = [&c = *cand.D](std::size_t n) { return c.flat(n); };
    Q.gold4 = &gold.value.D;
    Q.base4 = &base.D;
    Q.rounding4 = &gold.rounding.D;
    Q.sigma4 = &gold.sigma.D;
    D = Q;
  }
  // P and dP serve dS's cause too: built when given, or for the hypothesis (candidate unused).
  if (cand.P) {
    P = make6(StateQuantity::P, *cand.P, gold.value.P, base.P, gold.rounding.P, gold.sigma.P, 1.0);
  }
  if (cand.dP) {
    dP = make6(StateQuantity::dP, *cand.dP, gold.value.dP, base.dP, gold.rounding.dP,
               gold.sigma.dP, 1.0);
  }
  if (cand.dS) {
    dS = make6(StateQuantity::dS, *cand.dS, gold.value.dS, base.dS,
               conv.dS_scaled ? gold.rounding_scaled.dS : gold.rounding.dS, gold.sigma.dS,
               conv.dS_scaled ? p.scale : 1.0);
  }
  if (cand.dQ) {
    dQ = make6(StateQuantity::dQ, *cand.dQ, gold.value.dQ, base.dQ,
               conv.dQ_scaled ? gold.rounding_scaled.dQ : gold.rounding.dQ, gold.sigma.dQ,
               conv.dQ_scaled ? p.scale : 1.0);
  }
  if (cand.dV) {
    dV = make6(StateQuantity::dV, *cand.dV, gold.value.dV, base.dV, gold.rounding.dV,
               gold.sigma.dV, 1.0);
  }
  if (cand.dK) {
    dK = make6(StateQuantity::dK, *cand.dK, gold.value.dK, base.dK,
               conv.dK_scaled ? gold.rounding_scaled.dK : gold.rounding.dK, gold.sigma.dK,
               conv.dK_scaled ? p.scale : 1.0);
  }
  // The gold's P and dP for dS's hypothesis when the candidate gave none.
  Quantity gold_P = make6(StateQuantity::P, gold.value.P, gold.value.P, base.P, gold.rounding.P,
                          gold.sigma.P, 1.0);
  Quantity gold_dP = make6(StateQuantity::dP, gold.value.dP, gold.value.dP, base.dP,
                           gold.rounding.dP, gold.sigma.dP, 1.0);

  std::vector<Quantity*> order;
  for (auto* q : {&D, &P, &dP, &dS, &dQ, &dV, &dK})
    if (*q) order.push_back(&**q);
  for (const Quantity* q : order) report.quantities.push_back({q->q, 0, 0, {}});
  // D's verdict per (b, h, i), for dS's explanation.
  std::map<std::tuple<std::int64_t, std::int64_t, std::int64_t>, StepCheck> D_checks;
  const auto tally = [&](const StepCheck& c) {
    for (QuantitySummary& sum : report.quantities) {
      if (sum.quantity != c.quantity) continue;
      if (sum.steps == 0 || c.ratio > sum.worst.ratio) sum.worst = c;
      ++sum.steps;
      if (!c.pass) ++sum.failed;
    }
  };
  const auto diverge = [&](const StepCheck& c, const std::vector<StepCheck>& step,
                           const std::vector<StepCheck>& previous) {
    if (report.first || c.pass) return;
    FirstDivergence f;
    f.step = c;
    f.this_step = step;
    f.previous_step = previous;
    const auto d_at = D_checks.find({c.b, c.h, c.i});
    explain(f, data, s, &gold_P, &gold_dP, dS ? &*dS : nullptr,
            d_at == D_checks.end() ? nullptr : &d_at->second);
    report.first = std::move(f);
  };
  const Steps steps(p, s);
  const auto pair_checks = [&](std::int64_t a, std::int64_t bh, std::int64_t iq, std::int64_t j) {
    std::vector<StepCheck> out;
    const std::int64_t b = s.b0 + a, h = s.h0 + bh, i = s.i0 + iq;
    if (P) out.push_back(check(*P, steps.pair(a, bh, iq, j, false), b, h, i, j));
    // dP where the mask hides the key is never used: not judged.
    if (dP) out.push_back(check(*dP, steps.pair(a, bh, iq, j, true), b, h, i, j));
    if (dS) out.push_back(check(*dS, steps.pair(a, bh, iq, j, false), b, h, i, j));
    return out;
  };

  // Line 2: D, per query tile.
  if (D) {
    for (std::int64_t a = 0; a < s.nb; ++a)
      for (std::int64_t bh = 0; bh < s.nh; ++bh)
        for (std::int64_t iq = 0; iq < s.nq; ++iq) {
          const StepCheck c = check(*D, steps.D(a, bh, iq), s.b0 + a, s.h0 + bh, s.i0 + iq, -1);
          tally(c);
          D_checks[{c.b, c.h, c.i}] = c;
          diverge(c, {c}, {});
        }
  }
  // The dQ pass: (b, h, i), key tiles j in order: P, dP, dS (lines 12, 14, 15), dQ_i (16).
  for (std::int64_t a = 0; a < s.nb; ++a)
    for (std::int64_t bh = 0; bh < s.nh; ++bh)
      for (std::int64_t iq = 0; iq < s.nq; ++iq) {
        std::vector<StepCheck> previous;
        const std::int64_t i = s.i0 + iq;
        for (std::int64_t j = 0; j < s.T_k && visits(p, s, i, j); ++j) {
          std::vector<StepCheck> step = pair_checks(a, bh, iq, j);
          if (dQ) step.push_back(check(*dQ, steps.dQ(a, bh, iq, j), s.b0 + a, s.h0 + bh, i, j));
          for (const StepCheck& c : step) tally(c);
          for (const StepCheck& c : step) diverge(c, step, previous);
          previous = std::move(step);
        }
      }
  // The dK/dV pass: (b, h, j), query tiles i in order: dV_j (13), dK_j (17).
  if (dV || dK) {
    for (std::int64_t a = 0; a < s.nb; ++a)
      for (std::int64_t bh = 0; bh < s.nh; ++bh)
        for (std::int64_t j = 0; j < s.T_k; ++j) {
          std::vector<StepCheck> previous;
          for (std::int64_t iq = 0; iq < s.nq; ++iq) {
            const std::int64_t i = s.i0 + iq;
            if (!visits(p, s, i, j)) continue;
            std::vector<StepCheck> step;
            if (dV) step.push_back(check(*dV, steps.key(a, bh, j, iq), s.b0 + a, s.h0 + bh, i, j));
            if (dK) step.push_back(check(*dK, steps.key(a, bh, j, iq), s.b0 + a, s.h0 + bh, i, j));
            for (const StepCheck& c : step) tally(c);
            if (!report.first) {
              for (const StepCheck& c : step) {
                if (c.pass) continue;
                // The tile pair's P, dP, dS (judged in the dQ pass) as context.
                std::vector<StepCheck> context = step;
                for (const StepCheck& x : pair_checks(a, bh, iq, j)) context.push_back(x);
                diverge(c, context, previous);
                break;
              }
            }
            previous = std::move(step);
          }
        }
  }
  return report;
}

nlohmann::json to_json(const BackwardStatesReport& r) {
  nlohmann::json quantities = nlohmann::json::array();
  for (const QuantitySummary& q : r.quantities) {
    quantities.push_back({{"quantity", std::string(state_name(q.quantity))},
                          {"algorithm", 2},
                          {"line", state_line(q.quantity)},
                          {"steps", q.steps},
                          {"failed_steps", q.failed},
                          {"worst", detail::step_json(q.worst)}});
  }
  const nlohmann::json first = r.first ? detail::divergence_json(*r.first) : nlohmann::json();
  return {{"conventions",
           {{"dS_scaled", r.conventions.dS_scaled},
            {"dQ_scaled", r.conventions.dQ_scaled},
            {"dK_scaled", r.conventions.dK_scaled},
            {"text", describe(r.conventions)},
            {"evidence", r.conventions_note}}},
          {"quantities", quantities},
          {"first_divergence", first},
          {"passed", r.passed()}};
}

}  // namespace flashref::verify

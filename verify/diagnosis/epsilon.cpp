// The epsilon hypotheses (softmax_epsilon): an epsilon added "for stability" somewhere in the
// softmax, which students do. Where it can be seen (docs/verification.md, "An epsilon in the
// softmax"):
//
// - added to every score: softmax is shift-invariant, so P and O do not move, but
//   L = log sum_j exp(S_ij + c) = L + c. Only L shows it, as the same offset c in every row.
// - added to the denominator, l + eps: with the running max subtracted l >= 1, so O moves by
//   the relative -eps / (l_i + eps) and L by log(1 + eps / l_i), most in rows whose softmax
//   is nearly one-hot (l near 1).
//
// Either way eps is fitted from the candidate (one number), and the hypothesis must then fit
// like any other (within the tolerance, 10 times closer than the right answer), on every
// tensor it changes that failed (an L that fits next to an O that does not is not this
// mistake). One fitted number fits any offset of a single row exactly, so a fit is evidence
// only over several rows: at least kMinRows rows that see a key. And a constant added to the
// scores leaves O exactly right, so it is not proposed when O failed: the fuzz's shrinking
// ends on one query and one key, where a TF32 kernel's L is the score off by a TF32 rounding
// and its O fails too (tests/verify/tiny_problem_findings_test.cpp). An epsilon
// below float32's resolution (1e-8 or 1e-10 next to l >= 1 or |S| ~ 1) changes nothing at all
// and cannot be seen; one that changes the outputs by less than their limit passes.
#include <cmath>
#include <limits>

#include "internal.hpp"

namespace flashref::verify::diagnosis {
namespace {

// Fewer rows than this and an offset "the same in every row" is no evidence: one unknown,
// fitted on a handful of numbers, matches them by construction.
constexpr std::int64_t kMinRows = 4;

bool finite_row(double gold_l) {
  return std::isfinite(gold_l) && gold_l > 0.0;
}

}  // namespace

std::vector<Hypothesis> epsilon_hypotheses(const Context& ctx) {
  if (!ctx.needs_forward()) return {};
  const bool have_L = ctx.candidate.has(TensorId::L);
  const auto& gold_L = ctx.forward.L;
  const auto& l = ctx.forward.l;
  std::vector<Hypothesis> out;

  // A constant added to every score: L + c, O unchanged. c is the mean offset of L.
  if (have_L && ctx.failed_any({TensorId::L}) && !ctx.failed_any({TensorId::O})) {
    const xt::xarray<double>& cand = ctx.candidate.at(TensorId::L);
    double sum = 0.0;
    std::int64_t rows = 0;
    for (std::size_t r = 0; r < gold_L.size(); ++r) {
      if (!finite_row(l.flat(r)) || !std::isfinite(cand.flat(r))) continue;
      sum += cand.flat(r) - gold_L.flat(r);
      ++rows;
    }
    if (rows >= kMinRows && sum != 0.0) {
      const double c = sum / static_cast<double>(rows);
      Hypothesis h;
      h.code = "softmax_epsilon";
      h.explanation =
          "L is the right logsumexp plus the same " + format_number(c) + " in every row (" +
          std::to_string(rows) + " rows)" +
          (ctx.candidate.has(TensorId::O) ? ", and O is right" : "") +
          ": a constant (an epsilon) was added to every score. "
          "Softmax ignores a shift, so O does not move, but L = log sum exp(S + eps) = L + eps; "
          "remove it: once the running max is subtracted no epsilon is needed";
      h.detail = {{"added_to", "scores"}, {"epsilon_fits", c}, {"rows", rows}};
      xt::xarray<double> L = gold_L;
      for (std::size_t r = 0; r < L.size(); ++r)
        if (finite_row(l.flat(r))) L.flat(r) += c;
      h.variant[TensorId::L] = std::move(L);
      out.push_back(std::move(h));
    }
  }

  // An epsilon added to the denominator l: fitted by least squares on L's offsets,
  // log(1 + eps / l_i) ~ eps / l_i, or on O's, -eps O_ic / l_i, when L is not given.
  double num = 0.0, den = 0.0;
  std::int64_t rows = 0;
  if (have_L) {
    const xt::xarray<double>& cand = ctx.candidate.at(TensorId::L);
    for (std::size_t r = 0; r < gold_L.size(); ++r) {
      if (!finite_row(l.flat(r)) || !std::isfinite(cand.flat(r))) continue;
      const double w = 1.0 / l.flat(r);
      num += (cand.flat(r) - gold_L.flat(r)) * w;
      den += w * w;
      ++rows;
    }
  } else if (ctx.candidate.has(TensorId::O)) {
    const xt::xarray<double>& cand = ctx.candidate.at(TensorId::O);
    const auto& O = ctx.forward.O;
    const std::size_t d = O.shape()[3];
    for (std::size_t r = 0; r < l.size(); ++r) {
      if (finite_row(l.flat(r))) ++rows;
    }
    for (std::size_t e = 0; e < O.size(); ++e) {
      const double lr = l.flat(e / d);
      if (!finite_row(lr) || !std::isfinite(cand.flat(e))) continue;
      const double w = -O.flat(e) / lr;
      num += (cand.flat(e) - O.flat(e)) * w;
      den += w * w;
    }
  }
  const double eps = den > 0.0 ? num / den : 0.0;
  if (rows >= kMinRows && eps > 0.0 && std::isfinite(eps)) {
    Hypothesis h;
    h.code = "softmax_epsilon";
    h.explanation =
        "O and L fit an epsilon of " + format_number(eps) +
        " added to the softmax's denominator (O = acc / (l + eps), L = m + log(l + eps)); once "
        "the running max is subtracted l >= 1, so no epsilon is needed: remove it (a row that "
        "sees no key, l = 0, needs its own case: O = 0, L = -inf)";
    h.detail = {{"added_to", "denominator"}, {"epsilon_fits", eps}, {"rows", rows}};
    h.all_or_nothing = true;
    if (ctx.failed_any({TensorId::O})) {
      xt::xarray<double> O = ctx.forward.O;
      const std::size_t d = O.shape()[3];
      for (std::size_t e = 0; e < O.size(); ++e) {
        const double lr = l.flat(e / d);
        if (finite_row(lr)) O.flat(e) *= lr / (lr + eps);
      }
      h.variant[TensorId::O] = std::move(O);
    }
    if (ctx.failed_any({TensorId::L})) {
      xt::xarray<double> L = gold_L;
      for (std::size_t r = 0; r < L.size(); ++r)
        if (finite_row(l.flat(r))) L.flat(r) += std::log1p(eps / l.flat(r));
      h.variant[TensorId::L] = std::move(L);
    }
    out.push_back(std::move(h));
  }
  return out;
}

}  // namespace flashref::verify::diagnosis

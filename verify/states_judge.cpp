// Judging a candidate's states step by step, and naming the first step that fails
// (states.hpp; docs/verification.md, "Judging states").
#include <algorithm>
#include <cstdio>
#include <cmath>
#include <functional>
#include <limits>
#include <numbers>
#include <sstream>

#include "flashref/error.hpp"
#include "flashref/verify/rule.hpp"
#include "flashref/verify/states.hpp"
#include "flashref/verify/sum_magnitude.hpp"
#include "states_internal.hpp"

namespace flashref::verify {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
// Allowed ratio to the baseline state's error: the same as O's (rule.hpp).
constexpr double kStateK = 2.0;

std::size_t z(std::int64_t n) { return static_cast<std::size_t>(n); }

std::string num(double x) {
  std::ostringstream o;
  o.precision(7);
  o << x;
  return o.str();
}

// One quantity in the candidate's convention: the arrays flattened as (step, row, col).
struct Quantity {
  StateQuantity q;
  std::int64_t cols = 1;  // d for acc
  std::function<double(std::size_t)> candidate, gold, baseline, sigma;
  // The size the floor's rounding part is taken at: |gold| for m and l (l sums positive
  // terms), the sum of |terms| for acc (which may cancel).
  std::function<double(std::size_t)> size;
  // A floor part of its own per entry (StepCheck::floor_operand), or none.
  std::function<double(std::size_t)> operand = nullptr;
};

std::size_t flat(const StatesShape& s, std::int64_t a, std::int64_t bh, std::int64_t iq,
                 std::int64_t j, std::int64_t r) {
  return z((((a * s.nh + bh) * s.nq + iq) * s.T_k + j) * s.B_q + r);
}

StepCheck check_step(const Quantity& Q, const Problem& p, const StatesShape& s, std::int64_t a,
                     std::int64_t bh, std::int64_t iq, std::int64_t j) {
  StepCheck c;
  c.quantity = Q.q;
  c.b = s.b0 + a;
  c.h = s.h0 + bh;
  c.i = s.i0 + iq;
  c.j = j;
  c.k = kStateK;
  const std::int64_t rows = std::min(s.B_q, p.S_q - c.i * s.B_q);
  double max_gold = 0.0, max_sigma = 0.0, max_operand = 0.0;
  bool first = true;
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t col = 0; col < Q.cols; ++col) {
      const std::size_t n = flat(s, a, bh, iq, j, r) * z(Q.cols) + z(col);
      const double g = Q.gold(n), found = Q.candidate(n);
      const double e = detail::state_error(found, g);
      const double size = Q.size ? Q.size(n) : std::fabs(g);
      if (std::isfinite(size)) max_gold = std::max(max_gold, size);
      max_sigma = std::max(max_sigma, Q.sigma(n));
      if (Q.operand) {
        const double o = Q.operand(n);
        if (std::isfinite(o)) max_operand = std::max(max_operand, o);
      }
      c.baseline_err = std::max(c.baseline_err, detail::state_error(Q.baseline(n), g));
      if (first || e > c.candidate_err || (std::isnan(found) && !std::isnan(c.found))) {
        first = false;
        c.candidate_err = std::max(c.candidate_err, e);
        c.row = c.i * s.B_q + r;
        c.col = Q.q == StateQuantity::acc ? col : -1;
        c.expected = g;
        c.found = found;
      }
    }
  }
  c.floor_rounding = rule_floor(DType::f32, max_gold);
  c.floor_noise = rule_noise_floor(max_sigma);
  c.floor_operand = max_operand;
  c.limit = c.k * c.baseline_err + c.floor_rounding + c.floor_noise + c.floor_operand;
  c.pass = c.candidate_err <= c.limit;
  c.ratio = c.limit > 0.0 ? c.candidate_err / c.limit : (c.candidate_err == 0.0 ? 0.0 : kInf);
  return c;
}

// Sums of |candidate - gold * factor| over the finite entries, to tell conventions apart.
template <class Cand, class Gold>
double misfit(const Cand& cand, const Gold& gold, double factor) {
  double sum = 0.0;
  for (std::size_t n = 0; n < cand.size(); ++n) {
    const double c = cand.flat(n), g = gold.flat(n);
    if (std::isfinite(c) && std::isfinite(g)) sum += std::fabs(c - g * factor);
  }
  return sum;
}

double normalized(double acc, double l) { return l > 0.0 ? acc / l : 0.0; }

// e^(m - kept): the factor by which l and acc relative to a kept max exceed them relative to m.
// 1 where the two are equal (also a row that has seen no key: -inf both, not e^(-inf + inf)) or
// where no max is kept yet.
double lag_to_kept(double m, double kept) {
  return m == kept || !std::isfinite(kept) ? 1.0 : std::exp(m - kept);
}

// The running max a kernel with FlashAttention-4's conditional rescale keeps, from the
// candidate's own m (in natural-log units after dividing by `units`): walking each row's key
// tiles in order, the gold max of the step, or, where the candidate's m is nearer the max kept
// after the step before and the gold max is at most kConditionalRescale above that, the kept one
// (the step deferred its rescale). `kept_at` is the flat index of the step whose gold max it is.
// A kernel that rescales every step keeps the gold max throughout.
struct KeptMax {
  xt::xtensor<double, 5> m;
  std::vector<std::size_t> kept_at;
};
KeptMax kept_max(const Problem& p, const StatesShape& s, const xt::xtensor<double, 5>& cand,
                 const xt::xtensor<double, 5>& gold, double units) {
  KeptMax k{gold, std::vector<std::size_t>(gold.size())};
  for (std::size_t n = 0; n < gold.size(); ++n) k.kept_at[n] = n;
  for (std::int64_t a = 0; a < s.nb; ++a)
    for (std::int64_t bh = 0; bh < s.nh; ++bh)
      for (std::int64_t iq = 0; iq < s.nq; ++iq)
        for (std::int64_t r = 0; r < s.B_q; ++r)
          for (std::int64_t j = 1; j < s.T_k && visits(p, s, s.i0 + iq, j); ++j) {
            const std::size_t n = flat(s, a, bh, iq, j, r), before = flat(s, a, bh, iq, j - 1, r);
            const double c = cand.flat(n) / units, g = gold.flat(n), kept = k.m.flat(before);
            if (!std::isfinite(c) || !std::isfinite(kept) || !(g - kept <= kConditionalRescale))
              continue;
            if (std::fabs(c - kept) < std::fabs(c - g)) {
              k.m.flat(n) = kept;
              k.kept_at[n] = k.kept_at[before];
            }
          }
  return k;
}

std::string ratio_text(double r) {
  char buf[32];
  std::snprintf(buf, sizeof buf, r < 1000.0 ? "%.2f" : "%.1e", r);
  return buf;
}

std::string check_word(const StepCheck& c) {
  return std::string(state_name(c.quantity)) + (c.pass ? " right" : " wrong") + " (ratio " +
         ratio_text(c.ratio) + ")";
}

// What the failing step's numbers say, and a known mistake when one fits. Under the conditional
// rescale (`kept`, the max the candidate keeps; null without it) each hypothesis is formed in the
// kept max's frame, as the candidate's l and acc are: a gold state times e^(m - kept), and the
// rescale's factor e^(kept_old - kept_new), which is 1 at a deferred step.
void explain(FirstDivergence& f, const ProblemData& data, const StatesShape& s,
             const StateConventions& conv, const GoldForwardStates& gold, const KeptMax* kept) {
  const Problem& p = data.problem;
  const StepCheck& c = f.step;
  std::ostringstream why;
  why << state_name(c.quantity) << " is wrong at query tile " << c.i << ", key tile " << c.j;
  std::string at_step;
  for (const StepCheck& o : f.this_step)
    if (o.quantity != c.quantity) at_step += (at_step.empty() ? "" : ", ") + check_word(o);
  if (!at_step.empty()) why << " while " << at_step;
  if (f.previous_step.empty()) {
    why << "; it is the first key tile";
  } else {
    bool all_right = true;
    for (const StepCheck& o : f.previous_step) all_right = all_right && o.pass;
    why << (all_right ? "; every state was right after key tile " : "; after key tile ")
        << c.j - 1;
  }
  why << ".";

  // The gold states of the worst row around the step.
  const std::int64_t a = c.b - s.b0, bh = c.h - s.h0, iq = c.i - s.i0, r = c.row - c.i * s.B_q;
  const auto G = [&](const xt::xtensor<double, 5>& arr, std::int64_t j) {
    return arr(z(a), z(bh), z(iq), z(j), z(r));
  };
  const std::int64_t col = std::max<std::int64_t>(c.col, 0);
  const auto A = [&](std::int64_t j) {
    return gold.value.acc(z(a), z(bh), z(iq), z(j), z(r), z(col));
  };
  // The max at step j of tile row rr, as the candidate keeps it (the gold max without the
  // deferral), and e^(gold m - that max), the factor its l and acc carry.
  const auto max_at = [&](std::int64_t j, std::int64_t rr) {
    const xt::xtensor<double, 5>& m = kept ? kept->m : gold.value.m;
    return m(z(a), z(bh), z(iq), z(j), z(rr));
  };
  const auto lag_at = [&](std::int64_t j, std::int64_t rr) {
    return lag_to_kept(gold.value.m(z(a), z(bh), z(iq), z(j), z(rr)), max_at(j, rr));
  };
  const double m_new = max_at(c.j, r);
  const double m_old = c.j > 0 ? max_at(c.j - 1, r) : -kInf;
  const double alpha = m_old == -kInf ? 0.0 : std::exp(m_old - m_new);
  // l and acc at step j in the candidate's frame.
  const auto L = [&](std::int64_t j) { return G(gold.value.l, j) * lag_at(j, r); };
  const auto A_kept = [&](std::int64_t j) { return A(j) * lag_at(j, r); };
  const double tol = std::max(c.limit, 0.01 * c.candidate_err);
  const auto fits = [&](double hypothesis) {
    return hypothesis == c.found || std::fabs(c.found - hypothesis) <= tol;
  };
  // A hypothetical row's state, in the candidate's conventions (its l and unnormalized acc
  // re-based to the candidate's kept max under the deferral).
  const auto in_convention = [&](const detail::RowStates& row) {
    const double rm = row.m[z(c.j)];
    const double lag = kept ? lag_to_kept(rm, max_at(c.j, r)) : 1.0;
    switch (c.quantity) {
      case StateQuantity::m:
        return rm * (conv.m_log2 ? std::numbers::log2e : 1.0);
      case StateQuantity::l:
        return row.l[z(c.j)] * lag;
      case StateQuantity::acc: {
        const double v = row.acc[z(c.j * p.d + col)];
        return conv.acc_normalized ? normalized(v, row.l[z(c.j)]) : v * lag;
      }
      default:  // the backward's quantities are judged in states_backward_judge.cpp
        return 0.0;
    }
  };
  const std::int64_t T_k = s.T_k;
  const bool diagonal = visits(p, s, c.i, c.j) && p.is_causal() &&
                        p.last_visible_key(c.i * s.B_q) < std::min(p.S_k, (c.j + 1) * s.B_k) - 1;
  const bool partial_last = c.j == T_k - 1 && p.S_k % s.B_k != 0;

  if (c.quantity == StateQuantity::m && c.found == 0.0 && c.expected < 0.0) {
    f.cause = "max_init_zero";
    why << " m = 0 where every score the row has seen is below 0: the running max started at 0 "
           "instead of -inf (line 6), so P~ = exp(S - 0) and l, O are computed against the "
           "wrong max.";
  } else if (c.quantity == StateQuantity::l && c.j > 0 && alpha != 1.0 &&
             fits(L(c.j - 1) + (L(c.j) - alpha * L(c.j - 1)))) {
    f.cause = "l_not_rescaled";
    why << (kept ? " The kept max grew" : " The max grew") << " at this step (m " << num(m_old)
        << " -> " << num(m_new)
        << ") and the found l equals l_old + rowsum(P~): l was not multiplied by exp(m_old - m) "
           "= "
        << num(alpha) << " (line 12).";
    for (const StepCheck& o : f.this_step) {
      if (o.quantity != StateQuantity::acc || o.pass || conv.acc_normalized) continue;
      const std::int64_t orow = o.row - c.i * s.B_q;
      const double a_old =
          gold.value.acc(z(a), z(bh), z(iq), z(c.j - 1), z(orow), z(o.col)) * lag_at(c.j - 1, orow);
      const double a_new =
          gold.value.acc(z(a), z(bh), z(iq), z(c.j), z(orow), z(o.col)) * lag_at(c.j, orow);
      const double row_alpha = std::exp(max_at(c.j - 1, orow) - max_at(c.j, orow));
      const double hypothesis = a_old + (a_new - row_alpha * a_old);
      if (std::fabs(o.found - hypothesis) <= std::max(o.limit, 0.01 * o.candidate_err)) {
        why << " acc was not rescaled either (line 13): the factor exp(m_old - m) was 1 for "
               "both, as when it is computed after m was overwritten with the new max.";
      }
    }
  } else if (c.quantity == StateQuantity::acc && !conv.acc_normalized && c.j > 0 && alpha != 1.0 &&
             fits(A_kept(c.j - 1) + (A_kept(c.j) - alpha * A_kept(c.j - 1)))) {
    f.cause = "acc_not_rescaled";
    why << (kept ? " The kept max grew" : " The max grew") << " at this step (m " << num(m_old)
        << " -> " << num(m_new)
        << ") and the found acc equals acc_old + P~ V: the accumulator was not multiplied by "
           "exp(m_old - m) = "
        << num(alpha)
        << " (line 13); a factor computed from the new max twice, exp(m - m) = 1, does this.";
  } else if (diagonal &&
             fits(in_convention(detail::gold_row(data, c.b, c.h, c.row, s.B_k,
                                                 p.last_visible_key(c.row) - 1, p.S_k, false)))) {
    f.cause = "diagonal_mask_strict";
    why << " This diagonal tile is the first that compares indices, and the found value is the "
           "state without the row's last visible key ("
        << p.last_visible_key(c.row) << "): the mask compares with < where <= belongs.";
  } else if (partial_last) {
    const std::int64_t pad_end = T_k * s.B_k;
    std::int64_t reach = pad_end - 1;  // the index comparison, run on the padded keys too
    if (p.mask == Mask::causal_top_left) reach = std::min(reach, c.row);
    if (p.mask == Mask::causal_bottom_right) reach = std::min(reach, c.row + p.S_k - p.S_q);
    if (fits(in_convention(
            detail::gold_row(data, c.b, c.h, c.row, s.B_k, reach, pad_end, false)))) {
      f.cause = "key_padding_unmasked";
      why << " This is the last key tile, partial (S_k = " << p.S_k << ", B_k = " << s.B_k
          << "), and the found value is the state with the " << pad_end - p.S_k
          << " keys past S_k read as zeros and not masked (each scores 0 and takes softmax "
             "weight).";
    } else {
      f.cause = "key_tile_tail";
      why << " This is the last key tile, partial (S_k = " << p.S_k << ", B_k = " << s.B_k
          << "): keys past S_k must be masked (or not loaded).";
    }
  } else if (diagonal) {
    why << " This is a diagonal tile, the first that compares indices: check the mask.";
  }
  f.explanation = why.str();
}

}  // namespace

std::string_view state_name(StateQuantity q) {
  switch (q) {
    case StateQuantity::m:
      return "m";
    case StateQuantity::l:
      return "l";
    case StateQuantity::acc:
      return "acc";
    case StateQuantity::D:
      return "D";
    case StateQuantity::P:
      return "P";
    case StateQuantity::dP:
      return "dP";
    case StateQuantity::dS:
      return "dS";
    case StateQuantity::dQ:
      return "dQ_i";
    case StateQuantity::dV:
      return "dV_j";
    case StateQuantity::dK:
      return "dK_j";
  }
  return "?";
}

int state_algorithm(StateQuantity q) {
  return q == StateQuantity::m || q == StateQuantity::l || q == StateQuantity::acc ? 1 : 2;
}

int state_line(StateQuantity q) {
  switch (q) {
    case StateQuantity::m:
      return 10;
    case StateQuantity::l:
      return 12;
    case StateQuantity::acc:
      return 13;
    case StateQuantity::D:
      return 2;
    case StateQuantity::P:
      return 12;
    case StateQuantity::dP:
      return 14;
    case StateQuantity::dS:
      return 15;
    case StateQuantity::dQ:
      return 16;
    case StateQuantity::dV:
      return 13;
    case StateQuantity::dK:
      return 17;
  }
  return 0;
}

std::string_view state_formula(StateQuantity q) {
  switch (q) {
    case StateQuantity::m:
      return "m_i(j) = max(m_i(j-1), rowmax(S_ij))";
    case StateQuantity::l:
      return "l_i(j) = exp(m_i(j-1) - m_i(j)) l_i(j-1) + rowsum(P~_ij)";
    case StateQuantity::acc:
      return "O_i(j) = diag(exp(m_i(j-1) - m_i(j))) O_i(j-1) + P~_ij V_j";
    case StateQuantity::D:
      return "D_i = rowsum(dO_i * O_i)";
    case StateQuantity::P:
      return "P_ij = exp(S_ij - L_i), S_ij = scale Q_i K_j^T";
    case StateQuantity::dP:
      return "dP_ij = dO_i V_j^T";
    case StateQuantity::dS:
      return "dS_ij = P_ij * (dP_ij - D_i) (the scale applied after the loop)";
    case StateQuantity::dQ:
      return "dQ_i += dS_ij K_j";
    case StateQuantity::dV:
      return "dV_j += P_ij^T dO_i";
    case StateQuantity::dK:
      return "dK_j += dS_ij^T Q_i";
  }
  return "";
}

std::string describe(const StateConventions& c) {
  return std::string(c.m_log2 ? "m in log2 units (scores times log2 e)"
                              : "m in natural-log units") +
         (c.m_deferred
              ? ", m kept until a tile raises the max by more than 8 ln 2 (FlashAttention-4's "
                "conditional rescale)"
              : "") +
         ", " +
         (c.acc_normalized ? "acc normalized by l at every step (FlashAttention-1 style)"
                           : "acc unnormalized (FlashAttention-2)");
}

StatesReport judge_forward_states(const ProblemData& data, const StatesGrid& grid,
                                  const CandidateStates& candidate) {
  return judge_forward_states(data, grid, candidate, gold_forward_states(data, grid),
                              baseline_forward_states(data, grid));
}

StatesReport judge_forward_states(const ProblemData& data, const StatesGrid& grid,
                                  const CandidateStates& cand, const GoldForwardStates& gold,
                                  const ForwardStates& base) {
  const Problem& p = data.problem;
  const StatesShape s = states_shape(p, grid);
  if (!cand.m && !cand.l && !cand.acc) {
    throw InvalidArgument("states", "no state to judge: give m.npy, l.npy or acc.npy");
  }
  const auto require_shape = [](const auto& arr, const std::vector<std::size_t>& want,
                                const std::string& name) {
    const std::vector<std::size_t> got(arr.shape().begin(), arr.shape().end());
    if (got != want) {
      std::string w, g;
      for (std::size_t x : want) w += (w.empty() ? "" : ", ") + std::to_string(x);
      for (std::size_t x : got) g += (g.empty() ? "" : ", ") + std::to_string(x);
      throw InvalidArgument(name, "shape (" + g + ") is not the states layout's (" + w +
                                      "): (B, H, T_q, T_k, B_q[, d]) for the tiles and "
                                      "selection given");
    }
  };
  if (cand.m) require_shape(*cand.m, s.vector_shape(), "m.npy");
  if (cand.l) require_shape(*cand.l, s.vector_shape(), "l.npy");
  if (cand.acc) require_shape(*cand.acc, s.matrix_shape(), "acc.npy");

  StatesReport report;
  std::ostringstream note;
  // The conditional rescale: the kept max, and the factor e^(m - kept) that l and acc carry.
  std::optional<KeptMax> kept;
  if (cand.m) {
    const double natural = misfit(*cand.m, gold.value.m, 1.0);
    const double log2 = misfit(*cand.m, gold.value.m, std::numbers::log2e);
    report.conventions.m_log2 = log2 < natural;
    note << "m: summed |m - gold| " << num(natural) << " in natural-log units, " << num(log2)
         << " in log2 units";
    // The same against the max a deferring kernel keeps, in either unit. It must be under half
    // the plain conventions' misfit: a kernel that rescales every step keeps the gold max, but
    // for ties within a rounding, which must not make it a deferring one.
    KeptMax k_natural = kept_max(p, s, *cand.m, gold.value.m, 1.0);
    KeptMax k_log2 = kept_max(p, s, *cand.m, gold.value.m, std::numbers::log2e);
    const double deferred_natural = misfit(*cand.m, k_natural.m, 1.0);
    const double deferred_log2 = misfit(*cand.m, k_log2.m, std::numbers::log2e);
    const double deferred = std::min(deferred_natural, deferred_log2);
    if (deferred < 0.5 * std::min(natural, log2)) {
      report.conventions.m_deferred = true;
      report.conventions.m_log2 = deferred_log2 < deferred_natural;
      note << "; against a max kept until it grows by more than 8 ln 2, " << num(deferred_natural)
           << " in natural-log units, " << num(deferred_log2) << " in log2 units";
      kept = std::move(report.conventions.m_log2 ? k_log2 : k_natural);
    }
  }
  // e^(gold m - kept m) for a vector entry n (1 without the deferral, and where a row has seen
  // no key: -inf both), and the baseline's.
  const auto lag_factor = [&](std::size_t n) {
    return kept ? lag_to_kept(gold.value.m.flat(n), kept->m.flat(n)) : 1.0;
  };
  const auto base_factor = [&](std::size_t n) {
    return kept ? lag_to_kept(base.m.flat(n), kept->m.flat(n)) : 1.0;
  };
  if (cand.acc) {
    xt::xtensor<double, 6> gold_normalized = gold.value.acc, gold_raw = gold.value.acc;
    for (std::size_t n = 0; n < gold_normalized.size(); ++n) {
      gold_normalized.flat(n) = normalized(gold.value.acc.flat(n), gold.value.l.flat(n / z(s.d)));
      gold_raw.flat(n) *= lag_factor(n / z(s.d));  // relative to the kept max, if any
    }
    const double raw = misfit(*cand.acc, gold_raw, 1.0);
    const double norm = misfit(*cand.acc, gold_normalized, 1.0);
    report.conventions.acc_normalized = norm < raw;
    note << (cand.m ? "; " : "") << "acc: summed |acc - gold| " << num(raw)
         << " unnormalized, " << num(norm) << " normalized by l";
  }
  report.conventions_note = note.str();
  const StateConventions conv = report.conventions;

  std::vector<Quantity> quantities;
  if (cand.m) {
    const double f = conv.m_log2 ? std::numbers::log2e : 1.0;
    if (kept) {  // the kept max; the baseline's error and noise are those of the step it was set
      quantities.push_back(
          {StateQuantity::m, 1, [&c = *cand.m](std::size_t n) { return c.flat(n); },
           [&kept, f](std::size_t n) { return kept->m.flat(n) * f; },
           [&base, &gold, &kept, f](std::size_t n) {
             const std::size_t at = kept->kept_at[n];
             return (base.m.flat(at) - gold.value.m.flat(at) + kept->m.flat(n)) * f;
           },
           [&gold, &kept, f](std::size_t n) { return gold.sigma_m.flat(kept->kept_at[n]) * f; },
           nullptr});
    } else {
      quantities.push_back(
          {StateQuantity::m, 1, [&c = *cand.m](std::size_t n) { return c.flat(n); },
           [&gold, f](std::size_t n) { return gold.value.m.flat(n) * f; },
           [&base, f](std::size_t n) { return base.m.flat(n) * f; },
           [&gold, f](std::size_t n) { return gold.sigma_m.flat(n) * f; }, nullptr});
    }
  }
  // The score-rounding noise of l and acc relative to the kept max, anchored at the kept max's
  // key k' rather than the max's k*: with f = e^(m - kept m) and eps the scores' rounding sizes
  // (sigma_m at the two steps), first order, l' = f l gives sigma^2 <= (f sigma_l)^2 +
  // (f eps_k*)^2 + (l' eps_k')^2 (the max's key now a term of size f, the anchor's weight
  // l' - 1), and acc' = f acc gives sigma^2 <= (f sigma_acc)^2 + (T eps_k*)^2 + (2 T eps_k')^2,
  // T the terms' sum f sum_k P~_k |V_kc|, which bounds the max's term and the anchor's
  // |acc' - V_k'c|. Without a deferral at the entry, Algorithm 1's sigmas as they are.
  const auto sigma_l_kept = [&gold, &kept, lag_factor](std::size_t n) {
    const std::size_t at = kept->kept_at[n];
    if (at == n) return gold.sigma_l.flat(n);
    const double f = lag_factor(n);
    return std::hypot(std::hypot(f * gold.sigma_l.flat(n), f * gold.sigma_m.flat(n)),
                      f * gold.value.l.flat(n) * gold.sigma_m.flat(at));
  };
  const auto sigma_acc_kept = [&gold, &kept, lag_factor](std::size_t n, std::size_t d) {
    const std::size_t row = n / d, at = kept->kept_at[row];
    if (at == row) return gold.sigma_acc.flat(n);
    const double f = lag_factor(row), terms = f * gold.acc_terms.flat(n);
    return std::hypot(std::hypot(f * gold.sigma_acc.flat(n), terms * gold.sigma_m.flat(row)),
                      2.0 * terms * gold.sigma_m.flat(at));
  };
  if (cand.l) {
    quantities.push_back(
        {StateQuantity::l, 1, [&c = *cand.l](std::size_t n) { return c.flat(n); },
         [&gold, lag_factor](std::size_t n) { return gold.value.l.flat(n) * lag_factor(n); },
         [&base, base_factor](std::size_t n) { return base.l.flat(n) * base_factor(n); },
         [&gold, &kept, sigma_l_kept](std::size_t n) {
           return kept ? sigma_l_kept(n) : gold.sigma_l.flat(n);
         },
         nullptr});
  }
  // Under the conditional rescale a 16-bit kernel rounds the largest P~ = e^(S - kept m), which
  // the baseline (Algorithm 1, P~ = 1 there) holds exactly: each P~ is rounded by at most u of the
  // dtype, so acc by at most u sum_k P~_k |V_kc|, a bound the baseline's error does not give.
  const double operand_u = !kept                    ? 0.0
                           : p.dtype == DType::bf16 ? 0x1p-8
                           : p.dtype == DType::f16  ? 0x1p-11
                                                    : 0.0;
  if (cand.acc) {
    const std::size_t d = z(s.d);
    if (conv.acc_normalized) {
      quantities.push_back(
          {StateQuantity::acc, s.d, [&c = *cand.acc](std::size_t n) { return c.flat(n); },
           [&gold, d](std::size_t n) {
             return normalized(gold.value.acc.flat(n), gold.value.l.flat(n / d));
           },
           [&base, d](std::size_t n) { return normalized(base.acc.flat(n), base.l.flat(n / d)); },
           [&gold](std::size_t n) { return gold.sigma_acc_normalized.flat(n); },
           [&gold, d](std::size_t n) {
             return normalized(gold.acc_terms.flat(n), gold.value.l.flat(n / d));
           }});
      if (operand_u > 0.0)
        quantities.back().operand = [&gold, d, operand_u](std::size_t n) {
          return operand_u * normalized(gold.acc_terms.flat(n), gold.value.l.flat(n / d));
        };
    } else {
      quantities.push_back(
          {StateQuantity::acc, s.d, [&c = *cand.acc](std::size_t n) { return c.flat(n); },
           [&gold, lag_factor, d](std::size_t n) {
             return gold.value.acc.flat(n) * lag_factor(n / d);
           },
           [&base, base_factor, d](std::size_t n) { return base.acc.flat(n) * base_factor(n / d); },
           [&gold, &kept, sigma_acc_kept, d](std::size_t n) {
             return kept ? sigma_acc_kept(n, d) : gold.sigma_acc.flat(n);
           },
           [&gold, lag_factor, d](std::size_t n) {
             return gold.acc_terms.flat(n) * lag_factor(n / d);
           }});
      if (operand_u > 0.0)
        quantities.back().operand = [&gold, lag_factor, d, operand_u](std::size_t n) {
          return operand_u * gold.acc_terms.flat(n) * lag_factor(n / d);
        };
    }
  }
  for (const Quantity& q : quantities) report.quantities.push_back({q.q, 0, 0, {}});

  for (std::int64_t a = 0; a < s.nb; ++a)
    for (std::int64_t bh = 0; bh < s.nh; ++bh)
      for (std::int64_t iq = 0; iq < s.nq; ++iq) {
        std::vector<StepCheck> previous;
        for (std::int64_t j = 0; j < s.T_k && visits(p, s, s.i0 + iq, j); ++j) {
          std::vector<StepCheck> step;
          for (std::size_t n = 0; n < quantities.size(); ++n) {
            const StepCheck c = check_step(quantities[n], p, s, a, bh, iq, j);
            QuantitySummary& sum = report.quantities[n];
            if (sum.steps == 0 || c.ratio > sum.worst.ratio) sum.worst = c;
            ++sum.steps;
            if (!c.pass) ++sum.failed;
            step.push_back(c);
          }
          if (!report.first) {
            for (const StepCheck& c : step) {
              if (c.pass) continue;
              FirstDivergence f;
              f.step = c;
              f.this_step = step;
              f.previous_step = previous;
              explain(f, data, s, conv, gold, kept ? &*kept : nullptr);
              report.first = std::move(f);
              break;
            }
          }
          previous = std::move(step);
        }
      }
  return report;
}

namespace detail {

nlohmann::json step_json(const StepCheck& c) {
  const auto finite_or_null = [](double x) -> nlohmann::json {
    if (std::isfinite(x)) return x;
    if (std::isnan(x)) return "nan";
    return x > 0 ? "inf" : "-inf";
  };
  nlohmann::json j = {{"b", c.b},
                      {"h", c.h},
                      {"i", c.i},
                      {"j", c.j},
                      {"quantity", std::string(state_name(c.quantity))},
                      {"line", state_line(c.quantity)},
                      {"row", c.row},
                      {"expected", finite_or_null(c.expected)},
                      {"found", finite_or_null(c.found)},
                      {"candidate_err", finite_or_null(c.candidate_err)},
                      {"baseline_err", c.baseline_err},
                      {"k", c.k},
                      {"floor_rounding", c.floor_rounding},
                      {"floor_noise", c.floor_noise},
                      {"floor_operand", c.floor_operand},
                      {"limit", c.limit},
                      {"ratio", finite_or_null(c.ratio)},
                      {"pass", c.pass}};
  if (c.col >= 0) j["col"] = c.col;
  if (state_algorithm(c.quantity) == 2) j["algorithm"] = 2;
  return j;
}

nlohmann::json divergence_json(const FirstDivergence& f) {
  nlohmann::json first = step_json(f.step);
  first["formula"] = std::string(state_formula(f.step.quantity));
  first["cause"] = f.cause;
  first["explanation"] = f.explanation;
  first["this_step"] = nlohmann::json::array();
  for (const StepCheck& c : f.this_step) first["this_step"].push_back(step_json(c));
  first["previous_step"] = nlohmann::json::array();
  for (const StepCheck& c : f.previous_step) first["previous_step"].push_back(step_json(c));
  return first;
}

}  // namespace detail

nlohmann::json to_json(const StatesReport& r) {
  nlohmann::json quantities = nlohmann::json::array();
  for (const QuantitySummary& q : r.quantities) {
    quantities.push_back({{"quantity", std::string(state_name(q.quantity))},
                          {"line", state_line(q.quantity)},
                          {"steps", q.steps},
                          {"failed_steps", q.failed},
                          {"worst", detail::step_json(q.worst)}});
  }
  const nlohmann::json first = r.first ? detail::divergence_json(*r.first) : nlohmann::json();
  return {{"conventions",
           {{"m_log2", r.conventions.m_log2},
            {"m_deferred", r.conventions.m_deferred},
            {"acc_normalized", r.conventions.acc_normalized},
            {"text", describe(r.conventions)},
            {"evidence", r.conventions_note}}},
          {"quantities", quantities},
          {"first_divergence", first},
          {"passed", r.passed()}};
}

}  // namespace flashref::verify

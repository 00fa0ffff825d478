// Hypotheses about the forward pass's math: the softmax scale, the mask, how L is formed, and
// the final normalization of O. Scale and mask mistakes change the gradients too, so their
// variants carry every tensor being checked.
#include <cmath>
#include <numbers>

#include "internal.hpp"

namespace flashref::verify::diagnosis {
namespace {

std::string alignment_phrase(Mask m) {
  switch (m) {
    case Mask::none:
      return "nowhere";
    case Mask::causal_top_left:
      return "top-left (query q sees keys k <= q)";
    case Mask::causal_bottom_right:
      return "bottom-right (query q sees keys k <= q + S_k - S_q)";
  }
  return "?";
}

std::string mask_phrase(Mask m) {
  return m == Mask::none ? "no mask" : "a causal mask aligned " + alignment_phrase(m);
}

}  // namespace

std::vector<Hypothesis> scale_hypotheses(const Context& ctx) {
  const double s = ctx.problem.scale;
  const double d = static_cast<double>(ctx.problem.d);
  // The scales a kernel ends up with by a common slip, and the slip that gives each.
  const std::pair<double, const char*> slips[] = {
      {1.0, "no scale applied"},
      {s * s, "the scale applied twice"},
      {1.0 / d, "1/d instead of 1/sqrt(d)"},
      {1.0 / std::sqrt(d), "the default 1/sqrt(d) instead of the scale asked for"},
      {s * std::numbers::log2e, "log2(e) folded into the scale but exp used instead of exp2"},
      {s / std::numbers::log2e, "exp2 used without folding log2(e) into the scale"},
  };
  std::vector<Hypothesis> out;
  std::vector<double> tried{s};
  for (const auto& [scale, slip] : slips) {
    const bool seen = std::any_of(tried.begin(), tried.end(), [&](double t) {
      return std::fabs(t - scale) <= 1e-12 * std::fabs(t);
    });
    if (seen) continue;
    tried.push_back(scale);
    Problem changed = ctx.problem;
    changed.scale = scale;
    Hypothesis h;
    h.code = "no_scale";
    h.explanation = "the scores fit softmax scale " + format_number(scale) + " (" + slip +
                    ") instead of " + format_number(s) + ": S = scale * Q K^T is scaled wrongly";
    h.detail = {{"scale_fits", scale}, {"scale_expected", s}};
    h.variant = recompute(ctx, changed);
    // The same slip in S only, with dQ and dK still multiplied by the scale asked for
    // (eq. 18-19 written as dS K * s): those gradients differ by s / scale.
    if (h.variant.has(TensorId::dQ)) {
      Hypothesis kept = h;
      kept.explanation += " (the gradients kept the right scale)";
      kept.variant.erase(TensorId::O);
      kept.variant.erase(TensorId::L);
      kept.variant.erase(TensorId::dV);
      kept.variant[TensorId::dQ] *= s / scale;
      kept.variant[TensorId::dK] *= s / scale;
      out.push_back(std::move(h));
      out.push_back(std::move(kept));
    } else {
      out.push_back(std::move(h));
    }
  }
  return out;
}

std::vector<Hypothesis> mask_hypotheses(const Context& ctx) {
  const Problem& p = ctx.problem;
  std::vector<Hypothesis> out;
  auto add = [&](const char* code, Mask applied, const std::string& explanation) {
    Problem changed = p;
    changed.mask = applied;
    Hypothesis h;
    h.code = code;
    h.explanation = explanation;
    h.detail = {{"mask_expected", std::string(mask_name(p.mask))},
                {"mask_fits", std::string(mask_name(applied))}};
    h.variant = recompute(ctx, changed);
    out.push_back(std::move(h));
  };
  if (p.mask == Mask::none) {
    add("mask_unexpected", Mask::causal_top_left,
        mask_phrase(Mask::causal_top_left) + " was applied although none was asked for");
    // The two alignments coincide when S_q == S_k.
    if (p.S_q != p.S_k) {
      add("mask_unexpected", Mask::causal_bottom_right,
          mask_phrase(Mask::causal_bottom_right) + " was applied although none was asked for");
    }
    return out;
  }
  add("mask_ignored", Mask::none,
      "no mask was applied although " + mask_phrase(p.mask) + " was asked for");
  if (p.S_q != p.S_k) {
    const Mask other =
        p.mask == Mask::causal_top_left ? Mask::causal_bottom_right : Mask::causal_top_left;
    add("mask_alignment", other,
        "the causal mask is aligned " + alignment_phrase(other) + " where " +
            alignment_phrase(p.mask) + " was asked for (they differ because S_q != S_k)");
  }
  return out;
}

std::vector<Hypothesis> lse_hypotheses(const Context& ctx) {
  if (!ctx.failed_any({TensorId::L})) return {};
  const xt::xtensor<double, 3>& L = ctx.forward.L;
  Hypothesis base2;
  base2.code = "lse_base2";
  base2.explanation =
      "L is in log base 2 (L / ln 2): a kernel using exp2 must convert the logsumexp back to the "
      "natural log before writing it";
  base2.variant[TensorId::L] = L * std::numbers::log2e;
  Hypothesis unshifted;
  unshifted.code = "lse_unshifted";
  unshifted.explanation =
      "L is ln(l) without the running max: Algorithm 1 line 16 is L = m + ln(l)";
  unshifted.variant[TensorId::L] = xt::log(ctx.forward.l);
  return {std::move(base2), std::move(unshifted)};
}

std::vector<Hypothesis> output_hypotheses(const Context& ctx) {
  if (!ctx.failed_any({TensorId::O})) return {};
  const auto& l = ctx.forward.l;
  xt::xarray<double> O = ctx.forward.O;
  // Without line 15 each row of O keeps the factor l_i = sum_j exp(S_ij - m_i).
  for (std::size_t b = 0; b < O.shape()[0]; ++b)
    for (std::size_t h = 0; h < O.shape()[1]; ++h)
      for (std::size_t s = 0; s < O.shape()[2]; ++s)
        for (std::size_t i = 0; i < O.shape()[3]; ++i) O(b, h, s, i) *= l(b, h, s);
  Hypothesis h;
  h.code = "unnormalized";
  h.explanation = "O was not divided by l at the end (Algorithm 1 line 15: O_i = diag(l_i)^-1 O_i)";
  h.variant[TensorId::O] = std::move(O);
  return {std::move(h)};
}

}  // namespace flashref::verify::diagnosis

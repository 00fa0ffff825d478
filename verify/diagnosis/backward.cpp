// Hypotheses about the backward pass (Algorithm 2): the scale of dQ and dK, the vector
// D = rowsum(dO * O), and the sum of dK, dV over the query heads of a GQA group.
#include <algorithm>
#include <cmath>

#include <xtensor/xview.hpp>

#include "internal.hpp"
#include "flashref/verify/host_tensor.hpp"

namespace flashref::verify::diagnosis {
namespace {

// Rows of dQ are d numbers; the D fit spends one free parameter per row, so with fewer
// columns it could explain almost any error.
constexpr std::int64_t kMinHeadDimForFittedD = 4;

std::size_t n(std::int64_t x) {
  return static_cast<std::size_t>(x);
}

}  // namespace

std::vector<Hypothesis> gradient_scale_hypotheses(const Context& ctx) {
  const double s = ctx.problem.scale;
  if (!ctx.needs_backward() || s == 1.0) return {};
  std::vector<Hypothesis> out;
  auto add = [&](TensorId id, const char* code, const xt::xarray<double>& gold) {
    const std::string name(tensor_name(id));
    const std::string product = id == TensorId::dQ ? "dS K" : "dS^T Q";
    const std::string equation = id == TensorId::dQ ? "eq. 18" : "eq. 19";
    Hypothesis missing;
    missing.code = code;
    missing.explanation = name + " is missing the softmax scale: it is " + product + ", not " +
                          product + " * " + format_number(s) + " (" + equation + ")";
    missing.detail = {{"scale_factor_fits", 1.0 / s}, {"mistake", "missing"}};
    missing.variant[id] = gold / s;
    Hypothesis twice;
    twice.code = code;
    twice.explanation = name + " has the softmax scale applied twice: it is " + product + " * " +
                        format_number(s) + "^2 (" + equation + " has one factor)";
    twice.detail = {{"scale_factor_fits", s}, {"mistake", "applied twice"}};
    twice.variant[id] = gold * s;
    out.push_back(std::move(missing));
    out.push_back(std::move(twice));
  };
  if (ctx.failed_any({TensorId::dQ})) add(TensorId::dQ, "dq_scale", ctx.gold.at(TensorId::dQ));
  if (ctx.failed_any({TensorId::dK})) add(TensorId::dK, "dk_scale", ctx.gold.at(TensorId::dK));
  return out;
}

std::vector<Hypothesis> d_vector_hypotheses(const Context& ctx) {
  if (!ctx.needs_backward() || !ctx.failed_any({TensorId::dQ, TensorId::dK})) return {};
  const Problem& p = ctx.problem;
  const BackwardParams params = backward_params(ctx, p);
  // The true D = rowsum(dO * O) from the gold O.
  xt::xtensor<double, 3> D = xt::zeros<double>({n(p.B), n(p.H), n(p.S_q)});
  for (std::int64_t b = 0; b < p.B; ++b)
    for (std::int64_t h = 0; h < p.H; ++h)
      for (std::int64_t s = 0; s < p.S_q; ++s)
        for (std::int64_t i = 0; i < p.d; ++i)
          D(n(b), n(h), n(s)) += ctx.dO.load(b, s, h, i) * ctx.forward.O(n(b), n(h), n(s), n(i));

  // eq. (17) is affine in D: dQ_i(D + e) = dQ_i(D) - e_i * scale * (P K)_i. When the candidate's
  // dQ is known, the error e_i of each row is fitted by least squares along that direction;
  // otherwise the common mistake e = -D (D missing) is tested.
  xt::xtensor<double, 3> error = -D;
  const bool fit = ctx.candidate.has(TensorId::dQ) && p.d >= kMinHeadDimForFittedD;
  if (fit) {
    const xt::xarray<double>& cand = ctx.candidate.at(TensorId::dQ);
    const reference::GoldBackward at_D = reference::gold_backward_with_D(params, D);
    const reference::GoldBackward at_D1 = reference::gold_backward_with_D(params, D + 1.0);
    for (std::int64_t b = 0; b < p.B; ++b)
      for (std::int64_t h = 0; h < p.H; ++h)
        for (std::int64_t s = 0; s < p.S_q; ++s) {
          double dot = 0.0, norm = 0.0;
          for (std::int64_t i = 0; i < p.d; ++i) {
            const std::size_t bi = n(b), hi = n(h), si = n(s), ii = n(i);
            const double direction = at_D1.dQ(bi, hi, si, ii) - at_D.dQ(bi, hi, si, ii);
            const double residual = cand(bi, hi, si, ii) - at_D.dQ(bi, hi, si, ii);
            if (std::isfinite(residual)) dot += direction * residual;
            norm += direction * direction;
          }
          error(n(b), n(h), n(s)) = norm > 0.0 ? dot / norm : 0.0;
        }
  }
  const xt::xtensor<double, 3> D_used = D + error;
  const reference::GoldBackward variant = reference::gold_backward_with_D(params, D_used);

  const double D_norm = std::sqrt(xt::sum(D * D)());
  const double used_norm = std::sqrt(xt::sum(D_used * D_used)());
  const bool zero = used_norm <= 0.05 * D_norm;
  Hypothesis h;
  h.code = "d_vector";
  h.explanation =
      zero ? "dS used D = 0: Algorithm 2 line 2, D = rowsum(dO * O), is missing"
           : "dS used a wrong D (Algorithm 2 line 2: D = rowsum(dO * O)); the fitted D differs "
             "from the true one by up to " +
                 format_number(xt::amax(xt::abs(error))()) + " per row";
  h.detail = {{"D_used_is_zero", zero},
              {"max_abs_D_error", xt::amax(xt::abs(error))()},
              {"D_fitted_per_row", fit}};
  h.variant[TensorId::dQ] = variant.dQ;
  h.variant[TensorId::dK] = variant.dK;
  return {std::move(h)};
}

std::vector<Hypothesis> d_per_key_tile_hypotheses(const Context& ctx) {
  // D_i = rowsum(P_i * dP_i) summed over each key tile of B_k alone instead of the whole row:
  // a D per (row, key tile), which the fit above (one D per row) cannot express. Recomputed in
  // double from the inputs and the gold L, for each tile size that leaves more than one tile.
  if (!ctx.needs_backward() || !ctx.failed_any({TensorId::dQ, TensorId::dK})) return {};
  const Problem& p = ctx.problem;
  const xt::xtensor<double, 3>& L = ctx.forward.L;
  std::vector<Hypothesis> out;
  std::vector<double> P(n(p.S_k)), dP(n(p.S_k));
  for (std::int64_t T : {16, 32, 64, 128}) {
    if (p.S_k <= T) continue;
    xt::xarray<double> dQ = xt::zeros<double>({n(p.B), n(p.H), n(p.S_q), n(p.d)});
    xt::xarray<double> dK = xt::zeros<double>({n(p.B), n(p.H_kv), n(p.S_k), n(p.d)});
    for (std::int64_t b = 0; b < p.B; ++b)
      for (std::int64_t h = 0; h < p.H; ++h) {
        const std::int64_t hk = h / p.group_size();
        for (std::int64_t i = 0; i < p.S_q; ++i) {
          const std::int64_t last = std::min(p.last_visible_key(i), p.S_k - 1);
          if (last < 0) continue;
          const double L_i = L(n(b), n(h), n(i));
          for (std::int64_t j = 0; j <= last; ++j) {
            double s = 0.0, dp = 0.0;
            for (std::int64_t c = 0; c < p.d; ++c) {
              s += static_cast<double>(ctx.q.load(b, i, h, c)) * ctx.k.load(b, j, hk, c);
              dp += static_cast<double>(ctx.dO.load(b, i, h, c)) * ctx.v.load(b, j, hk, c);
            }
            P[n(j)] = std::exp(p.scale * s - L_i);
            dP[n(j)] = dp;
          }
          for (std::int64_t j0 = 0; j0 <= last; j0 += T) {
            const std::int64_t j1 = std::min(last + 1, j0 + T);
            double D_tile = 0.0;
            for (std::int64_t j = j0; j < j1; ++j) D_tile += P[n(j)] * dP[n(j)];
            for (std::int64_t j = j0; j < j1; ++j) {
              const double dS = p.scale * P[n(j)] * (dP[n(j)] - D_tile);
              for (std::int64_t c = 0; c < p.d; ++c) {
                dQ(n(b), n(h), n(i), n(c)) += dS * ctx.k.load(b, j, hk, c);
                dK(n(b), n(hk), n(j), n(c)) += dS * ctx.q.load(b, i, h, c);
              }
            }
          }
        }
      }
    Hypothesis h;
    h.code = "d_vector";
    h.explanation = "dS used D = rowsum(P * dP) over each key tile of B_k = " + std::to_string(T) +
                    " alone, not over the whole row: D_i = rowsum(dO_i * O_i) (Algorithm 2 line "
                    "2) sums every key; compute it once per row before the key loop";
    h.detail = {{"D_used_is_zero", false}, {"mistake", "per key tile"}, {"tile_k_fits", T}};
    h.variant[TensorId::dQ] = std::move(dQ);
    h.variant[TensorId::dK] = std::move(dK);
    out.push_back(std::move(h));
  }
  return out;
}

std::vector<Hypothesis> gqa_hypotheses(const Context& ctx) {
  const Problem& p = ctx.problem;
  if (!ctx.needs_backward() || p.H_kv == p.H || !ctx.failed_any({TensorId::dK, TensorId::dV})) {
    return {};
  }
  // Give every query head its own copy of its key/value head: the backward of that problem
  // holds each query head's own contribution to dK and dV, before the sum over the group.
  Problem expanded = p;
  expanded.H_kv = p.H;
  const std::int64_t g = p.group_size();
  HostTensor k(p.dtype, Layout::bhsd, p.B, p.H, p.S_k, p.d);
  HostTensor v(p.dtype, Layout::bhsd, p.B, p.H, p.S_k, p.d);
  for (std::int64_t b = 0; b < p.B; ++b)
    for (std::int64_t h = 0; h < p.H; ++h)
      for (std::int64_t s = 0; s < p.S_k; ++s)
        for (std::int64_t i = 0; i < p.d; ++i) {
          k.set(b, h, s, i, ctx.k.load(b, s, h / g, i));
          v.set(b, h, s, i, ctx.v.load(b, s, h / g, i));
        }
  BackwardParams params = backward_params(ctx, expanded);
  params.k = k.view();
  params.v = v.view();
  const reference::GoldBackward per_head = reference::gold_backward(params);

  std::vector<Hypothesis> out;
  auto add = [&](const std::string& which, const std::string& explanation, auto&& combine) {
    Hypothesis h;
    h.code = "gqa_reduction";
    h.explanation = explanation;
    h.detail = {{"group_size", g}, {"mistake", which}};
    for (TensorId id : {TensorId::dK, TensorId::dV}) {
      const auto& full = id == TensorId::dK ? per_head.dK : per_head.dV;
      xt::xarray<double> t = xt::zeros<double>({n(p.B), n(p.H_kv), n(p.S_k), n(p.d)});
      for (std::int64_t hk = 0; hk < p.H_kv; ++hk) {
        auto heads =
            xt::view(full, xt::all(), xt::range(n(hk * g), n((hk + 1) * g)), xt::all(), xt::all());
        xt::view(t, xt::all(), n(hk), xt::all(), xt::all()) = combine(heads);
      }
      h.variant[id] = std::move(t);
    }
    out.push_back(std::move(h));
  };
  const std::string group = " of its group of " + std::to_string(g) + " query heads";
  add("first head only",
      "dK and dV of each key/value head hold only the first query head" + group +
          " instead of the sum over the group",
      [](const auto& heads) {
        return xt::eval(xt::view(heads, xt::all(), 0, xt::all(), xt::all()));
      });
  add("last head only",
      "dK and dV of each key/value head hold only the last query head" + group +
          " (each head overwrote the previous one instead of adding to it)",
      [g](const auto& heads) {
        return xt::eval(xt::view(heads, xt::all(), g - 1, xt::all(), xt::all()));
      });
  add("mean over the group",
      "dK and dV of each key/value head are the mean over the query heads" + group +
          " instead of the sum",
      [g](const auto& heads) { return xt::eval(xt::sum(heads, {1}) / static_cast<double>(g)); });
  return out;
}

}  // namespace flashref::verify::diagnosis

// The padded-key hypothesis (key_padding_unmasked): a kernel that loads the last key tile with
// zero padding (Triton's tl.load(..., mask=..., other=0.0)) and never masks the padded keys.
// Each padded key then scores exactly 0 and takes softmax weight exp(0 - m_i), with V = 0: it
// adds to l but not to O's numerator. That is attention over K and V padded with zero rows up
// to a multiple of B_k, under the same mask evaluated on the padded key indices, so the gold
// recomputes it on padded copies of K and V. B_k is fitted the way tail_rows fits T.
//
// The mask decides whether it can show: with no mask every query sees the padded keys; with
// top-left causal masking key j is visible to query q when j <= q, so only queries q >= S_k
// (S_q > S_k) see them; bottom-right causal masking hides every key j > q + S_k - S_q >= S_k,
// so it never shows.
#include <xtensor/xview.hpp>

#include "internal.hpp"

namespace flashref::verify::diagnosis {
namespace {

constexpr std::int64_t kTileSizes[] = {16, 32, 64, 128};

// `v` copied into a zero-filled (B, H, rows, d) tensor of its dtype: the padded rows are zero.
HostTensor padded(const TensorView& v, std::int64_t rows) {
  HostTensor t(v.dtype, Layout::bshd, v.batch, v.heads, rows, v.dim);
  for (std::int64_t b = 0; b < v.batch; ++b)
    for (std::int64_t h = 0; h < v.heads; ++h)
      for (std::int64_t s = 0; s < v.seq; ++s)
        for (std::int64_t i = 0; i < v.dim; ++i) t.set(b, h, s, i, v.load(b, s, h, i));
  return t;
}

}  // namespace

std::vector<Hypothesis> key_padding_hypotheses(const Context& ctx) {
  const Problem& p = ctx.problem;
  if (p.mask == Mask::causal_bottom_right) return {};  // the padded keys are never visible
  if (p.mask == Mask::causal_top_left && p.S_q <= p.S_k) return {};
  if (!(ctx.needs_forward() || ctx.needs_backward())) return {};
  std::vector<Hypothesis> out;
  std::int64_t tried = -1;
  for (std::int64_t T : kTileSizes) {
    if (p.S_k % T == 0) continue;
    const std::int64_t rows = (p.S_k + T - 1) / T * T;
    if (rows == tried) continue;  // the same padding as a smaller tile size
    tried = rows;
    const HostTensor k = padded(ctx.k, rows);
    const HostTensor v = padded(ctx.v, rows);
    Problem changed = p;
    changed.S_k = rows;
    Hypothesis h;
    h.code = "key_padding_unmasked";
    h.explanation =
        "O and L fit attention over K and V padded with zero rows up to a multiple of B_k = " +
        std::to_string(T) + " (S_k = " + std::to_string(p.S_k) + " -> " + std::to_string(rows) +
        "): the last key tile is loaded with zero padding and the padded keys are not masked, "
        "so each scores 0 and takes softmax weight; mask the scores of keys >= S_k to -inf";
    h.detail = {{"tile_k_fits", T}, {"padded_keys", rows - p.S_k}};
    const std::size_t keys = static_cast<std::size_t>(p.S_k);
    if (ctx.needs_forward()) {
      ForwardParams f = forward_params(ctx, changed);
      f.k = k.view();
      f.v = v.view();
      reference::GoldForward g = reference::gold_forward(f);
      h.variant[TensorId::O] = std::move(g.O);
      h.variant[TensorId::L] = std::move(g.L);
    }
    if (ctx.needs_backward()) {
      BackwardParams b = backward_params(ctx, changed);
      b.k = k.view();
      b.v = v.view();
      reference::GoldBackward g = reference::gold_backward(b);
      h.variant[TensorId::dQ] = std::move(g.dQ);
      h.variant[TensorId::dK] =
          xt::view(g.dK, xt::all(), xt::all(), xt::range(std::size_t{0}, keys), xt::all());
      h.variant[TensorId::dV] =
          xt::view(g.dV, xt::all(), xt::all(), xt::range(std::size_t{0}, keys), xt::all());
    }
    out.push_back(std::move(h));
  }
  return out;
}

}  // namespace flashref::verify::diagnosis

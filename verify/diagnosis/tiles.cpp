// The diagonal-tile hypothesis: a causal kernel that skips the tiles above the diagonal and
// runs the tiles below it without index comparisons, but forgets the comparison in the tiles
// that cross the diagonal too. Each query row of tile i then sees every key of every key tile
// that is not skipped for tile i: a prefix of the keys, unmasked. That is attention without a
// mask on (rows of tile i) x (that prefix), so it is recomputed by the gold on those slices.
#include <algorithm>

#include <xtensor/xview.hpp>

#include "internal.hpp"

namespace flashref::verify::diagnosis {
namespace {

constexpr std::int64_t kTileSizes[] = {16, 32, 64, 128};

std::size_t n(std::int64_t x) {
  return static_cast<std::size_t>(x);
}

// Rows [begin, begin + count) of a (batch, seq, head, dim) view.
TensorView rows_of(TensorView v, std::int64_t begin, std::int64_t count) {
  if (v.data == nullptr) return v;
  v.data = static_cast<char*>(v.data) +
           begin * v.seq_stride * static_cast<std::int64_t>(dtype_size(v.dtype));
  v.seq = count;
  return v;
}

// The tensors of a causal problem whose diagonal tiles of size T x T ignore the mask.
TensorSet diagonal_unmasked(const Context& ctx, std::int64_t T) {
  const Problem& p = ctx.problem;
  const bool forward = ctx.needs_forward(), backward = ctx.needs_backward();
  xt::xarray<double> O = xt::zeros<double>({n(p.B), n(p.H), n(p.S_q), n(p.d)});
  xt::xarray<double> L = xt::zeros<double>({n(p.B), n(p.H), n(p.S_q)});
  xt::xarray<double> dQ = xt::zeros<double>({n(p.B), n(p.H), n(p.S_q), n(p.d)});
  xt::xarray<double> dK = xt::zeros<double>({n(p.B), n(p.H_kv), n(p.S_k), n(p.d)});
  xt::xarray<double> dV = dK;
  for (std::int64_t row_begin = 0; row_begin < p.S_q; row_begin += T) {
    const std::int64_t rows = std::min(T, p.S_q - row_begin);
    // xt::view keeps its slices by value; a fresh range per view.
    const auto r = [&] { return xt::range(n(row_begin), n(row_begin + rows)); };
    // Key tiles starting after the last key visible to the tile's last row are skipped.
    const std::int64_t last = p.last_visible_key(row_begin + rows - 1);
    const std::int64_t keys = last < 0 ? 0 : std::min(p.S_k, (last / T + 1) * T);
    if (keys == 0) {
      // Every key tile skipped: the rows see nothing (O = 0, L = -inf, no gradient).
      xt::view(L, xt::all(), xt::all(), r()) = -std::numeric_limits<double>::infinity();
      continue;
    }
    Problem tile = p;
    tile.S_q = rows;
    tile.S_k = keys;
    tile.mask = Mask::none;
    if (forward) {
      ForwardParams f = forward_params(ctx, tile);
      f.q = rows_of(f.q, row_begin, rows);
      f.k = rows_of(f.k, 0, keys);
      f.v = rows_of(f.v, 0, keys);
      const reference::GoldForward g = reference::gold_forward(f);
      xt::view(O, xt::all(), xt::all(), r(), xt::all()) = g.O;
      xt::view(L, xt::all(), xt::all(), r()) = g.L;
    }
    if (backward) {
      BackwardParams b = backward_params(ctx, tile);
      b.q = rows_of(b.q, row_begin, rows);
      b.dO = rows_of(b.dO, row_begin, rows);
      b.k = rows_of(b.k, 0, keys);
      b.v = rows_of(b.v, 0, keys);
      const reference::GoldBackward g = reference::gold_backward(b);
      const auto k = [&] { return xt::range(std::size_t{0}, n(keys)); };
      xt::view(dQ, xt::all(), xt::all(), r(), xt::all()) = g.dQ;
      xt::view(dK, xt::all(), xt::all(), k(), xt::all()) += g.dK;
      xt::view(dV, xt::all(), xt::all(), k(), xt::all()) += g.dV;
    }
  }
  TensorSet t;
  if (forward) {
    t[TensorId::O] = std::move(O);
    t[TensorId::L] = std::move(L);
  }
  if (backward) {
    t[TensorId::dQ] = std::move(dQ);
    t[TensorId::dK] = std::move(dK);
    t[TensorId::dV] = std::move(dV);
  }
  return t;
}

}  // namespace

std::vector<Hypothesis> diagonal_hypotheses(const Context& ctx) {
  const Problem& p = ctx.problem;
  if (!p.is_causal() || !(ctx.needs_forward() || ctx.needs_backward())) return {};
  std::vector<Hypothesis> out;
  for (std::int64_t T : kTileSizes) {
    // One tile in each direction is the whole matrix: that is mask_ignored.
    if (T >= p.S_q && T >= p.S_k) break;
    Hypothesis h;
    h.code = "diagonal_tiles";
    h.explanation = "errors come from the tiles that cross the causal diagonal, tile size " +
                    std::to_string(T) + " x " + std::to_string(T) +
                    ": those tiles ran without the index comparison, as if fully visible";
    h.detail = {{"tile_size", T}};
    h.variant = diagonal_unmasked(ctx, T);
    out.push_back(std::move(h));
  }
  return out;
}

}  // namespace flashref::verify::diagnosis

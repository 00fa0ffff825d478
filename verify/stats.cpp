#include "flashref/verify/stats.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>

#include "flashref/error.hpp"

namespace flashref::verify {
namespace {

template <typename Shape>
std::string shape_str(const Shape& s) {
  std::ostringstream o;
  o << "(";
  for (std::size_t i = 0; i < s.size(); ++i) o << (i ? ", " : "") << s[i];
  o << ")";
  return o.str();
}

// Both tensors are viewed as flat (B, H, S, D) row-major buffers; D = 1 for L.
ErrorStats stats_flat(const double* c, const double* g, std::int64_t B, std::int64_t H,
                      std::int64_t S, std::int64_t D, SeqAxis axis, std::int64_t tile_size) {
  if (tile_size < 1) {
    throw InvalidArgument("tile_size", "must be >= 1, got " + std::to_string(tile_size));
  }
  const std::int64_t n = B * H * S * D;
  ErrorStats st;
  st.count = n;
  st.axis = axis;
  st.tile_size = tile_size;
  for (std::int64_t e = 0; e < n; ++e) {
    if (std::isfinite(g[e])) st.max_abs_gold = std::max(st.max_abs_gold, std::fabs(g[e]));
  }
  const double rel_floor = std::max(kRelFloorFraction * st.max_abs_gold, 0x1p-1022);

  double sum_abs = 0.0, sum_err2 = 0.0, sum_gold2 = 0.0;
  std::int64_t worst_finite = -1, first_nonfinite = -1;
  for (std::int64_t e = 0; e < n; ++e) {
    const double ce = c[e], ge = g[e];
    const bool c_finite = std::isfinite(ce), g_finite = std::isfinite(ge);
    if (c_finite && g_finite) {
      const double err = std::fabs(ce - ge);
      ++st.finite_pairs;
      sum_abs += err;
      sum_err2 += err * err;
      sum_gold2 += ge * ge;
      st.max_rel = std::max(st.max_rel, err / std::max(std::fabs(ge), rel_floor));
      if (worst_finite < 0 || err > st.max_abs) {
        st.max_abs = err;
        worst_finite = e;
      }
      continue;
    }
    // Non-finite on at least one side: only an identical value matches (-inf for -inf).
    const bool same = (std::isnan(ce) && std::isnan(ge)) || ce == ge;
    if (same) continue;
    if (std::isnan(ce))
      ++st.nan;
    else if (ce == INFINITY)
      ++st.pos_inf;
    else if (ce == -INFINITY)
      ++st.neg_inf;
    else
      ++st.missed_gold_nonfinite;
    if (first_nonfinite < 0) first_nonfinite = e;
  }
  if (st.finite_pairs > 0) st.mean_abs = sum_abs / static_cast<double>(st.finite_pairs);
  if (sum_gold2 > 0.0)
    st.rel_l2 = std::sqrt(sum_err2 / sum_gold2);
  else
    st.rel_l2 = sum_err2 > 0.0 ? INFINITY : 0.0;

  const std::int64_t worst = first_nonfinite >= 0 ? first_nonfinite : worst_finite;
  if (worst >= 0) {
    st.worst.i = worst % D;
    st.worst.s = (worst / D) % S;
    st.worst.h = (worst / (D * S)) % H;
    st.worst.b = worst / (D * S * H);
    st.worst_candidate = c[worst];
    st.worst_gold = g[worst];
    st.worst_tile = st.worst.s / tile_size;
  }
  return st;
}

template <typename Shape>
void require_same_shape(const Shape& candidate, const Shape& gold) {
  if (candidate != gold) {
    throw InvalidArgument("candidate", "shape " + shape_str(candidate) +
                                           " differs from the gold's " + shape_str(gold));
  }
}

std::int64_t extent(std::size_t x) {
  return static_cast<std::int64_t>(x);
}

}  // namespace

ErrorStats compute_stats(const xt::xtensor<double, 4>& candidate,
                         const xt::xtensor<double, 4>& gold, SeqAxis axis, std::int64_t tile_size) {
  require_same_shape(candidate.shape(), gold.shape());
  const auto& s = gold.shape();
  return stats_flat(candidate.data(), gold.data(), extent(s[0]), extent(s[1]), extent(s[2]),
                    extent(s[3]), axis, tile_size);
}

ErrorStats compute_stats(const xt::xtensor<double, 3>& candidate,
                         const xt::xtensor<double, 3>& gold, std::int64_t tile_size) {
  require_same_shape(candidate.shape(), gold.shape());
  const auto& s = gold.shape();
  return stats_flat(candidate.data(), gold.data(), extent(s[0]), extent(s[1]), extent(s[2]), 1,
                    SeqAxis::query, tile_size);
}

ErrorStats compute_stats(TensorId id, const xt::xarray<double>& candidate,
                         const xt::xarray<double>& gold, std::int64_t tile_size) {
  require_same_shape(candidate.shape(), gold.shape());
  const std::size_t rank = id == TensorId::L ? 3 : 4;
  if (gold.dimension() != rank) {
    throw InvalidArgument("candidate", std::string(tensor_name(id)) + " must have " +
                                           std::to_string(rank) + " dimensions, got shape " +
                                           shape_str(gold.shape()));
  }
  const auto& s = gold.shape();
  return stats_flat(candidate.data(), gold.data(), extent(s[0]), extent(s[1]), extent(s[2]),
                    rank == 4 ? extent(s[3]) : 1, seq_axis(id), tile_size);
}

}  // namespace flashref::verify

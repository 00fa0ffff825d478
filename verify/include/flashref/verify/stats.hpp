// Error statistics of one candidate tensor against the gold.
//
// Only elements where both values are finite enter the numeric statistics. Non-finite values
// are counted instead: a NaN or infinity where the gold has a finite value (or a different
// non-finite value), and a gold non-finite value (-inf in L for a fully masked row) that the
// candidate does not reproduce exactly. Either kind fails the rule.
#pragma once

#include <cstdint>

#include <xtensor/xarray.hpp>
#include <xtensor/xtensor.hpp>

#include "flashref/verify/tensor_id.hpp"

namespace flashref::verify {

// Relative errors divide by max(|gold|, kRelFloorFraction * max|gold|), so elements whose gold
// is near zero (cancellation in a gradient, a small O entry) cannot dominate max_rel.
inline constexpr double kRelFloorFraction = 1e-3;

struct Index4 {
  std::int64_t b = 0, h = 0, s = 0, i = 0;  // batch, head, row (query or key), column of d
};

struct ErrorStats {
  std::int64_t count = 0;         // elements compared (all of them, finite or not)
  std::int64_t finite_pairs = 0;  // elements where candidate and gold are both finite
  double max_abs = 0.0;           // max |candidate - gold| over finite pairs
  double mean_abs = 0.0;
  double max_rel = 0.0;       // max |c - g| / max(|g|, kRelFloorFraction * max_abs_gold)
  double rel_l2 = 0.0;        // ||c - g||_2 / ||g||_2 over finite pairs (0 if both norms are 0)
  double max_abs_gold = 0.0;  // max |gold| over finite gold elements: scales the rule's floor

  // The worst element: the first non-finite mismatch if there is one, else the largest error.
  Index4 worst;
  double worst_candidate = 0.0, worst_gold = 0.0;
  SeqAxis axis = SeqAxis::query;  // which sequence worst.s indexes
  std::int64_t tile_size = 0;     // B_q or B_k used to place worst.s in a tile
  std::int64_t worst_tile = 0;    // worst.s / tile_size

  std::int64_t nan = 0;                    // candidate NaN where the gold is not NaN
  std::int64_t pos_inf = 0;                // candidate +inf where the gold is not +inf
  std::int64_t neg_inf = 0;                // candidate -inf where the gold is not -inf
  std::int64_t missed_gold_nonfinite = 0;  // gold non-finite, candidate finite

  std::int64_t nonfinite_mismatches() const {
    return nan + pos_inf + neg_inf + missed_gold_nonfinite;
  }
};

// `tile_size` (>= 1) places the worst row in a tile along `axis`.
ErrorStats compute_stats(const xt::xtensor<double, 4>& candidate,
                         const xt::xtensor<double, 4>& gold, SeqAxis axis, std::int64_t tile_size);
// L: (B, H, S_q); worst.i is 0.
ErrorStats compute_stats(const xt::xtensor<double, 3>& candidate,
                         const xt::xtensor<double, 3>& gold, std::int64_t tile_size);
// Tensor `id` of a TensorSet (canonical layout): the 4-D or the 3-D statistics above, along
// seq_axis(id).
ErrorStats compute_stats(TensorId id, const xt::xarray<double>& candidate,
                         const xt::xarray<double>& gold, std::int64_t tile_size);

}  // namespace flashref::verify

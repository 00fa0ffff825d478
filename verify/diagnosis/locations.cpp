// Location patterns: where the wrong elements are, for failures no hypothesis explains.
#include <algorithm>
#include <cmath>

#include "internal.hpp"

namespace flashref::verify::diagnosis {
namespace {

constexpr std::int64_t kTileSizes[] = {16, 32, 64, 128};

// A tail pattern needs at least this share of the tail's rows wrong: one bad last row is more
// likely an off-by-one at the end than a broken tile.
constexpr double kMinTailCoverage = 0.5;

bool element_wrong(double c, double g, double limit) {
  if (c == g) return false;  // equal values, equal infinities included
  if (!std::isfinite(c) || !std::isfinite(g)) return true;
  return std::fabs(c - g) > limit;
}

}  // namespace

std::optional<Finding> nan_masked_rows(const TensorSet& candidate, const TensorSet& gold) {
  const xt::xarray<double>& L = gold.at(TensorId::L);
  Finding f;
  std::int64_t rows = 0;
  nlohmann::json example;
  for (const auto& [id, values] : candidate) {
    if (seq_axis(id) != SeqAxis::query) continue;
    std::int64_t bad_rows = 0;
    const auto& shape = values.shape();
    const std::size_t cols = values.dimension() == 4 ? shape[3] : 1;
    for (std::size_t b = 0; b < shape[0]; ++b)
      for (std::size_t h = 0; h < shape[1]; ++h)
        for (std::size_t s = 0; s < shape[2]; ++s) {
          if (L(b, h, s) != -std::numeric_limits<double>::infinity()) continue;
          bool bad = false;
          for (std::size_t i = 0; i < cols && !bad; ++i) {
            const double v = values.flat(((b * shape[1] + h) * shape[2] + s) * cols + i);
            // L = -inf is the right answer for a row that sees nothing.
            bad = id == TensorId::L
                      ? (std::isnan(v) || v == std::numeric_limits<double>::infinity())
                      : !std::isfinite(v);
          }
          if (!bad) continue;
          if (bad_rows == 0 && example.is_null()) example = {b, h, s};
          ++bad_rows;
        }
    if (bad_rows > 0) {
      f.tensors.push_back(id);
      rows = std::max(rows, bad_rows);
    }
  }
  if (f.tensors.empty()) return std::nullopt;
  f.code = "nan_masked_rows";
  f.explanation = "NaN or infinity in " + std::to_string(rows) +
                  " row(s), counted over batches and heads, that see no key (fully masked): they "
                  "must get O = 0, L = -inf and "
                  "zero gradients (guard the division by l = 0 and exp(-inf - -inf))";
  f.detail = {{"rows", rows}, {"first_row_bhs", example}};
  return f;
}

std::optional<Finding> tail_rows(TensorId id, const xt::xarray<double>& candidate,
                                 const xt::xarray<double>& gold, double limit) {
  const auto& shape = candidate.shape();
  const auto S = static_cast<std::int64_t>(shape[2]);
  const std::size_t cols = candidate.dimension() == 4 ? shape[3] : 1;
  std::vector<bool> wrong(static_cast<std::size_t>(S), false);
  for (std::size_t n = 0; n < candidate.size(); ++n) {
    const std::size_t s = (n / cols) % shape[2];
    if (!wrong[s] && element_wrong(candidate.flat(n), gold.flat(n), limit)) wrong[s] = true;
  }
  const auto first_wrong = std::find(wrong.begin(), wrong.end(), true);
  if (first_wrong == wrong.end()) return std::nullopt;
  const auto first = static_cast<std::int64_t>(first_wrong - wrong.begin());
  const auto count = static_cast<std::int64_t>(std::count(wrong.begin(), wrong.end(), true));

  // The smallest tail (last partial tile) holding every wrong row, over the tile sizes that
  // leave a partial tile; several sizes can share that tail.
  std::int64_t best_begin = -1;
  std::vector<std::int64_t> sizes;
  for (std::int64_t T : kTileSizes) {
    if (S <= T || S % T == 0) continue;
    const std::int64_t begin = S / T * T;
    if (first < begin) continue;
    if (static_cast<double>(count) < kMinTailCoverage * static_cast<double>(S - begin)) continue;
    if (begin > best_begin) {
      best_begin = begin;
      sizes.clear();
    }
    if (begin == best_begin) sizes.push_back(T);
  }
  if (sizes.empty()) return std::nullopt;

  const bool query = seq_axis(id) == SeqAxis::query;
  std::string tile_text = std::to_string(sizes.front());
  for (std::size_t n = 1; n < sizes.size(); ++n) tile_text += " or " + std::to_string(sizes[n]);
  Finding f;
  f.code = "tail_rows";
  f.tensors = {id};
  f.explanation =
      std::string("errors are confined to the last partial ") + (query ? "query" : "key") +
      " tile for tile size " + tile_text + ": rows " + std::to_string(best_begin) + ".." +
      std::to_string(S - 1) + " of " + (query ? "S_q" : "S_k") + " = " + std::to_string(S) + " (" +
      std::to_string(count) + " wrong); check the loop bounds and the row mask of the last tile";
  f.detail = {{"tile_sizes", sizes},
              {"axis", query ? "query" : "key"},
              {"rows_begin", best_begin},
              {"rows_end", S},
              {"wrong_rows", count}};
  return f;
}

}  // namespace flashref::verify::diagnosis

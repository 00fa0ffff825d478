// Location patterns: where the wrong elements are, for failures no hypothesis explains.
#include <algorithm>
#include <cmath>

#include <cstdio>
#include <limits>

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
                                 const xt::xarray<double>& gold, double limit,
                                 const HostTensor* v) {
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

  // Junk: a wrong finite element of O's tail outside the values its column of V holds.
  std::int64_t junk = 0;
  if (v != nullptr && !v->empty() && candidate.dimension() == 4) {
    // O(b, h, s, c) is a convex combination of V(b, h / group, :, c): within its range.
    const std::int64_t group = static_cast<std::int64_t>(shape[1]) / v->H();
    for (std::size_t b = 0; b < shape[0]; ++b)
      for (std::size_t h = 0; h < shape[1]; ++h)
        for (std::size_t c = 0; c < cols; ++c) {
          const auto bi = static_cast<std::int64_t>(b), hk = static_cast<std::int64_t>(h) / group;
          const auto ci = static_cast<std::int64_t>(c);
          double lo = std::numeric_limits<double>::infinity(), hi = -lo;
          for (std::int64_t j = 0; j < v->S(); ++j) {
            lo = std::min(lo, static_cast<double>(v->get(bi, hk, j, ci)));
            hi = std::max(hi, static_cast<double>(v->get(bi, hk, j, ci)));
          }
          const double slack = 1e-3 * std::max(std::fabs(lo), std::fabs(hi));
          for (std::int64_t s = best_begin; s < S; ++s) {
            const double x = candidate(b, h, static_cast<std::size_t>(s), c);
            if (!std::isfinite(x) ||
                !element_wrong(x, gold(b, h, static_cast<std::size_t>(s), c), limit))
              continue;
            if (x < lo - slack || x > hi + slack) ++junk;
          }
        }
  }
  const bool garbage = junk > 0;

  const bool query = seq_axis(id) == SeqAxis::query;
  std::string tile_text = std::to_string(sizes.front());
  for (std::size_t n = 1; n < sizes.size(); ++n) tile_text += " or " + std::to_string(sizes[n]);
  Finding f;
  f.code = garbage ? "tail_garbage" : "tail_rows";
  f.tensors = {id};
  f.explanation =
      std::string("errors are confined to the last partial ") + (query ? "query" : "key") +
      " tile for tile size " + tile_text + ": rows " + std::to_string(best_begin) + ".." +
      std::to_string(S - 1) + " of " + (query ? "S_q" : "S_k") + " = " + std::to_string(S) + " (" +
      std::to_string(count) + " wrong); " +
      (garbage ? "they hold junk (values outside any attention of V), as reads past the end "
                 "without bounds checks give: mask the loads and stores of the last tile"
               : "check the loop bounds and the row mask of the last tile");
  f.detail = {{"tile_sizes", sizes},      {"axis", query ? "query" : "key"},
              {"rows_begin", best_begin}, {"rows_end", S},
              {"wrong_rows", count},      {"junk_elements", junk}};
  return f;
}

std::optional<Finding> masked_rows_not_zero(const ProblemData& data, const TensorSet& candidate,
                                            const TensorSet& gold) {
  const xt::xarray<double>& gL = gold.at(TensorId::L);
  const Problem& p = data.problem;
  const auto shape = gL.shape();
  const double ninf = -std::numeric_limits<double>::infinity();
  std::int64_t o_rows = 0, mean_rows = 0, l_rows = 0;
  nlohmann::json example, l_example;
  const xt::xarray<double>* O = candidate.has(TensorId::O) ? &candidate.at(TensorId::O) : nullptr;
  const xt::xarray<double>* L = candidate.has(TensorId::L) ? &candidate.at(TensorId::L) : nullptr;
  const auto d = static_cast<std::size_t>(p.d);
  std::vector<double> mean(d);
  for (std::size_t b = 0; b < shape[0]; ++b)
    for (std::size_t h = 0; h < shape[1]; ++h) {
      bool have_mean = false;
      for (std::size_t s = 0; s < shape[2]; ++s) {
        if (gL(b, h, s) != ninf) continue;
        if (L != nullptr && std::isfinite((*L)(b, h, s))) {
          if (l_rows == 0) l_example = {{"row_bhs", {b, h, s}}, {"L", (*L)(b, h, s)}};
          ++l_rows;
        }
        if (O == nullptr) continue;
        bool finite = true, zero = true;
        for (std::size_t i = 0; i < d; ++i) {
          const double v = (*O)(b, h, s, i);
          finite = finite && std::isfinite(v);
          zero = zero && v == 0.0;
        }
        if (!finite || zero) continue;  // NaN rows are nan_masked_rows'
        if (!have_mean) {
          // Uniform attention over every key of the key/value head: the mean of V.
          const auto hk = static_cast<std::int64_t>(h) / p.group_size();
          for (std::size_t i = 0; i < d; ++i) {
            double sum = 0.0;
            for (std::int64_t j = 0; j < p.S_k; ++j)
              sum += data.v.get(static_cast<std::int64_t>(b), hk, j, static_cast<std::int64_t>(i));
            mean[i] = sum / static_cast<double>(p.S_k);
          }
          have_mean = true;
        }
        double dist = 0.0, scale = 0.0;
        for (std::size_t i = 0; i < d; ++i) {
          dist = std::max(dist, std::fabs((*O)(b, h, s, i) - mean[i]));
          scale = std::max(scale, std::fabs(mean[i]));
        }
        // Within 1% of the mean's largest component: the mean, computed in any precision.
        const bool is_mean = dist <= 1e-2 * scale + 1e-6;
        if (o_rows == 0) example = {b, h, s};
        ++o_rows;
        if (is_mean) ++mean_rows;
      }
    }
  if (o_rows == 0 && l_rows == 0) return std::nullopt;
  Finding f;
  f.code = "masked_rows_not_zero";
  if (o_rows > 0) f.tensors.push_back(TensorId::O);
  if (l_rows > 0) f.tensors.push_back(TensorId::L);
  std::string what;
  if (o_rows > 0) {
    what = std::to_string(o_rows) + " row(s) of O";
    what += mean_rows == o_rows ? " hold the mean of V (uniform attention over every key)"
            : mean_rows > 0     ? " hold the mean of V (" + std::to_string(mean_rows) +
                                  " of them) or other finite junk"
                            : " hold finite junk (neither 0 nor the mean of V)";
  }
  if (l_rows > 0) {
    what += std::string(what.empty() ? "" : "; ") + std::to_string(l_rows) +
            " row(s) of L are finite instead of -inf";
  }
  f.explanation = "rows that see no key (fully masked) must get O = 0 and L = -inf, but " + what +
                  ": a fully masked row's max is -inf and its l is 0; handle that case "
                  "(e.g. O = 0 where l == 0) instead of softmaxing the masked scores";
  f.detail = {{"o_rows", o_rows}, {"o_rows_mean_of_v", mean_rows}, {"l_rows_finite", l_rows}};
  if (!example.is_null()) f.detail["first_row_bhs"] = example;
  if (!l_example.is_null()) f.detail["first_finite_l"] = l_example;
  return f;
}

std::optional<Finding> max_init_zero(const Context& ctx, TensorId id, double limit) {
  if (id != TensorId::O && id != TensorId::L) return std::nullopt;
  if (!ctx.candidate.has(id)) return std::nullopt;
  // exp(x) in float32 is below the smallest normal at x < -87.3 (precision lost) and 0 at
  // x < -103.97: a running max started at 0 gives l = sum exp(S_ij) = 0 there, O = 0/0.
  constexpr double kUnderflow = -87.0;
  const xt::xarray<double>& cand = ctx.candidate.at(id);
  const xt::xarray<double>& gold = ctx.gold.at(id);
  const auto& m = ctx.forward.m;
  const auto& shape = cand.shape();
  const std::size_t cols = cand.dimension() == 4 ? shape[3] : 1;
  std::int64_t wrong_low = 0, wrong_other = 0, low_rows = 0;
  for (std::size_t r = 0; r < m.size(); ++r) {
    const double mr = m.flat(r);
    const bool low = std::isfinite(mr) && mr < kUnderflow;
    if (low) ++low_rows;
    bool wrong = false;
    for (std::size_t i = 0; i < cols && !wrong; ++i)
      wrong = element_wrong(cand.flat(r * cols + i), gold.flat(r * cols + i), limit);
    if (!wrong) continue;
    if (low)
      ++wrong_low;
    else
      ++wrong_other;
  }
  if (wrong_low == 0 || wrong_other > 0) return std::nullopt;
  if (static_cast<double>(wrong_low) < kMinTailCoverage * static_cast<double>(low_rows))
    return std::nullopt;
  Finding f;
  f.code = "max_init_zero";
  f.tensors = {id};
  f.explanation =
      "errors appear only in the " + std::to_string(wrong_low) +
      " row(s) whose scores are all "
      "below " +
      format_number(kUnderflow) + " (of " + std::to_string(low_rows) +
      " such rows), where exp(S - 0) underflows in float32: the running max m starts at 0 "
      "instead of -inf (Algorithm 1 line 2: m = -inf)";
  f.detail = {
      {"wrong_rows", wrong_low}, {"rows_all_scores_below", kUnderflow}, {"rows_below", low_rows}};
  return f;
}

Lead locate_errors(TensorId id, const Problem& p, const xt::xarray<double>& candidate,
                   const xt::xarray<double>& gold, double limit, std::int64_t tile) {
  const auto& shape = candidate.shape();
  const auto S = static_cast<std::int64_t>(shape[2]);
  const std::size_t cols = candidate.dimension() == 4 ? shape[3] : 1;
  std::vector<std::int64_t> per_row(static_cast<std::size_t>(S), 0), per_col(cols, 0);
  std::int64_t wrong = 0, nonfinite = 0;
  for (std::size_t n = 0; n < candidate.size(); ++n) {
    if (!element_wrong(candidate.flat(n), gold.flat(n), limit)) continue;
    ++wrong;
    if (!std::isfinite(candidate.flat(n))) ++nonfinite;
    ++per_row[(n / cols) % shape[2]];
    ++per_col[n % cols];
  }
  const auto total = static_cast<std::int64_t>(candidate.size());
  const auto rows_wrong =
      std::count_if(per_row.begin(), per_row.end(), [](auto c) { return c > 0; });
  const auto cols_wrong =
      std::count_if(per_col.begin(), per_col.end(), [](auto c) { return c > 0; });
  const bool query = seq_axis(id) == SeqAxis::query;
  const std::string axis = query ? "query" : "key";
  Lead lead;
  lead.tensor = id;
  std::int64_t first = -1, last = -1;
  for (std::int64_t s = 0; s < S; ++s) {
    if (per_row[static_cast<std::size_t>(s)] == 0) continue;
    if (first < 0) first = s;
    last = s;
  }
  // Tiles of `tile` rows holding wrong rows.
  std::vector<std::int64_t> tiles;
  for (std::int64_t s = 0; s < S && tile > 0; ++s) {
    if (per_row[static_cast<std::size_t>(s)] == 0) continue;
    if (tiles.empty() || tiles.back() != s / tile) tiles.push_back(s / tile);
  }
  const double share = total > 0 ? static_cast<double>(wrong) / static_cast<double>(total) : 0.0;
  char pct[32];
  std::snprintf(pct, sizeof pct, "%.3g%%", 100.0 * share);
  std::string where;
  std::string pattern;
  if (wrong <= std::max<std::int64_t>(4, total / 1000)) {
    pattern = "few";
    where = "a few isolated elements (" + std::to_string(wrong) + " of " + std::to_string(total) +
            "), as races and uninitialized reads give";
  } else if (share >= 0.5) {
    pattern = "uniform";
    where = std::string(pct) + " of elements wrong, spread over every " + axis +
            " row: uniform, as a precision problem gives (TF32, a low-precision accumulator or "
            "store)";
  } else {
    pattern = "rows";
    where = std::string(pct) + " of elements wrong, in " + std::to_string(rows_wrong) + " of " +
            std::to_string(S) + " " + axis + " rows (" + std::to_string(first) + ".." +
            std::to_string(last) + ")";
    if (tile > 0 && !tiles.empty()) {
      const std::int64_t tiles_total = (S + tile - 1) / tile;
      where += ", " + std::to_string(tiles.size()) + " of " + std::to_string(tiles_total) + " " +
               axis + " tiles of " + std::to_string(tile);
      if (tiles.size() == 1 && tiles.front() == tiles_total - 1 && S % tile != 0)
        where += " (only the last, partial tile: the tail)";
      else if (tiles.size() == 1 && tiles.front() == 0)
        where += " (only the first tile)";
    }
    if (cols > 1 && cols_wrong < static_cast<std::int64_t>(cols))
      where += "; only " + std::to_string(cols_wrong) + " of " + std::to_string(cols) + " columns";
  }
  if (nonfinite > 0) where += "; " + std::to_string(nonfinite) + " of them NaN or infinite";
  if (query && p.is_causal() && pattern == "rows") {
    // Rows that see fewer keys than one tile: the diagonal's first tile.
    std::int64_t near_diag = 0;
    for (std::int64_t s = 0; s < S; ++s) {
      if (per_row[static_cast<std::size_t>(s)] == 0) continue;
      const std::int64_t seen = p.last_visible_key(s) + 1;
      if (seen > 0 && seen < tile) ++near_diag;
    }
    if (near_diag == rows_wrong) where += "; all in rows that see fewer than one tile of keys";
  }
  lead.summary = where;
  lead.detail = {{"pattern", pattern},
                 {"wrong_elements", wrong},
                 {"elements", total},
                 {"wrong_rows", rows_wrong},
                 {"rows", S},
                 {"wrong_columns", cols_wrong},
                 {"nonfinite", nonfinite},
                 {"axis", axis},
                 {"tile", tile},
                 {"first_wrong_row", first},
                 {"last_wrong_row", last},
                 {"tiles_with_errors", tiles}};
  return lead;
}

}  // namespace flashref::verify::diagnosis

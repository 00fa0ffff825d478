#include "sampled_rows.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

namespace flashref::ring::sampled {

std::vector<std::int64_t> sample_rows(const Zigzag& z, int random, std::uint64_t seed) {
  std::vector<std::int64_t> rows;
  for (int c = 0; c < z.chunk_count(); ++c) {
    if (z.chunk_length(c) == 0) continue;
    rows.push_back(z.chunk_begin(c));
    rows.push_back(z.chunk_end(c) - 1);
  }
  const std::int64_t S = z.chunk_end(z.chunk_count() - 1);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::int64_t> any(0, S - 1);
  for (int i = 0; i < random; ++i) rows.push_back(any(rng));
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  return rows;
}

int owner_of(const Zigzag& z, std::int64_t s) {
  int c = 0;
  while (c + 1 < z.chunk_count() && z.chunk_end(c) <= s) ++c;
  return c < z.ranks() ? c : z.chunk_count() - 1 - c;
}

Comparison compare(const std::string& tensor, const std::vector<float>& ring,
                   const std::vector<float>& single, double bound, bool on_max_abs) {
  Comparison c;
  c.tensor = tensor;
  c.bound = bound;
  c.on_max_abs = on_max_abs;
  double diff2 = 0, norm2 = 0;
  for (std::size_t i = 0; i < single.size() && i < ring.size(); ++i) {
    const double x = ring[i], y = single[i];
    if (std::isinf(x) && std::isinf(y) && x < 0 && y < 0) continue;  // a fully masked row's L
    if (!std::isfinite(x) || !std::isfinite(y)) {
      c.finite = false;
      continue;
    }
    c.max_abs = std::max(c.max_abs, std::fabs(x - y));
    diff2 += (x - y) * (x - y);
    norm2 += y * y;
  }
  if (ring.size() != single.size()) c.finite = false;
  c.rel_norm = norm2 > 0 ? std::sqrt(diff2 / norm2) : (diff2 > 0 ? INFINITY : 0.0);
  return c;
}

std::string to_json(const Comparison& c) {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "{\"tensor\": \"%s\", \"max_abs\": %.3e, \"rel_norm\": %.3e, \"bound\": %.3e, "
                "\"bound_on\": \"%s\", \"passed\": %s}",
                c.tensor.c_str(), c.max_abs, c.rel_norm, c.bound,
                c.on_max_abs ? "max_abs" : "rel_norm", c.passed() ? "true" : "false");
  return buf;
}

}  // namespace flashref::ring::sampled

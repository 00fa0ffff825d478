// `flashref trace` on problems small enough to work out by hand: one-dimensional heads with
// chosen values, so every S, m, P~, l, rescale factor and O of Algorithm 1 (and D, P, dS, dQ,
// dK, dV of Algorithm 2) has a closed form written below and compared with what the tiled cpu
// backend reported through its trace hook.
#include <cmath>
#include <limits>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "flashref/error.hpp"
#include "flashref/verify/problem_data.hpp"
#include "trace_recorder.hpp"
#include "trace_render.hpp"

namespace {

using namespace flashref;
using namespace flashref::cli;
using verify::HostTensor;
using verify::Layout;
using verify::ProblemData;

constexpr double kInf = std::numeric_limits<double>::infinity();

HostTensor column(std::initializer_list<float> values) {
  HostTensor t(DType::f32, Layout::bhsd, 1, 1, static_cast<std::int64_t>(values.size()), 1);
  std::int64_t s = 0;
  for (float v : values) t.set(0, 0, s++, 0, v);
  return t;
}

// One batch, one head, d = 1 (so the default scale 1/sqrt(d) is 1): S_ij = q_i * k_j.
ProblemData one_dim(std::initializer_list<float> q, std::initializer_list<float> k,
                    std::initializer_list<float> v, std::initializer_list<float> dO, Mask mask) {
  ProblemData data;
  data.problem = make_problem(1, 1, 1, static_cast<std::int64_t>(q.size()),
                              static_cast<std::int64_t>(k.size()), 1, mask, DType::f32);
  data.q = column(q);
  data.k = column(k);
  data.v = column(v);
  data.dO = column(dO);
  return data;
}

// The first value entry named `symbol` for tiles (i, j) (-1: not a tile step).
const TraceEntry& entry(const Trace& t, const std::string& symbol, std::int64_t i, std::int64_t j) {
  for (const TraceEntry& e : t.entries) {
    if (e.kind == TraceEntry::Kind::value && e.symbol == symbol && e.i == i && e.j == j) return e;
  }
  throw std::runtime_error("no entry " + symbol + " at i=" + std::to_string(i) +
                           " j=" + std::to_string(j));
}

void expect_values(const TraceEntry& e, std::initializer_list<double> expected, int line) {
  SCOPED_TRACE(e.symbol + " (" + e.text + ")");
  EXPECT_EQ(e.line, line);
  ASSERT_EQ(e.values.data.size(), expected.size());
  std::size_t n = 0;
  for (double x : expected) {
    const double got = e.values.data[n++];
    if (std::isinf(x)) {
      EXPECT_EQ(got, x);
    } else {
      EXPECT_NEAR(got, x, 1e-6 * std::max(1.0, std::fabs(x)));
    }
  }
}

TEST(Trace, ForwardStepsMatchAHandComputation) {
  // Q = (1, 2), K = (0, 1), V = (1, 3), tiles of one row: row i meets key 0, then key 1.
  const ProblemData data = one_dim({1, 2}, {0, 1}, {1, 3}, {0, 0}, Mask::none);
  const Trace t = record_trace(data, {1, 1, false, false});
  EXPECT_EQ(t.T_q, 2);
  EXPECT_EQ(t.T_k, 2);
  for (std::int64_t i : {0, 1}) {
    SCOPED_TRACE("query tile " + std::to_string(i));
    const double q = i + 1.0;  // S_i0 = 0, S_i1 = q
    // Key tile 0: the first score sets m = 0; nothing to rescale yet (exp(-inf) = 0).
    expect_values(entry(t, "S", i, 0), {0.0}, 9);
    expect_values(entry(t, "m_old", i, 0), {-kInf}, 10);
    expect_values(entry(t, "m", i, 0), {0.0}, 10);
    expect_values(entry(t, "P~", i, 0), {1.0}, 11);
    expect_values(entry(t, "rescale", i, 0), {0.0}, 12);
    expect_values(entry(t, "l", i, 0), {1.0}, 12);
    expect_values(entry(t, "O", i, 0), {1.0}, 13);
    // Key tile 1: the score q is the new max; the old sum and O shrink by exp(0 - q).
    const double r = std::exp(-q);
    expect_values(entry(t, "S", i, 1), {q}, 9);
    expect_values(entry(t, "m_old", i, 1), {0.0}, 10);
    expect_values(entry(t, "m", i, 1), {q}, 10);
    expect_values(entry(t, "P~", i, 1), {1.0}, 11);
    expect_values(entry(t, "rescale", i, 1), {r}, 12);
    expect_values(entry(t, "l", i, 1), {r + 1.0}, 12);
    expect_values(entry(t, "O", i, 1), {r * 1.0 + 3.0}, 13);
    // Lines 15-16: O = (r + 3) / (r + 1), L = q + ln(1 + r).
    expect_values(entry(t, "O_i", i, -1), {(r + 3.0) / (r + 1.0)}, 15);
    expect_values(entry(t, "L_i", i, -1), {q + std::log1p(r)}, 16);
  }
  // The result equals the gold (naive attention in double) to float rounding.
  for (const auto& [name, error] : t.gold_error) EXPECT_LT(error, 1e-6) << name;

  // The printout shows the same numbers next to the algorithm's line numbers.
  std::ostringstream text;
  render_trace(text, t, TraceFormat::text);
  EXPECT_NE(text.str().find("Alg. 1 line 12: l = rescale * l + rowsum(P~) = [" +
                            format_trace_number(std::exp(-1.0) + 1.0) + "]"),
            std::string::npos)
      << text.str();
  EXPECT_NE(text.str().find("Alg. 1 line 16: L_i = m + ln(l)"), std::string::npos);
}

TEST(Trace, CausalTileKindsAndMaskedScores) {
  // Q = (1, 2, 3, 4), K = (0, 1, 0, 1), tiles of 2 x 2: the top-right tile lies above the
  // diagonal, the bottom-left below it, the two on the diagonal compare indices.
  const ProblemData data =
      one_dim({1, 2, 3, 4}, {0, 1, 0, 1}, {1, 3, 5, 7}, {0, 0, 0, 0}, Mask::causal_top_left);
  const Trace t = record_trace(data, {2, 2, false, false});
  using cpu::TileKind;
  ASSERT_EQ(t.grid.size(), 2u);
  EXPECT_EQ(t.grid[0][0], TileKind::diagonal);
  EXPECT_EQ(t.grid[0][1], TileKind::skipped);
  EXPECT_EQ(t.grid[1][0], TileKind::full);
  EXPECT_EQ(t.grid[1][1], TileKind::diagonal);
  // Diagonal tile (0, 0): query 0 may not see key 1.
  expect_values(entry(t, "S", 0, 0), {0.0, -kInf, 0.0, 2.0}, 9);
  expect_values(entry(t, "P~", 0, 0), {1.0, 0.0, std::exp(-2.0), 1.0}, 11);
  // Full tile (1, 0): no index comparison, every score is there.
  expect_values(entry(t, "S", 1, 0), {0.0, 3.0, 0.0, 4.0}, 9);
  // Query 0 sees key 0 only: O = v_0 = 1, L = S_00 = 0. Query 1 sees keys 0 and 1.
  expect_values(entry(t, "O_i", 0, -1), {1.0, (1.0 + 3.0 * std::exp(2.0)) / (1.0 + std::exp(2.0))},
                15);
  expect_values(entry(t, "L_i", 0, -1), {0.0, 2.0 + std::log1p(std::exp(-2.0))}, 16);
  bool skipped_reported = false;
  for (const TraceEntry& e : t.entries) {
    if (e.kind == TraceEntry::Kind::tile && e.i == 0 && e.j == 1) {
      skipped_reported = e.tile_kind == TileKind::skipped;
    }
  }
  EXPECT_TRUE(skipped_reported);
  std::ostringstream grid;
  render_grid(grid, t, TraceFormat::text);
  EXPECT_NE(grid.str().find("   0  \\.\n   1  #\\\n"), std::string::npos) << grid.str();
}

TEST(Trace, BackwardStepsMatchAHandComputation) {
  // One query (q = 1) over keys K = (0, 1), V = (1, 3), dO = 1.
  const ProblemData data = one_dim({1}, {0, 1}, {1, 3}, {1}, Mask::none);
  const Trace t = record_trace(data, {1, 1, true, false});
  const double e = std::exp(1.0);
  const double P0 = 1.0 / (1.0 + e), P1 = e / (1.0 + e);  // softmax of the scores (0, 1)
  const double O = P0 * 1.0 + P1 * 3.0;
  const double D = 1.0 * O;                                 // rowsum(dO * O)
  const double dS0 = P0 * (1.0 - D), dS1 = P1 * (3.0 - D);  // dP = dO V^T = (1, 3)
  expect_values(entry(t, "D", -1, -1), {D}, 2);
  expect_values(entry(t, "P", 0, 0), {P0}, 12);
  expect_values(entry(t, "dP", 0, 0), {1.0}, 14);
  expect_values(entry(t, "dS", 0, 0), {dS0}, 15);
  expect_values(entry(t, "P", 0, 1), {P1}, 12);
  expect_values(entry(t, "dS", 0, 1), {dS1}, 15);
  // dQ = scale * (dS_0 k_0 + dS_1 k_1) = dS_1 (k = (0, 1), scale 1).
  expect_values(entry(t, "dQ_acc", 0, 1), {dS1}, 16);
  expect_values(entry(t, "dQ_i", 0, -1), {dS1}, 16);
  // dK_j = dS_j q = dS_j; dV_j = P_j dO = P_j.
  expect_values(entry(t, "dK_j", -1, 0), {dS0}, 19);
  expect_values(entry(t, "dK_j", -1, 1), {dS1}, 19);
  expect_values(entry(t, "dV_j", -1, 0), {P0}, 19);
  expect_values(entry(t, "dV_j", -1, 1), {P1}, 19);
  for (const auto& [name, error] : t.gold_error) EXPECT_LT(error, 1e-6) << name;
}

TEST(Trace, MarkdownAndJsonCarryTheSameSteps) {
  const ProblemData data = one_dim({1, 2}, {0, 1}, {1, 3}, {0, 0}, Mask::causal_top_left);
  const Trace t = record_trace(data, {1, 1, false, false});
  std::ostringstream md;
  render_trace(md, t, TraceFormat::markdown);
  EXPECT_NE(md.str().find("#### query tile i = 1"), std::string::npos) << md.str();
  EXPECT_NE(md.str().find("```\nAlg. 1 line 5"), std::string::npos) << md.str();
  const nlohmann::json j = trace_json(t);
  EXPECT_EQ(j.at("grid"), nlohmann::json::parse(R"([["full","skipped"],["full","full"]])"));
  int lines_10 = 0;
  for (const auto& step : j.at("steps")) {
    if (step.value("line", 0) == 10) ++lines_10;
  }
  EXPECT_EQ(lines_10, 2 * 3);  // m_old and m for the three visited tiles
}

TEST(Trace, BadTilesAreRefused) {
  const ProblemData data = one_dim({1}, {0}, {1}, {0}, Mask::none);
  EXPECT_THROW(record_trace(data, {0, 4, false, false}), InvalidArgument);
}

}  // namespace

// Invariants of attention that the tiled algorithm must keep, each checked against a bound
// derived from float32 rounding (u = 2^-24) rather than a tuned tolerance.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "cpu_test_support.hpp"
#include "recording_observer.hpp"

namespace flashref::cputest {
namespace {

constexpr double u = 0x1p-24;  // float32 unit roundoff

const auto cpu_backend = [] { return flashref::cpu::make_backend(); };

std::int64_t visible_count(const Problem& p, std::int64_t q) {
  return std::clamp<std::int64_t>(p.last_visible_key(q) + 1, 0, p.S_k);
}

class PerMask : public ::testing::TestWithParam<Mask> {};

// Alg. 2 line 12's P = exp(S - L), summed over every key tile the dQ pass visits, is a
// probability distribution: 1 for a row that sees a key, 0 for one that sees none. The bound
// follows the rounding of l (n terms, T_k rescales), of log and of exp.
TEST_P(PerMask, RowsOfPSumToOne) {
  const Problem p = make_problem(1, 2, 1, 45, 38, 16, GetParam(), DType::f32);
  const Inputs in = make_inputs(p, 11);
  const auto cpu = cpu_backend();
  const ExecutionOptions opts = tiles(8, 16);
  const ForwardResult fwd = run_forward(*cpu, in, opts);
  RecordingObserver rec;
  run_backward(*flashref::cpu::make_backend({.trace = &rec}), in, fwd, opts);

  std::vector<double> sums(static_cast<std::size_t>(p.H * p.S_q), 0.0);
  for (const GradStepCopy& s : rec.dq_steps) {
    for (std::int64_t r = 0; r < s.P.rows; ++r)
      for (std::int64_t c = 0; c < s.P.cols; ++c)
        sums[static_cast<std::size_t>(s.tile.h * p.S_q + s.tile.row_begin + r)] += s.P(r, c);
  }
  const std::int64_t T_k = (p.S_k + 15) / 16;
  for (std::int64_t h = 0; h < p.H; ++h) {
    for (std::int64_t q = 0; q < p.S_q; ++q) {
      const double sum = sums[static_cast<std::size_t>(h * p.S_q + q)];
      const std::int64_t n = visible_count(p, q);
      if (n == 0) {
        EXPECT_EQ(sum, 0.0) << "row " << q << " sees no key";
        continue;
      }
      const double L = fwd.L(p, 0, h, q);
      const double bound = (2.0 * n + 2.0 * T_k + 16.0 + 4.0 * std::fabs(L)) * u;
      EXPECT_NEAR(sum, 1.0, bound) << "head " << h << " row " << q;
    }
  }
}

// Each O row is a convex combination of the V rows the query sees: per dimension it lies
// between their minimum and maximum, up to the rounding of an n-term weighted sum.
TEST_P(PerMask, ORowsLieInTheConvexHullOfVisibleV) {
  const Problem p = make_problem(2, 3, 3, 33, 47, 24, GetParam(), DType::f32);
  const Inputs in = make_inputs(p, 12, Layout::bhsd, 2.0f);
  const ForwardResult fwd = run_forward(*cpu_backend(), in, tiles(7, 9));
  for (std::int64_t b = 0; b < p.B; ++b)
    for (std::int64_t h = 0; h < p.H; ++h)
      for (std::int64_t q = 0; q < p.S_q; ++q) {
        const std::int64_t n = visible_count(p, q);
        for (std::int64_t c = 0; c < p.d; ++c) {
          if (n == 0) {
            EXPECT_EQ(fwd.o.at(b, q, h, c), 0.0f);
            continue;
          }
          double lo = INFINITY, hi = -INFINITY, big = 0;
          for (std::int64_t k = 0; k < n; ++k) {
            const double v = in.v.at(b, k, h, c);
            lo = std::min(lo, v), hi = std::max(hi, v), big = std::max(big, std::fabs(v));
          }
          const double tol = (n + 4.0) * u * big;
          const double o = fwd.o.at(b, q, h, c);
          EXPECT_GE(o, lo - tol) << "b " << b << " h " << h << " q " << q << " c " << c;
          EXPECT_LE(o, hi + tol) << "b " << b << " h " << h << " q " << q << " c " << c;
        }
      }
}

// L is the full log-sum-exp of the row's visible scores, log sum_j exp(S_ij) (not shifted by
// the max), computed here directly in double. The bound adds the float32 error of the scores
// (a d-term dot product, then the scale) to that of l, log and the final addition.
TEST_P(PerMask, LEqualsTheDirectLogSumExp) {
  const Problem p = make_problem(1, 2, 2, 29, 41, 20, GetParam(), DType::f32);
  const Inputs in = make_inputs(p, 13, Layout::bshd, 1.5f);
  const ExecutionOptions opts = tiles(6, 10);
  const ForwardResult fwd = run_forward(*cpu_backend(), in, opts);
  const std::int64_t T_k = (p.S_k + 9) / 10;
  for (std::int64_t h = 0; h < p.H; ++h)
    for (std::int64_t q = 0; q < p.S_q; ++q) {
      const std::int64_t n = visible_count(p, q);
      const float L = fwd.L(p, 0, h, q);
      if (n == 0) {
        EXPECT_EQ(L, -std::numeric_limits<float>::infinity());
        continue;
      }
      std::vector<double> S(static_cast<std::size_t>(n));
      double max_S = -INFINITY, score_err = 0;
      for (std::int64_t k = 0; k < n; ++k) {
        double dot = 0, abs_dot = 0;
        for (std::int64_t c = 0; c < p.d; ++c) {
          const double x = static_cast<double>(in.q.at(0, q, h, c)) * in.k.at(0, k, h, c);
          dot += x, abs_dot += std::fabs(x);
        }
        S[static_cast<std::size_t>(k)] = p.scale * dot;
        max_S = std::max(max_S, p.scale * dot);
        score_err =
            std::max(score_err, (p.d + 1.0) * u * p.scale * abs_dot + u * std::fabs(p.scale * dot));
      }
      double l = 0;
      for (double s : S) l += std::exp(s - max_S);
      const double direct = max_S + std::log(l);
      const double bound =
          2.0 * (score_err + (n + 2.0 * T_k + 4.0) * u + 2.0 * u * std::fabs(direct));
      EXPECT_NEAR(L, direct, bound) << "head " << h << " row " << q;
    }
}

// B_q = S_q, B_k = S_k is the one-tile case, the same computation as tiles larger than the
// sequences (bit for bit); many small tiles agree with it up to the rounding of the online
// rescaling (one exp and one product per key tile) and of the n-term sums.
TEST_P(PerMask, TilingDoesNotChangeTheResult) {
  for (DType t : {DType::f32, DType::bf16}) {
    const Problem p = make_problem(1, 2, 1, 37, 52, 16, GetParam(), t);
    const Inputs in = make_inputs(p, 14);
    const auto cpu = cpu_backend();
    const ForwardResult one = run_forward(*cpu, in, tiles(37, 52));
    const ForwardResult huge = run_forward(*cpu, in, tiles(1000, 999));
    EXPECT_EQ(one.o.bytes, huge.o.bytes);
    EXPECT_EQ(0, std::memcmp(one.lse.data(), huge.lse.data(), one.lse.size() * sizeof(float)));
    const BackwardResult g_one = run_backward(*cpu, in, one, tiles(37, 52));
    const BackwardResult g_huge = run_backward(*cpu, in, one, tiles(1000, 999));
    EXPECT_EQ(g_one.dq.bytes, g_huge.dq.bytes);
    EXPECT_EQ(g_one.dk.bytes, g_huge.dk.bytes);
    EXPECT_EQ(g_one.dv.bytes, g_huge.dv.bytes);

    if (t != DType::f32) continue;  // the bound below is float32's
    const ForwardResult many = run_forward(*cpu, in, tiles(5, 3));
    const double T_k = std::ceil(52.0 / 3.0);
    double max_V = 0;
    for (std::int64_t s = 0; s < p.S_k; ++s)
      for (std::int64_t c = 0; c < p.d; ++c)
        max_V = std::max(max_V, std::fabs(double(in.v.at(0, s, 0, c))));
    const double bound = (2.0 * p.S_k + 8.0 * T_k + 8.0) * u * max_V;
    for (std::int64_t h = 0; h < p.H; ++h)
      for (std::int64_t q = 0; q < p.S_q; ++q) {
        for (std::int64_t c = 0; c < p.d; ++c) {
          EXPECT_NEAR(many.o.at(0, q, h, c), one.o.at(0, q, h, c), bound);
        }
        const float L1 = one.L(p, 0, h, q), Ln = many.L(p, 0, h, q);
        if (std::isinf(L1)) {
          EXPECT_EQ(Ln, L1);
        } else {
          EXPECT_NEAR(Ln, L1, (p.S_k + 4.0 * T_k + 8.0) * u * (1.0 + std::fabs(L1)));
        }
      }
  }
}

INSTANTIATE_TEST_SUITE_P(Masks, PerMask,
                         ::testing::Values(Mask::none, Mask::causal_top_left,
                                           Mask::causal_bottom_right),
                         [](const auto& info) {
                           std::string n(mask_name(info.param));
                           for (char& c : n) c = c == '-' ? '_' : c;
                           return n;
                         });

// Every output element is written by one task in a fixed order: the results are the same
// bytes for any number of threads, forward and backward (GQA included, where dK/dV sum over
// the heads of a group).
TEST(Determinism, BitwiseIdenticalForAnyThreadCount) {
  for (DType t : {DType::f32, DType::bf16}) {
    const Problem p = make_problem(2, 4, 2, 100, 90, 32, Mask::causal_bottom_right, t);
    const Inputs in = make_inputs(p, 15);
    const auto cpu = cpu_backend();
    const ForwardResult f1 = run_forward(*cpu, in, tiles(16, 8, 1));
    const BackwardResult g1 = run_backward(*cpu, in, f1, tiles(16, 8, 1));
    for (int threads : {2, 3, 5}) {
      const ForwardResult fn = run_forward(*cpu, in, tiles(16, 8, threads));
      EXPECT_EQ(f1.o.bytes, fn.o.bytes) << threads << " threads";
      EXPECT_EQ(0, std::memcmp(f1.lse.data(), fn.lse.data(), f1.lse.size() * sizeof(float)));
      const BackwardResult gn = run_backward(*cpu, in, f1, tiles(16, 8, threads));
      EXPECT_EQ(g1.dq.bytes, gn.dq.bytes) << threads << " threads";
      EXPECT_EQ(g1.dk.bytes, gn.dk.bytes) << threads << " threads";
      EXPECT_EQ(g1.dv.bytes, gn.dv.bytes) << threads << " threads";
    }
  }
}

// The kind of tile (query rows [r0, r1), keys [c0, c1)) from the mask itself, pair by pair.
cpu::TileKind brute_force_kind(const Problem& p, std::int64_t r0, std::int64_t r1, std::int64_t c0,
                               std::int64_t c1) {
  std::int64_t visible = 0;
  for (std::int64_t q = r0; q < r1; ++q)
    for (std::int64_t k = c0; k < c1; ++k) visible += k <= p.last_visible_key(q) ? 1 : 0;
  if (visible == 0) return cpu::TileKind::skipped;
  return visible == (r1 - r0) * (c1 - c0) ? cpu::TileKind::full : cpu::TileKind::diagonal;
}

// Under a causal mask, a key tile entirely above the diagonal is reported skipped and never
// computed, in the forward and in both backward passes; the tiles that are computed carry the
// right kind (only diagonal tiles compare indices).
TEST(CausalTiles, TilesAboveTheDiagonalAreNeverVisited) {
  for (Mask m : {Mask::causal_top_left, Mask::causal_bottom_right}) {
    for (auto [S_q, S_k] : {std::pair{23, 17}, std::pair{17, 23}, std::pair{20, 20}}) {
      const Problem p = make_problem(1, 2, 1, S_q, S_k, 8, m, DType::f32);
      const Inputs in = make_inputs(p, 16);
      RecordingObserver rec;
      const auto cpu = flashref::cpu::make_backend({.trace = &rec});
      const ExecutionOptions opts = tiles(5, 3);
      const ForwardResult fwd = run_forward(*cpu, in, opts);
      run_backward(*cpu, in, fwd, opts);

      const std::string where =
          std::string(mask_name(m)) + " S_q=" + std::to_string(S_q) + " S_k=" + std::to_string(S_k);
      auto kind_of = [&](const cpu::TileRef& t) {
        return brute_force_kind(p, t.row_begin, t.row_end, t.col_begin, t.col_end);
      };
      std::size_t computed = 0;
      for (const auto& s : rec.forward_steps) {
        EXPECT_EQ(kind_of(s.tile), s.tile.kind) << where;
        EXPECT_NE(s.tile.kind, cpu::TileKind::skipped) << where;
        ++computed;
      }
      for (const auto& s : rec.dq_steps) EXPECT_EQ(kind_of(s.tile), s.tile.kind) << where;
      for (const auto& s : rec.dkdv_steps) EXPECT_EQ(kind_of(s.tile), s.tile.kind) << where;
      std::size_t skipped_forward = 0;
      for (const auto& t : rec.skipped) {
        EXPECT_EQ(kind_of(t), cpu::TileKind::skipped) << where;
        EXPECT_EQ(t.kind, cpu::TileKind::skipped) << where;
        if (t.pass == cpu::TracePass::forward) ++skipped_forward;
      }
      // Every (h, i, j) is accounted for exactly once per pass.
      const std::size_t pairs = static_cast<std::size_t>(p.H * ((S_q + 4) / 5) * ((S_k + 2) / 3));
      EXPECT_EQ(computed + skipped_forward, pairs) << where;
      EXPECT_EQ(rec.dq_steps.size(), computed) << where;
      EXPECT_EQ(rec.dkdv_steps.size(), computed) << where;
      EXPECT_GT(skipped_forward, 0u) << where;
    }
  }
}

// Bottom-right causal with S_q > S_k: the first S_q - S_k rows see no key. Their O is 0,
// their L is -inf and their dQ is 0, and no NaN or infinity appears anywhere else.
TEST(FullyMaskedRows, ZeroOutputMinusInfLseZeroGradientsNoNaN) {
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {
    const Problem p = make_problem(2, 2, 1, 40, 13, 12, Mask::causal_bottom_right, t);
    const Inputs in = make_inputs(p, 17);
    const auto cpu = cpu_backend();
    for (const ExecutionOptions& opts : {tiles(8, 8), tiles(32, 4), tiles(3, 64)}) {
      const ForwardResult fwd = run_forward(*cpu, in, opts);
      const BackwardResult g = run_backward(*cpu, in, fwd, opts);
      for (std::int64_t b = 0; b < p.B; ++b)
        for (std::int64_t h = 0; h < p.H; ++h)
          for (std::int64_t q = 0; q < p.S_q; ++q) {
            const bool masked = q < p.S_q - p.S_k;
            const float L = fwd.L(p, b, h, q);
            if (masked) {
              EXPECT_EQ(L, -std::numeric_limits<float>::infinity());
            } else {
              EXPECT_TRUE(std::isfinite(L));
            }
            for (std::int64_t c = 0; c < p.d; ++c) {
              const float o = fwd.o.at(b, q, h, c), dq = g.dq.at(b, q, h, c);
              if (masked) {
                EXPECT_EQ(o, 0.0f);
                EXPECT_EQ(dq, 0.0f);
              } else {
                EXPECT_TRUE(std::isfinite(o) && std::isfinite(dq));
              }
            }
          }
      for (std::int64_t b = 0; b < p.B; ++b)
        for (std::int64_t s = 0; s < p.S_k; ++s)
          for (std::int64_t c = 0; c < p.d; ++c) {
            EXPECT_TRUE(std::isfinite(g.dk.at(b, s, 0, c)));
            EXPECT_TRUE(std::isfinite(g.dv.at(b, s, 0, c)));
          }
    }
  }
}

// A NaN in the input is never swallowed: the row that reads it gets NaN, the others are as
// without it.
TEST(NaNInputs, PropagateToTheRowsThatReadThem) {
  const Problem p = make_problem(1, 1, 1, 20, 20, 8, Mask::none, DType::f32);
  Inputs in = make_inputs(p, 18);
  const auto cpu = cpu_backend();
  const ForwardResult clean = run_forward(*cpu, in, tiles(8, 8));
  in.q.set(0, 5, 0, 3, std::numeric_limits<float>::quiet_NaN());
  const ForwardResult dirty = run_forward(*cpu, in, tiles(8, 8));
  for (std::int64_t q = 0; q < p.S_q; ++q) {
    for (std::int64_t c = 0; c < p.d; ++c) {
      if (q == 5) {
        EXPECT_TRUE(std::isnan(dirty.o.at(0, q, 0, c)));
      } else {
        EXPECT_EQ(dirty.o.at(0, q, 0, c), clean.o.at(0, q, 0, c));
      }
    }
  }
  EXPECT_TRUE(std::isnan(dirty.L(p, 0, 0, 5)));
}

}  // namespace
}  // namespace flashref::cputest

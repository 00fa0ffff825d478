// The trace hook: the order of its callbacks, the relations between the values it reports
// (each recomputed here from the trace's own inputs in double), its agreement with the outputs,
// and that tracing does not change the result.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <stdexcept>
#include <tuple>

#include "cpu_test_support.hpp"
#include "recording_observer.hpp"

namespace flashref::cputest {
namespace {

constexpr double u = 0x1p-24;  // float32 unit roundoff
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

struct Traced {
  Problem p;
  Inputs in;
  ExecutionOptions opts;
  RecordingObserver rec;
  ForwardResult fwd;
  BackwardResult grads;
};

// B=1, H=2 sharing one kv head, S_q=10, S_k=8, d=4, tiles 4 x 3: partial tiles both ways,
// three kinds of tiles under a causal mask.
std::unique_ptr<Traced> traced_run(Mask mask, DType dtype = DType::f32) {
  auto t = std::make_unique<Traced>();
  t->p = make_problem(1, 2, 1, 10, 8, 4, mask, dtype);
  t->in = make_inputs(t->p, 41);
  t->opts = tiles(4, 3);
  const auto traced = flashref::cpu::make_backend({.trace = &t->rec});
  t->fwd = run_forward(*traced, t->in, t->opts);
  t->grads = run_backward(*traced, t->in, t->fwd, t->opts);
  return t;
}

TEST(Trace, CallbacksComeInTheDocumentedOrder) {
  const auto t = traced_run(Mask::causal_top_left);
  const auto& ev = t->rec.events;
  const std::int64_t T_q = 3, T_k = 3;
  std::size_t n = 0;
  ASSERT_EQ(ev.at(n++), Event::forward_begin);
  ASSERT_EQ(t->rec.grids.at(0).T_q, T_q);
  ASSERT_EQ(t->rec.grids.at(0).T_k, T_k);
  std::size_t step = 0, skip = 0;
  for (std::int64_t h = 0; h < 2; ++h) {
    for (std::int64_t i = 0; i < T_q; ++i) {
      ASSERT_EQ(ev.at(n++), Event::query_tile_begin);
      for (std::int64_t j = 0; j < T_k; ++j) {
        const Event e = ev.at(n++);
        ASSERT_TRUE(e == Event::forward_step || e == Event::skipped);
        const cpu::TileRef& tile = e == Event::forward_step ? t->rec.forward_steps.at(step++).tile
                                                            : t->rec.skipped.at(skip++);
        EXPECT_EQ(std::tuple(tile.h, tile.i, tile.j), std::tuple(h, i, j));
        EXPECT_EQ(tile.pass, cpu::TracePass::forward);
      }
      ASSERT_EQ(ev.at(n++), Event::query_tile_end);
    }
  }
  ASSERT_EQ(ev.at(n++), Event::backward_begin);
  ASSERT_EQ(ev.at(n++), Event::backward_D);
  ASSERT_EQ(ev.at(n++), Event::backward_D);
  // The dQ pass: per (h, i), its visited key tiles, the skipped ones, then the tile's end.
  for (std::int64_t k = 0; k < 2 * T_q; ++k) {
    while (ev.at(n) == Event::dq_step || ev.at(n) == Event::skipped) ++n;
    ASSERT_EQ(ev.at(n++), Event::dq_tile_end);
  }
  // The dK/dV pass: one key tile of the single kv head at a time, both query heads inside.
  for (std::int64_t j = 0; j < T_k; ++j) {
    while (ev.at(n) == Event::dkdv_step || ev.at(n) == Event::skipped) ++n;
    ASSERT_EQ(ev.at(n++), Event::dkdv_tile_end);
    EXPECT_EQ(t->rec.dkdv_ends.at(static_cast<std::size_t>(j)).j, j);
  }
  EXPECT_EQ(n, ev.size());
  for (const auto& s : t->rec.dkdv_steps) EXPECT_EQ(s.tile.pass, cpu::TracePass::dkdv);
  for (const auto& s : t->rec.dq_steps) EXPECT_EQ(s.tile.pass, cpu::TracePass::dq);
}

// Relative error of float32 exp(a - b): the subtraction's rounding (u |x|, which exp turns
// into a relative error) plus exp's own 2 ulp (4 u) and the rounding of its result.
double exp_bound(double x) {
  return (std::fabs(x) + 5.0) * u;
}

// scale * Q_q . K_k in double, with the float32 error bound of the d-term dot product.
double score(const Traced& t, std::int64_t h, std::int64_t q, std::int64_t k, double* bound) {
  double s = 0, a = 0;
  for (std::int64_t c = 0; c < t.p.d; ++c) {
    const double x = double(t.in.q.at(0, q, h, c)) * t.in.k.at(0, k, 0, c);
    s += x, a += std::fabs(x);
  }
  *bound = (t.p.d + 2.0) * u * t.p.scale * a;
  return t.p.scale * s;
}

// Alg. 1 lines 9-13, step by step: each reported value follows from the previous step's and
// the inputs, as the algorithm says.
TEST(Trace, ForwardStepsFollowAlgorithm1) {
  for (Mask mask : {Mask::none, Mask::causal_top_left, Mask::causal_bottom_right}) {
    const auto t = traced_run(mask);
    const Problem& p = t->p;
    // The previous step's m, l and O of each (h, row): Alg. 1 line 6's initial values first.
    std::map<std::pair<std::int64_t, std::int64_t>, std::tuple<float, float, std::vector<float>>>
        prev;
    for (const ForwardStepCopy& s : t->rec.forward_steps) {
      const cpu::TileRef& tile = s.tile;
      for (std::int64_t r = 0; r < s.S.rows; ++r) {
        const std::int64_t q = tile.row_begin + r;
        auto [it, fresh] =
            prev.try_emplace({tile.h, q}, kNegInf, 0.0f, std::vector<float>(p.d, 0.0f));
        auto& [m_prev, l_prev, O_prev] = it->second;
        EXPECT_EQ(s.m_old[r], m_prev);
        // Line 9: the scores, -inf exactly where the key is masked.
        float row_max = kNegInf;
        for (std::int64_t c = 0; c < s.S.cols; ++c) {
          const std::int64_t k = tile.col_begin + c;
          if (k > p.last_visible_key(q)) {
            EXPECT_EQ(s.S(r, c), kNegInf);
            EXPECT_EQ(s.P_tilde(r, c), 0.0f);
            continue;
          }
          double bound = 0;
          const double expected = score(*t, tile.h, q, k, &bound);
          EXPECT_NEAR(s.S(r, c), expected, bound);
          row_max = std::max(row_max, s.S(r, c));
        }
        // Line 10 (exact: max rounds nothing).
        EXPECT_EQ(s.m_new[r], std::max(s.m_old[r], row_max));
        const float m = s.m_new[r];
        // The rescale factor of lines 12-13, and line 11.
        if (m == kNegInf) {
          EXPECT_EQ(s.rescale[r], 1.0f);  // both -inf: the row has seen nothing yet
        } else if (s.m_old[r] == kNegInf) {
          EXPECT_EQ(s.rescale[r], 0.0f);  // exp(-inf): the first visible key of the row
        } else {
          const double x = double(s.m_old[r]) - m;
          const double expected = std::exp(x);
          EXPECT_NEAR(s.rescale[r], expected, exp_bound(x) * expected);
        }
        double row_sum = 0;
        for (std::int64_t c = 0; c < s.S.cols; ++c) {
          if (s.S(r, c) == kNegInf) continue;
          const double x = double(s.S(r, c)) - m;
          const double expected = std::exp(x);
          EXPECT_NEAR(s.P_tilde(r, c), expected, exp_bound(x) * expected);
          row_sum += s.P_tilde(r, c);
        }
        // Line 12.
        const double l = double(s.rescale[r]) * l_prev + row_sum;
        EXPECT_NEAR(s.l[r], l, (s.S.cols + 2.0) * u * l);
        // Line 13, against the previous step's O and the tile's V (read from the inputs).
        for (std::int64_t c = 0; c < p.d; ++c) {
          double o = double(s.rescale[r]) * O_prev[static_cast<std::size_t>(c)], mag = std::fabs(o);
          for (std::int64_t k = 0; k < s.S.cols; ++k) {
            const double x = double(s.P_tilde(r, k)) * t->in.v.at(0, tile.col_begin + k, 0, c);
            o += x, mag += std::fabs(x);
          }
          EXPECT_NEAR(s.O(r, c), o, (s.S.cols + 3.0) * u * mag);
        }
        m_prev = s.m_new[r];
        l_prev = s.l[r];
        for (std::int64_t c = 0; c < p.d; ++c) O_prev[static_cast<std::size_t>(c)] = s.O(r, c);
      }
    }
    // Lines 15-18: the tile's end reports the values written, bit for bit.
    for (const ForwardEndCopy& e : t->rec.forward_ends) {
      for (std::int64_t r = 0; r < e.row_end - e.row_begin; ++r) {
        const std::int64_t q = e.row_begin + r;
        EXPECT_EQ(
            std::memcmp(&e.L[static_cast<std::size_t>(r)],
                        &t->fwd.lse[static_cast<std::size_t>(e.h * p.S_q + q)], sizeof(float)),
            0);
        for (std::int64_t c = 0; c < p.d; ++c) EXPECT_EQ(e.O(r, c), t->fwd.o.at(0, q, e.h, c));
      }
    }
  }
}

// Algorithm 2: D = rowsum(dO * O); P = exp(S - L); dS = P * (dP - D); and the dK/dV pass,
// which computes every tile transposed, reports the same S, P, dP, dS as the dQ pass, bit
// for bit (the same products in the same order).
TEST(Trace, BackwardStepsFollowAlgorithm2AndBothPassesAgree) {
  for (Mask mask : {Mask::none, Mask::causal_top_left, Mask::causal_bottom_right}) {
    const auto t = traced_run(mask);
    const Problem& p = t->p;
    ASSERT_EQ(t->rec.Ds.size(), 2u);
    for (const auto& D : t->rec.Ds) {
      for (std::int64_t q = 0; q < p.S_q; ++q) {
        double expected = 0, mag = 0;
        for (std::int64_t c = 0; c < p.d; ++c) {
          const double x = double(t->in.dO.at(0, q, D.h, c)) * t->fwd.o.at(0, q, D.h, c);
          expected += x, mag += std::fabs(x);
        }
        EXPECT_NEAR(D.D[static_cast<std::size_t>(q)], expected, (p.d + 1.0) * u * mag);
      }
    }
    std::map<std::tuple<std::int64_t, std::int64_t, std::int64_t>, const GradStepCopy*> by_tile;
    for (const GradStepCopy& s : t->rec.dq_steps) {
      by_tile[{s.tile.h, s.tile.i, s.tile.j}] = &s;
      const float* D = t->rec.Ds.at(static_cast<std::size_t>(s.tile.h)).D.data();
      for (std::int64_t r = 0; r < s.P.rows; ++r) {
        const std::int64_t q = s.tile.row_begin + r;
        const double L = t->fwd.L(p, 0, s.tile.h, q);
        for (std::int64_t c = 0; c < s.P.cols; ++c) {
          if (s.S(r, c) == kNegInf) {
            EXPECT_EQ(s.P(r, c), 0.0f);  // masked (every key of a row that sees none is)
          } else {
            const double x = double(s.S(r, c)) - L;
            EXPECT_NEAR(s.P(r, c), std::exp(x), exp_bound(x) * std::exp(x));
          }
          const double dS = double(s.P(r, c)) * (double(s.dP(r, c)) - D[q]);
          EXPECT_NEAR(s.dS(r, c), dS, 2 * u * (std::fabs(dS) + std::fabs(s.P(r, c) * D[q])));
        }
      }
    }
    ASSERT_EQ(t->rec.dkdv_steps.size(), t->rec.dq_steps.size());
    for (const GradStepCopy& s : t->rec.dkdv_steps) {
      const GradStepCopy* q = by_tile.at({s.tile.h, s.tile.i, s.tile.j});
      EXPECT_EQ(s.S.v, q->S.v);
      EXPECT_EQ(s.P.v, q->P.v);
      EXPECT_EQ(s.dP.v, q->dP.v);
      EXPECT_EQ(s.dS.v, q->dS.v);
    }
    // The tile ends report the values written.
    for (std::size_t n = 0; n < t->rec.dq_ends.size(); ++n) {
      const cpu::DqTileEnd& e = t->rec.dq_ends[n];
      for (std::int64_t r = 0; r < e.row_end - e.row_begin; ++r)
        for (std::int64_t c = 0; c < p.d; ++c)
          EXPECT_EQ(t->rec.dq_end_values[n](r, c), t->grads.dq.at(0, e.row_begin + r, e.h, c));
    }
    for (std::size_t n = 0; n < t->rec.dkdv_ends.size(); ++n) {
      const cpu::DkDvTileEnd& e = t->rec.dkdv_ends[n];
      for (std::int64_t r = 0; r < e.col_end - e.col_begin; ++r)
        for (std::int64_t c = 0; c < p.d; ++c) {
          EXPECT_EQ(t->rec.dk_end_values[n](r, c), t->grads.dk.at(0, e.col_begin + r, e.h_kv, c));
          EXPECT_EQ(t->rec.dv_end_values[n](r, c), t->grads.dv.at(0, e.col_begin + r, e.h_kv, c));
        }
    }
  }
}

// Tracing runs one thread in a fixed order but computes exactly what the untraced run does.
TEST(Trace, TracedAndUntracedRunsWriteTheSameBytes) {
  for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    const auto t = traced_run(Mask::causal_bottom_right, dtype);
    const auto cpu = flashref::cpu::make_backend();
    const ForwardResult fwd = run_forward(*cpu, t->in, t->opts);
    const BackwardResult grads = run_backward(*cpu, t->in, t->fwd, t->opts);
    EXPECT_EQ(fwd.o.bytes, t->fwd.o.bytes);
    EXPECT_EQ(0, std::memcmp(fwd.lse.data(), t->fwd.lse.data(), fwd.lse.size() * sizeof(float)));
    EXPECT_EQ(grads.dq.bytes, t->grads.dq.bytes);
    EXPECT_EQ(grads.dk.bytes, t->grads.dk.bytes);
    EXPECT_EQ(grads.dv.bytes, t->grads.dv.bytes);
  }
}

// An observer may throw: the exception leaves forward() (it is not swallowed, and the
// program is not terminated, as it would be from inside a parallel region).
TEST(Trace, AnExceptionFromTheObserverPropagates) {
  struct Throwing : cpu::TraceObserver {
    void forward_step(const cpu::ForwardStep&) override { throw std::runtime_error("stop"); }
  } observer;
  const Problem p = make_problem(1, 1, 1, 8, 8, 4);
  const Inputs in = make_inputs(p, 42);
  EXPECT_THROW(run_forward(*flashref::cpu::make_backend({.trace = &observer}), in),
               std::runtime_error);
}

}  // namespace
}  // namespace flashref::cputest

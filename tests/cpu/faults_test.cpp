// Every planted fault (flashref/cpu/faults.hpp) changes the output, and only where its bug
// would: the diagnosis of `flashref check` is tested against these, so each must be exactly
// the mistake its name says.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numbers>

#include "cpu_test_support.hpp"
#include "flashref/cpu/faults.hpp"

namespace flashref::cputest {
namespace {

using cpu::Fault;

constexpr double u = 0x1p-24;  // float32 unit roundoff

// The cpu backend with the fault planted (Options::faults, flashref/cpu/backend.hpp).
std::unique_ptr<Backend> with_fault(Fault f) {
  return flashref::cpu::make_backend({.faults = static_cast<std::uint32_t>(f)});
}

bool same(float a, float b) {
  return a == b || (std::isnan(a) && std::isnan(b));
}

bool row_equal(const HostTensor& x, const HostTensor& y, std::int64_t b, std::int64_t s,
               std::int64_t h) {
  for (std::int64_t c = 0; c < x.d; ++c) {
    if (!same(x.at(b, s, h, c), y.at(b, s, h, c))) return false;
  }
  return true;
}

bool all_equal(const HostTensor& x, const HostTensor& y) {
  for (std::int64_t b = 0; b < x.B; ++b)
    for (std::int64_t s = 0; s < x.S; ++s)
      for (std::int64_t h = 0; h < x.H; ++h)
        if (!row_equal(x, y, b, s, h)) return false;
  return true;
}

bool all_equal(const std::vector<float>& x, const std::vector<float>& y) {
  for (std::size_t n = 0; n < x.size(); ++n)
    if (!same(x[n], y[n])) return false;
  return true;
}

struct Runs {
  Inputs in;
  ExecutionOptions opts;
  ForwardResult clean, faulty;
};

Runs forward_pair(const Problem& p, ExecutionOptions opts, Fault f, std::uint64_t seed = 21) {
  Inputs in = make_inputs(p, seed);
  const auto cpu = flashref::cpu::make_backend();
  ForwardResult clean = run_forward(*cpu, in, opts);
  ForwardResult faulty = run_forward(*with_fault(f), in, opts);
  return {std::move(in), opts, std::move(clean), std::move(faulty)};
}

TEST(Faults, EveryFaultHasANameThatParsesBack) {
  for (Fault f : cpu::all_faults()) EXPECT_EQ(cpu::parse_fault(cpu::fault_name(f)), f);
  EXPECT_THROW(cpu::parse_fault("no_such_fault"), InvalidArgument);
}

TEST(Faults, NoScaleEqualsACleanRunWithScaleOne) {
  const Problem p = make_problem(1, 2, 2, 30, 30, 16, Mask::none, DType::f32);
  const Runs r = forward_pair(p, tiles(8, 8), Fault::no_scale);
  Problem unscaled = p;
  unscaled.scale = 1.0;
  Inputs in = r.in;
  in.problem = unscaled;
  const ForwardResult expected = run_forward(*flashref::cpu::make_backend(), in, r.opts);
  EXPECT_TRUE(all_equal(r.faulty.o, expected.o));
  EXPECT_TRUE(all_equal(r.faulty.lse, expected.lse));
  EXPECT_FALSE(all_equal(r.faulty.o, r.clean.o));
}

TEST(Faults, LseBase2DividesLByLn2AndLeavesO) {
  const Problem p = make_problem(1, 2, 2, 25, 30, 16, Mask::causal_bottom_right, DType::f32);
  const Runs r = forward_pair(p, tiles(8, 8), Fault::lse_base2);
  EXPECT_TRUE(all_equal(r.faulty.o, r.clean.o));
  for (std::size_t n = 0; n < r.clean.lse.size(); ++n) {
    EXPECT_EQ(r.faulty.lse[n], r.clean.lse[n] * std::numbers::log2e_v<float>);
  }
  EXPECT_FALSE(all_equal(r.faulty.lse, r.clean.lse));
}

TEST(Faults, LseUnshiftedDropsTheRowMax) {
  const Problem p = make_problem(1, 2, 2, 25, 30, 16, Mask::causal_top_left, DType::f32);
  const Runs r = forward_pair(p, tiles(8, 8), Fault::lse_unshifted);
  EXPECT_TRUE(all_equal(r.faulty.o, r.clean.o));
  ForwardResult unused = empty_forward(r.in);
  const reference::GoldForward gold = reference::gold_forward(forward_params(r.in, unused));
  for (std::int64_t h = 0; h < p.H; ++h)
    for (std::int64_t q = 0; q < p.S_q; ++q) {
      // L - L_unshifted is the row max m: up to the float32 error of the scores (a d-term dot
      // product, then the scale) and the rounding of the two L's.
      double score_err = 0;
      for (std::int64_t k = 0; k <= p.last_visible_key(q); ++k) {
        double abs_dot = 0;
        for (std::int64_t c = 0; c < p.d; ++c)
          abs_dot += std::fabs(double(r.in.q.at(0, q, h, c)) * r.in.k.at(0, k, h, c));
        score_err = std::max(score_err, (p.d + 2.0) * u * p.scale * abs_dot);
      }
      const double m = gold.m(0, h, q);
      const double L = r.clean.L(p, 0, h, q), L_unshifted = r.faulty.L(p, 0, h, q);
      const double bound =
          2.0 * (score_err + (p.S_k + 8.0) * u + u * (std::fabs(L) + std::fabs(L_unshifted)));
      EXPECT_NEAR(L - L_unshifted, m, bound) << "head " << h << " row " << q;
    }
}

TEST(Faults, MaskIgnoredChangesExactlyTheRowsThatHaveMaskedKeys) {
  const Problem p = make_problem(1, 2, 2, 30, 30, 16, Mask::causal_top_left, DType::f32);
  const Runs r = forward_pair(p, tiles(8, 8), Fault::mask_ignored);
  for (std::int64_t h = 0; h < p.H; ++h)
    for (std::int64_t q = 0; q < p.S_q; ++q) {
      const bool has_masked_keys = p.last_visible_key(q) < p.S_k - 1;
      EXPECT_EQ(!has_masked_keys, row_equal(r.faulty.o, r.clean.o, 0, q, h)) << "row " << q;
    }
}

TEST(Faults, MaskAlignmentComputesTheOtherAlignment) {
  for (auto [asked, other] : {std::pair{Mask::causal_bottom_right, Mask::causal_top_left},
                              std::pair{Mask::causal_top_left, Mask::causal_bottom_right}}) {
    const Problem p = make_problem(1, 2, 1, 20, 33, 16, asked, DType::bf16);
    const Runs r = forward_pair(p, tiles(8, 8), Fault::mask_alignment);
    Inputs in = r.in;
    in.problem.mask = other;
    const ForwardResult expected = run_forward(*flashref::cpu::make_backend(), in, r.opts);
    EXPECT_TRUE(all_equal(r.faulty.o, expected.o));
    EXPECT_TRUE(all_equal(r.faulty.lse, expected.lse));
    EXPECT_FALSE(all_equal(r.faulty.o, r.clean.o));
  }
}

TEST(Faults, UnnormalizedLeavesOMultipliedByL) {
  const Problem p = make_problem(1, 2, 2, 30, 30, 16, Mask::causal_top_left, DType::f32);
  const Runs r = forward_pair(p, tiles(8, 8), Fault::unnormalized);
  EXPECT_TRUE(all_equal(r.faulty.lse, r.clean.lse));
  ForwardResult unused = empty_forward(r.in);
  const reference::GoldForward gold = reference::gold_forward(forward_params(r.in, unused));
  // O_unnormalized = l O: up to the float32 error of l (n terms and T_k rescales, each with
  // exp's 2 ulp) and of the division.
  const double T_k = std::ceil(p.S_k / 8.0);
  for (std::int64_t h = 0; h < p.H; ++h)
    for (std::int64_t q = 0; q < p.S_q; ++q)
      for (std::int64_t c = 0; c < p.d; ++c) {
        const double l = gold.l(0, h, q), o = r.clean.o.at(0, q, h, c);
        const double bound = (p.S_k + 4.0 * T_k + 8.0) * u * l * std::fabs(o) + 1e-30;
        EXPECT_NEAR(r.faulty.o.at(0, q, h, c), o * l, bound) << "row " << q;
      }
  EXPECT_FALSE(all_equal(r.faulty.o, r.clean.o));
}

TEST(Faults, NanMaskedRowsPutsNaNExactlyInTheRowsThatSeeNoKey) {
  const Problem p = make_problem(1, 2, 2, 30, 12, 16, Mask::causal_bottom_right, DType::f16);
  const Runs r = forward_pair(p, tiles(8, 8), Fault::nan_masked_rows);
  for (std::int64_t h = 0; h < p.H; ++h)
    for (std::int64_t q = 0; q < p.S_q; ++q) {
      if (p.last_visible_key(q) < 0) {
        for (std::int64_t c = 0; c < p.d; ++c) EXPECT_TRUE(std::isnan(r.faulty.o.at(0, q, h, c)));
      } else {
        EXPECT_TRUE(row_equal(r.faulty.o, r.clean.o, 0, q, h)) << "row " << q;
      }
    }
}

TEST(Faults, TailRowsCorruptsOnlyTheLastPartialQueryTile) {
  for (Mask m : {Mask::none, Mask::causal_bottom_right}) {
    const Problem p = make_problem(1, 2, 2, 37, 40, 16, m, DType::f32);
    const Runs r = forward_pair(p, tiles(16, 16), Fault::tail_rows);
    for (std::int64_t h = 0; h < p.H; ++h)
      for (std::int64_t q = 0; q < p.S_q; ++q) {
        const bool in_tail = q >= 32;
        EXPECT_EQ(!in_tail, row_equal(r.faulty.o, r.clean.o, 0, q, h)) << "row " << q;
      }
    // With S_q a multiple of B_q there is no partial tile and nothing changes.
    const Runs whole = forward_pair(make_problem(1, 2, 2, 32, 40, 16, m, DType::f32), tiles(16, 16),
                                    Fault::tail_rows);
    EXPECT_TRUE(all_equal(whole.faulty.o, whole.clean.o));
  }
}

TEST(Faults, DiagonalTilesChangeOnlyRowsWithMaskedKeysInADiagonalTile) {
  const Problem p = make_problem(1, 1, 1, 40, 40, 16, Mask::causal_top_left, DType::f32);
  const int B_q = 8, B_k = 16;
  const Runs r = forward_pair(p, tiles(B_q, B_k), Fault::diagonal_tiles);
  for (std::int64_t q = 0; q < p.S_q; ++q) {
    // The row's key tiles that it sees partly: the diagonal tiles where it has masked keys.
    const std::int64_t last = p.last_visible_key(q);
    const std::int64_t tile_end = std::min<std::int64_t>((last / B_k + 1) * B_k, p.S_k);
    const bool affected = last < tile_end - 1;
    EXPECT_EQ(!affected, row_equal(r.faulty.o, r.clean.o, 0, q, 0)) << "row " << q;
  }
}

struct GradRuns {
  Inputs in;
  BackwardResult clean, faulty;
};

GradRuns backward_pair(const Problem& p, Fault f) {
  Inputs in = make_inputs(p, 22);
  const auto cpu = flashref::cpu::make_backend();
  const ForwardResult fwd = run_forward(*cpu, in, tiles(8, 8));
  BackwardResult clean = run_backward(*cpu, in, fwd, tiles(8, 8));
  BackwardResult faulty = run_backward(*with_fault(f), in, fwd, tiles(8, 8));
  return {std::move(in), std::move(clean), std::move(faulty)};
}

TEST(Faults, DqScaleLeavesTheScaleOutOfDqOnly) {
  const Problem p = make_problem(1, 2, 1, 24, 20, 16, Mask::causal_top_left, DType::f32);
  const GradRuns r = backward_pair(p, Fault::dq_scale);
  EXPECT_TRUE(all_equal(r.faulty.dk, r.clean.dk));
  EXPECT_TRUE(all_equal(r.faulty.dv, r.clean.dv));
  for (std::int64_t h = 0; h < p.H; ++h)
    for (std::int64_t q = 0; q < p.S_q; ++q)
      for (std::int64_t c = 0; c < p.d; ++c) {
        const float x = r.faulty.dq.at(0, q, h, c);
        EXPECT_EQ(r.clean.dq.at(0, q, h, c), x * static_cast<float>(p.scale));
      }
  EXPECT_FALSE(all_equal(r.faulty.dq, r.clean.dq));
}

TEST(Faults, DkScaleAppliesTheScaleTwiceToDkOnly) {
  const Problem p = make_problem(1, 2, 1, 24, 20, 16, Mask::causal_top_left, DType::f32);
  const GradRuns r = backward_pair(p, Fault::dk_scale);
  EXPECT_TRUE(all_equal(r.faulty.dq, r.clean.dq));
  EXPECT_TRUE(all_equal(r.faulty.dv, r.clean.dv));
  const double s = p.scale;
  for (std::int64_t k = 0; k < p.S_k; ++k)
    for (std::int64_t c = 0; c < p.d; ++c) {
      const double clean = r.clean.dk.at(0, k, 0, c);
      EXPECT_NEAR(r.faulty.dk.at(0, k, 0, c), clean * s, 4 * u * std::fabs(clean * s));
    }
  EXPECT_FALSE(all_equal(r.faulty.dk, r.clean.dk));
}

TEST(Faults, DVectorZeroChangesDqAndDkButNotDv) {
  const Problem p = make_problem(1, 2, 1, 24, 20, 16, Mask::none, DType::f32);
  const GradRuns r = backward_pair(p, Fault::d_vector);
  EXPECT_TRUE(all_equal(r.faulty.dv, r.clean.dv));
  EXPECT_FALSE(all_equal(r.faulty.dq, r.clean.dq));
  EXPECT_FALSE(all_equal(r.faulty.dk, r.clean.dk));
}

TEST(Faults, GqaReductionKeepsOnlyTheFirstHeadOfEachGroup) {
  const Problem p = make_problem(1, 6, 2, 24, 20, 16, Mask::causal_top_left, DType::f32);
  const GradRuns r = backward_pair(p, Fault::gqa_reduction);
  EXPECT_TRUE(all_equal(r.faulty.dq, r.clean.dq));
  EXPECT_FALSE(all_equal(r.faulty.dk, r.clean.dk));
  EXPECT_FALSE(all_equal(r.faulty.dv, r.clean.dv));
  // The same as a clean run where every head but the first of its group has dO = 0 (its
  // contributions to dK and dV are then exact zeros).
  Inputs in = r.in;
  for (std::int64_t h = 0; h < p.H; ++h) {
    if (h % p.group_size() == 0) continue;
    for (std::int64_t q = 0; q < p.S_q; ++q)
      for (std::int64_t c = 0; c < p.d; ++c) in.dO.set(0, q, h, c, 0.0f);
  }
  const auto cpu = flashref::cpu::make_backend();
  const BackwardResult expected =
      run_backward(*cpu, in, run_forward(*cpu, in, tiles(8, 8)), tiles(8, 8));
  EXPECT_TRUE(all_equal(r.faulty.dk, expected.dk));
  EXPECT_TRUE(all_equal(r.faulty.dv, expected.dv));
}

// Every fault changes something on a problem where its bug can show, and no fault is
// accidentally always on: the clean run passes the baseline rule (tested elsewhere) and
// differs from each faulty one.
TEST(Faults, EveryFaultChangesTheOutput) {
  const Problem p = make_problem(1, 4, 2, 37, 29, 16, Mask::causal_bottom_right, DType::f32);
  const Inputs in = make_inputs(p, 23);
  const auto cpu = flashref::cpu::make_backend();
  const ForwardResult fwd = run_forward(*cpu, in, tiles(16, 8));
  const BackwardResult grads = run_backward(*cpu, in, fwd, tiles(16, 8));
  for (Fault f : cpu::all_faults()) {
    const ForwardResult ff = run_forward(*with_fault(f), in, tiles(16, 8));
    const BackwardResult gf = run_backward(*with_fault(f), in, fwd, tiles(16, 8));
    const bool changed = !all_equal(ff.o, fwd.o) || !all_equal(ff.lse, fwd.lse) ||
                         !all_equal(gf.dq, grads.dq) || !all_equal(gf.dk, grads.dk) ||
                         !all_equal(gf.dv, grads.dv);
    EXPECT_TRUE(changed) << cpu::fault_name(f);
  }
}

}  // namespace
}  // namespace flashref::cputest

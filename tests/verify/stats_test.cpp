// Error statistics on planted errors of known size, and the non-finite bookkeeping.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "flashref/error.hpp"
#include "flashref/verify/stats.hpp"

namespace flashref::verify {
namespace {

xt::xtensor<double, 4> random4(std::size_t B, std::size_t H, std::size_t S, std::size_t d,
                               unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-2.0, 2.0);
  xt::xtensor<double, 4> t(std::array{B, H, S, d});
  for (double& x : t) x = u(rng);
  return t;
}

TEST(Stats, IdenticalTensorsHaveNoError) {
  const auto gold = random4(2, 3, 7, 5, 1);
  const ErrorStats s = compute_stats(gold, gold, SeqAxis::query, 4);
  EXPECT_EQ(s.count, 2 * 3 * 7 * 5);
  EXPECT_EQ(s.finite_pairs, s.count);
  EXPECT_EQ(s.max_abs, 0.0);
  EXPECT_EQ(s.mean_abs, 0.0);
  EXPECT_EQ(s.max_rel, 0.0);
  EXPECT_EQ(s.rel_l2, 0.0);
  EXPECT_EQ(s.nonfinite_mismatches(), 0);
  double max_gold = 0.0;
  for (double g : gold) max_gold = std::max(max_gold, std::fabs(g));
  EXPECT_EQ(s.max_abs_gold, max_gold);
}

TEST(Stats, PlantedErrorIsMeasuredAndLocated) {
  const auto gold = random4(2, 3, 11, 5, 2);
  auto cand = gold;
  cand(1, 2, 9, 3) += 0.25;
  cand(0, 0, 0, 0) += 0.01;  // a smaller error elsewhere
  const double big = std::fabs(cand(1, 2, 9, 3) - gold(1, 2, 9, 3));
  const double small = std::fabs(cand(0, 0, 0, 0) - gold(0, 0, 0, 0));
  const ErrorStats s = compute_stats(cand, gold, SeqAxis::query, 4);
  EXPECT_EQ(s.max_abs, big);
  EXPECT_DOUBLE_EQ(s.mean_abs, (big + small) / static_cast<double>(s.count));
  double gold2 = 0.0;
  for (double g : gold) gold2 += g * g;
  EXPECT_DOUBLE_EQ(s.rel_l2, std::sqrt((big * big + small * small) / gold2));
  EXPECT_EQ(s.worst.b, 1);
  EXPECT_EQ(s.worst.h, 2);
  EXPECT_EQ(s.worst.s, 9);
  EXPECT_EQ(s.worst.i, 3);
  EXPECT_EQ(s.worst_tile, 9 / 4);
  EXPECT_EQ(s.tile_size, 4);
  EXPECT_EQ(s.worst_candidate, cand(1, 2, 9, 3));
  EXPECT_EQ(s.worst_gold, gold(1, 2, 9, 3));
}

TEST(Stats, KeyAxisPlacesTheWorstRowInAKeyTile) {
  const auto gold = random4(1, 2, 30, 3, 3);
  auto cand = gold;
  cand(0, 1, 23, 2) -= 1.0;
  const ErrorStats s = compute_stats(cand, gold, SeqAxis::key, 7);
  EXPECT_EQ(s.axis, SeqAxis::key);
  EXPECT_EQ(s.worst.s, 23);
  EXPECT_EQ(s.worst_tile, 23 / 7);
}

TEST(Stats, RelativeErrorUsesTheDenominatorFloor) {
  auto gold = random4(1, 1, 4, 4, 4);
  gold(0, 0, 2, 1) = 0.0;  // an error here would divide by zero without the floor
  auto cand = gold;
  cand(0, 0, 2, 1) = 1e-6;
  double max_gold = 0.0;
  for (double g : gold) max_gold = std::max(max_gold, std::fabs(g));
  const ErrorStats s = compute_stats(cand, gold, SeqAxis::query, 2);
  EXPECT_DOUBLE_EQ(s.max_rel, 1e-6 / (kRelFloorFraction * max_gold));
}

TEST(Stats, NonFiniteCandidateValuesAreCountedAndWorst) {
  const auto gold = random4(1, 2, 5, 3, 5);
  auto cand = gold;
  cand(0, 0, 1, 0) += 100.0;  // a large finite error
  cand(0, 1, 3, 2) = NAN;
  cand(0, 1, 4, 0) = INFINITY;
  cand(0, 1, 4, 1) = -INFINITY;
  const ErrorStats s = compute_stats(cand, gold, SeqAxis::query, 2);
  EXPECT_EQ(s.nan, 1);
  EXPECT_EQ(s.pos_inf, 1);
  EXPECT_EQ(s.neg_inf, 1);
  EXPECT_EQ(s.missed_gold_nonfinite, 0);
  EXPECT_EQ(s.nonfinite_mismatches(), 3);
  EXPECT_EQ(s.finite_pairs, s.count - 3);
  // The finite statistics still see the finite error ...
  EXPECT_EQ(s.max_abs, std::fabs(cand(0, 0, 1, 0) - gold(0, 0, 1, 0)));
  // ... but the worst element is the first non-finite one: it is the most wrong.
  EXPECT_EQ(s.worst.h, 1);
  EXPECT_EQ(s.worst.s, 3);
  EXPECT_EQ(s.worst.i, 2);
  EXPECT_TRUE(std::isnan(s.worst_candidate));
}

xt::xtensor<double, 3> lse_with_masked_rows() {
  xt::xtensor<double, 3> L(std::array<std::size_t, 3>{1, 2, 6});
  for (std::size_t h = 0; h < 2; ++h)
    for (std::size_t s = 0; s < 6; ++s)
      L(0, h, s) = s < 2 ? -INFINITY : 0.5 * static_cast<double>(s) + static_cast<double>(h);
  return L;
}

TEST(Stats, MatchedMinusInfinityInLIsNotAnError) {
  const auto gold = lse_with_masked_rows();
  auto cand = gold;
  cand(0, 1, 5) += 1e-3;
  const ErrorStats s = compute_stats(cand, gold, 3);
  EXPECT_EQ(s.nonfinite_mismatches(), 0);
  EXPECT_EQ(s.finite_pairs, 8);  // the four masked rows are matched, not compared
  EXPECT_EQ(s.max_abs, std::fabs(cand(0, 1, 5) - gold(0, 1, 5)));
  EXPECT_EQ(s.worst.s, 5);
  EXPECT_EQ(s.worst_tile, 1);
  EXPECT_EQ(s.max_abs_gold, gold(0, 1, 5));
}

TEST(Stats, FiniteValueWhereTheGoldIsMinusInfinityIsAMismatch) {
  const auto gold = lse_with_masked_rows();
  auto cand = gold;
  cand(0, 0, 1) = 0.0;  // e.g. L = m + log(l) with m = 0 instead of -inf
  const ErrorStats s = compute_stats(cand, gold, 3);
  EXPECT_EQ(s.missed_gold_nonfinite, 1);
  EXPECT_EQ(s.nonfinite_mismatches(), 1);
  EXPECT_EQ(s.worst.s, 1);
}

TEST(Stats, MinusInfinityWhereTheGoldIsFiniteIsAMismatch) {
  const auto gold = lse_with_masked_rows();
  auto cand = gold;
  cand(0, 1, 4) = -INFINITY;
  const ErrorStats s = compute_stats(cand, gold, 3);
  EXPECT_EQ(s.neg_inf, 1);
  EXPECT_EQ(s.missed_gold_nonfinite, 0);
}

TEST(Stats, NaNWhereTheGoldIsMinusInfinityIsCountedAsNaN) {
  const auto gold = lse_with_masked_rows();
  auto cand = gold;
  cand(0, 0, 0) = NAN;  // -inf - -inf in a fully masked row
  const ErrorStats s = compute_stats(cand, gold, 3);
  EXPECT_EQ(s.nan, 1);
  EXPECT_EQ(s.nonfinite_mismatches(), 1);
}

TEST(Stats, ShapeMismatchIsRejected) {
  const auto gold = random4(1, 2, 5, 3, 6);
  const auto cand = random4(1, 2, 5, 4, 6);
  try {
    compute_stats(cand, gold, SeqAxis::query, 2);
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.field(), "candidate");
    EXPECT_NE(std::string(e.what()).find("(1, 2, 5, 4)"), std::string::npos) << e.what();
  }
  EXPECT_THROW(compute_stats(gold, gold, SeqAxis::query, 0), InvalidArgument);
}

TEST(Stats, AllZeroGoldWithAnErrorHasInfiniteRelativeL2) {
  xt::xtensor<double, 4> gold(std::array<std::size_t, 4>{1, 1, 2, 2}, 0.0);
  auto cand = gold;
  cand(0, 0, 1, 1) = 1e-9;
  const ErrorStats s = compute_stats(cand, gold, SeqAxis::query, 1);
  EXPECT_TRUE(std::isinf(s.rel_l2));
  EXPECT_EQ(s.max_abs, 1e-9);
}

}  // namespace
}  // namespace flashref::verify

// The sm90 kernels' tile order (cuda/src/kernels/common/tile_order.hpp): sections of heads
// whose other side fits in L2, and the persistent forward's grid that keeps its snake level.
// Host logic only: the decode is the one the kernels run, replayed here.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "kernels/common/tile_order.hpp"

namespace flashref::cuda::kernels {
namespace {

constexpr long long kMiB = 1LL << 20;
// The forward's budget: three quarters of one of L2's two partitions (sm90/launch.cuh).
constexpr long long kH200Sms = 132, kBudget = 50 * kMiB / 2 * 3 / 4;

// (row counted from the end as the query schedule does, pair) of every tile, in order.
std::vector<std::pair<int, int>> replay(int tiles_per_pair, int pairs, int section) {
  std::vector<std::pair<int, int>> order;
  for (int index = 0; index < tiles_per_pair * pairs; ++index) {
    const SectionPlace p = section_of(index, tiles_per_pair, pairs, section);
    order.emplace_back(p.tile / p.pairs, p.first_pair + p.tile % p.pairs);
  }
  return order;
}

TEST(CudaTileOrder, EverySectioningVisitsEachTileOnceAndEachPairsRowsInOrder) {
  for (int section : {0, 1, 3, 7, 33, 40, 41}) {
    const int tiles_per_pair = 6, pairs = 40;
    const auto order = replay(tiles_per_pair, pairs, section);
    const std::set<std::pair<int, int>> distinct(order.begin(), order.end());
    EXPECT_EQ(distinct.size(), order.size());
    std::vector<int> next_row(pairs, 0);
    for (const auto& [row, pair] : order) {
      ASSERT_GE(pair, 0);
      ASSERT_LT(pair, pairs);
      // A pair's rows come in order (the ordered fused backward's key tile j after j - 1).
      EXPECT_EQ(row, next_row[pair]++) << "section " << section;
    }
  }
}

TEST(CudaTileOrder, OneSectionIsTheOrderOfAllHeadsTogether) {
  const auto order = replay(5, 12, 0);
  EXPECT_EQ(order, replay(5, 12, 12));
  EXPECT_EQ(order, replay(5, 12, 99));
  for (int index = 0; index < 60; ++index)
    EXPECT_EQ(order[index], std::make_pair(index / 12, index % 12));
}

TEST(CudaTileOrder, SectionsOnlyWhenTheHeadsOverflowTheBudgetAndAWaveHoldsFewOfEach) {
  EXPECT_EQ(tile_section(512, kMiB / 2, 32 * kMiB, 132), 64);  // FA3 grid S = 1k, d = 128
  EXPECT_EQ(tile_section(64, kMiB / 2, 32 * kMiB, 132), 64);   // fits
  EXPECT_EQ(tile_section(16, 4 * kMiB, 32 * kMiB, 132), 16);   // leaderboard: 8 tiles a head
  EXPECT_EQ(tile_section(16, 4 * kMiB, 32 * kMiB, 0), 8);      // the same without the rule
  EXPECT_EQ(tile_section(512, 64 * kMiB, 32 * kMiB, 132), 1);  // at least one pair
  EXPECT_EQ(tile_section(0, kMiB, 32 * kMiB, 132), 1);
  // The fused backward's rule at four tiles a head: the leaderboard and S = 16k (B 2) keep one
  // section, S = 8k (B 4, 64 heads) does not.
  EXPECT_EQ(tile_section(16, 4 * kMiB, 32 * kMiB, 132, 4), 16);
  EXPECT_EQ(tile_section(32, 4 * kMiB, 32 * kMiB, 132, 4), 32);
  EXPECT_EQ(tile_section(64, 2 * kMiB, 32 * kMiB, 132, 4), 16);
  EXPECT_EQ(tile_section(64, 2 * kMiB, 32 * kMiB, 132), 64);
}

// Blocks' totals under the persistent forward's snake, each tile costing its causal key tiles
// (row r from the end of m: m - r).
std::vector<long long> snake_loads(int tiles_per_pair, int pairs, const PersistentOrder& order) {
  const auto tiles = replay(tiles_per_pair, pairs, static_cast<int>(order.section));
  std::vector<long long> load(order.grid, 0);
  const long long g = order.grid;
  for (long long r = 0; r * g < static_cast<long long>(tiles.size()); ++r)
    for (long long x = 0; x < g; ++x) {
      const long long index = r * g + ((r & 1) ? g - 1 - x : x);
      if (index < static_cast<long long>(tiles.size()))
        load[x] += tiles_per_pair - tiles[index].first;
    }
  return load;
}

// FlashAttention-3's grid (B S = 32k, H 16) at both head dims, with the forward's tiles (d = 64:
// 192 query rows; d = 128: 128), and the leaderboard (B 1, H 16, S 16k).
TEST(CudaTileOrder, ThePersistentGridKeepsTheSnakeLevelAndTheSectionInTheBudget) {
  for (int d : {64, 128})
    for (long long S : {1024, 2048, 4096, 8192, 16384, 32768}) {
      // The d = 64 forward keeps the wave rule, the d = 128 one does not (configs.hpp).
      const long long wave = d == 64 ? kH200Sms : 0;
      const long long pairs = 16 * (32768 / S), rows = d == 64 ? 192 : 128;
      const int tiles_per_pair = static_cast<int>((S + rows - 1) / rows);
      const long long bytes = S * d * 4;
      const PersistentOrder order =
          persistent_order(tiles_per_pair, pairs, bytes, kBudget, kH200Sms, wave);
      SCOPED_TRACE("d " + std::to_string(d) + ", S " + std::to_string(S));
      EXPECT_GE(order.grid * 16, kH200Sms * 15);
      EXPECT_LE(order.grid, kH200Sms);
      if (order.section < pairs) {
        EXPECT_LE(order.section * bytes, kBudget);
      }
      const auto load = snake_loads(tiles_per_pair, static_cast<int>(pairs), order);
      const auto [lo, hi] = std::minmax_element(load.begin(), load.end());
      // Level to within one tile's keys: what the last, partly filled round leaves.
      EXPECT_LE(*hi - *lo, tiles_per_pair) << "loads " << *lo << ".." << *hi;
    }
}

TEST(CudaTileOrder, ShortSequencesGetSectionsThatFitInL2) {
  // S = 1k, B 32, H 16: 512 heads of 512 KB at d = 128 (query tiles of 128 rows, 8 per head).
  const PersistentOrder order = persistent_order(8, 512, 512 * 1024, kBudget, kH200Sms, kH200Sms);
  EXPECT_LT(order.section, 512);
  EXPECT_LE(order.section * 512 * 1024, kBudget);
  EXPECT_EQ(order.grid, kH200Sms);
  // The leaderboard keeps one section under the wave rule (the d = 64 forward's): a wave holds
  // eight tiles of each of its 16 heads.
  EXPECT_EQ(persistent_order(86, 16, 16384 * 64 * 4, kBudget, kH200Sms, kH200Sms).section, 16);
  // Without it (d = 128: 128-row tiles, 8 MB a head), sections in the budget on a grid where
  // each pair of rounds covers whole rows of a section.
  const PersistentOrder d128 = persistent_order(128, 16, 16384 * 128 * 4, kBudget, kH200Sms, 0);
  EXPECT_LT(d128.section, 16);
  EXPECT_LE(d128.section * 16384 * 128 * 4, kBudget);
  EXPECT_EQ((2 * d128.grid) % d128.section, 0);
  EXPECT_EQ(128 % (2 * d128.grid / d128.section), 0);
}

}  // namespace
}  // namespace flashref::cuda::kernels

// The sm90 forward's causal mask as bits (cuda/src/kernels/sm90/score_mask.hpp): the count of a
// thread's visible scores in a row must mark exactly the scores whose columns lie below the row's
// limit, for every place of the limit against the thread's columns. Host logic only.
#include <gtest/gtest.h>

#include "kernels/sm90/score_mask.hpp"

namespace flashref::cuda::kernels::sm90 {
namespace {

// The thread's k-th score in a row is column 8 (k / 2) + k % 2 past its first (the wgmma
// accumulator's layout); the compare the bits replaced.
bool visible_by_compare(int k, int room) {
  return 8 * (k / 2) + k % 2 < room;
}

TEST(ScoreMask, TheCountMarksExactlyTheScoresBelowTheLimit) {
  // Every room a tile can give a thread (its limit less its first column, past either end of a
  // 128-key tile included), every score of a row half (B_k / 4 <= 32).
  for (int room = -300; room <= 300; ++room)
    for (int k = 0; k < 32; ++k)
      ASSERT_EQ(k < visible_score_count(room), visible_by_compare(k, room))
          << "room " << room << ", score " << k;
}

TEST(ScoreMask, TheVisibleScoresAreAPrefix) {
  // What makes one shift the mask: along k the compare turns from visible to hidden once.
  for (int room = -20; room <= 140; ++room)
    for (int k = 1; k < 32; ++k)
      ASSERT_FALSE(visible_by_compare(k, room) && !visible_by_compare(k - 1, room))
          << "room " << room << ", score " << k;
}

TEST(ScoreMask, CountsAtTheEdges) {
  EXPECT_EQ(visible_score_count(-5), 0);  // a row that sees none of the thread's columns
  EXPECT_EQ(visible_score_count(0), 0);
  EXPECT_EQ(visible_score_count(1), 1);  // column 0 only
  EXPECT_EQ(visible_score_count(2), 2);  // columns 0 and 1
  EXPECT_EQ(visible_score_count(7), 2);  // columns 2..6 are other threads'
  EXPECT_EQ(visible_score_count(9), 3);
  EXPECT_EQ(visible_score_count(121), 31);
  EXPECT_EQ(visible_score_count(122), 32);    // every score of a 128-key row half
  EXPECT_EQ(visible_score_count(1000), 250);  // past 32: the shift takes all 32 bits
}

}  // namespace
}  // namespace flashref::cuda::kernels::sm90

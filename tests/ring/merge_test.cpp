// The merge's defined cases: a block whose row saw no key (L = -inf) contributes nothing, the
// first finite block is taken bit for bit, rows no block lets see a key end with O = 0 and
// L = -inf (the library's convention for a fully masked row), and the merge of two blocks
// equals attention over their union computed directly.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "flashref/error.hpp"
#include "flashref/merge.hpp"

namespace flashref {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// One batch, one head, `rows` rows of dim 2.
struct Rows2 {
  std::vector<float> O, L;
  explicit Rows2(std::int64_t rows)
      : O(static_cast<std::size_t>(rows) * 2), L(static_cast<std::size_t>(rows)) {}
  TensorView view() {
    return bshd_view(O.data(), DType::f32, 1, static_cast<std::int64_t>(L.size()), 1, 2);
  }
  MergeTarget target() { return MergeTarget{view(), L.data()}; }
};

TEST(Merge, ClearIsTheMergeOfNoBlock) {
  Rows2 acc(3);
  acc.O.assign(6, 7.0f);
  clear_merge(acc.target());
  for (float o : acc.O) EXPECT_EQ(o, 0.0f);
  for (float l : acc.L) EXPECT_EQ(l, kNegInf);
}

TEST(Merge, BlocksThatSawNoKeyContributeNothing) {
  Rows2 acc(2), part(2);
  clear_merge(acc.target());
  // Row 0: a finite block; row 1: no block sees a key.
  part.O = {0.25f, -1.5f, 0.0f, 0.0f};
  part.L = {0.75f, kNegInf};
  merge_into(acc.target(), part.view(), part.L.data());
  // The first finite block is taken exactly.
  EXPECT_EQ(acc.O[0], 0.25f);
  EXPECT_EQ(acc.O[1], -1.5f);
  EXPECT_EQ(acc.L[0], 0.75f);
  // Another block whose rows saw nothing changes no bit, whatever its O holds.
  Rows2 empty(2);
  empty.O = {std::nanf(""), 1e30f, std::nanf(""), 5.0f};
  empty.L = {kNegInf, kNegInf};
  merge_into(acc.target(), empty.view(), empty.L.data());
  EXPECT_EQ(acc.O[0], 0.25f);
  EXPECT_EQ(acc.O[1], -1.5f);
  EXPECT_EQ(acc.L[0], 0.75f);
  // Row 1 saw no key in any block: O = 0, L = -inf, never NaN.
  EXPECT_EQ(acc.O[2], 0.0f);
  EXPECT_EQ(acc.O[3], 0.0f);
  EXPECT_EQ(acc.L[1], kNegInf);
}

// Scores s = {1, 2} and {-0.5} over values v_j = (j, 1 - j): the merge of the two blocks'
// softmax results is the softmax over all three keys, computed here directly.
TEST(Merge, TwoBlocksGiveAttentionOverTheirUnion) {
  const double s[3] = {1.0, 2.0, -0.5};
  const double v[3][2] = {{0, 1}, {1, 0}, {2, -1}};
  auto block = [&](int first, int last, Rows2& out) {
    double l = 0, o0 = 0, o1 = 0;
    for (int j = first; j <= last; ++j) l += std::exp(s[j]);
    for (int j = first; j <= last; ++j) {
      o0 += std::exp(s[j]) / l * v[j][0];
      o1 += std::exp(s[j]) / l * v[j][1];
    }
    out.O = {static_cast<float>(o0), static_cast<float>(o1)};
    out.L = {static_cast<float>(std::log(l))};
  };
  Rows2 a(1), b(1), whole(1), acc(1);
  block(0, 1, a);
  block(2, 2, b);
  block(0, 2, whole);
  clear_merge(acc.target());
  merge_into(acc.target(), b.view(), b.L.data());
  merge_into(acc.target(), a.view(), a.L.data());
  const float u = std::numeric_limits<float>::epsilon();
  EXPECT_NEAR(acc.L[0], whole.L[0], 4 * u * std::fabs(whole.L[0]));
  EXPECT_NEAR(acc.O[0], whole.O[0], 4 * u);
  EXPECT_NEAR(acc.O[1], whole.O[1], 4 * u);
}

TEST(Merge, NanOrPlusInfinityInLPropagatesAsNan) {
  Rows2 acc(1), part(1);
  clear_merge(acc.target());
  part.O = {1.0f, 2.0f};
  part.L = {0.5f};
  merge_into(acc.target(), part.view(), part.L.data());
  part.L = {std::numeric_limits<float>::infinity()};
  merge_into(acc.target(), part.view(), part.L.data());
  EXPECT_TRUE(std::isnan(acc.O[0]) || std::isnan(acc.L[0]));
}

TEST(Merge, BadInputNamesTheField) {
  Rows2 acc(2), part(3);
  std::vector<std::uint16_t> half(4);
  MergeTarget wrong_dtype{bshd_view(half.data(), DType::bf16, 1, 2, 1, 2), acc.L.data()};
  try {
    clear_merge(wrong_dtype);
    FAIL() << "a bf16 accumulator was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.field(), "merge.O");
  }
  try {
    merge_into(acc.target(), part.view(), part.L.data());
    FAIL() << "a block of another shape was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.field(), "merge.O_part");
  }
  try {
    merge_into(acc.target(), acc.view(), nullptr);
    FAIL() << "a null L was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.field(), "merge.L_part");
  }
}

}  // namespace
}  // namespace flashref

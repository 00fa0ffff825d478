// Partial attention's mask: a placed block's rows see exactly the keys of the block that the
// same rows see in the whole problem, for every mask and any placement; bad placements are
// refused naming the field.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>

#include "flashref/error.hpp"
#include "flashref/params.hpp"

namespace flashref {
namespace {

RC_GTEST_PROP(Placement, BlockMaskIsTheWholeProblemsMaskAtGlobalPositions, ()) {
  const std::int64_t S_q = *rc::gen::inRange<std::int64_t>(1, 40);
  const std::int64_t S_k = *rc::gen::inRange<std::int64_t>(1, 40);
  const Mask mask = *rc::gen::element(Mask::none, Mask::causal_top_left, Mask::causal_bottom_right);
  const Problem whole = make_problem(1, 1, 1, S_q, S_k, 8, mask);
  const std::int64_t q0 = *rc::gen::inRange<std::int64_t>(0, S_q);
  const std::int64_t k0 = *rc::gen::inRange<std::int64_t>(0, S_k);
  Problem block = whole;
  block.S_q = *rc::gen::inRange<std::int64_t>(1, S_q - q0 + 1);
  block.S_k = *rc::gen::inRange<std::int64_t>(1, S_k - k0 + 1);
  block.placement = Placement{q0, k0, S_q, S_k};
  validate(block);
  for (std::int64_t q = 0; q < block.S_q; ++q) {
    const std::int64_t last = block.last_visible_key(q);
    RC_ASSERT(last <= block.S_k - 1);
    for (std::int64_t k = 0; k < block.S_k; ++k) {
      const bool whole_sees = k0 + k <= whole.last_visible_key(q0 + q);
      RC_ASSERT(whole_sees == (k <= last));
    }
  }
}

TEST(Placement, DefaultIsWholeAndChangesNothing) {
  const Problem p = make_problem(1, 1, 1, 5, 3, 8, Mask::causal_bottom_right);
  EXPECT_FALSE(p.placement.placed());
  EXPECT_EQ(p.last_visible_key(0), -2);
  EXPECT_EQ(p.last_visible_key(4), 2);
}

void expect_refused(Placement at, const std::string& field) {
  Problem p = make_problem(1, 1, 1, 4, 4, 8, Mask::causal_top_left);
  p.placement = at;
  try {
    validate(p);
    FAIL() << "placement accepted; expected an error on " << field;
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.field(), field) << e.what();
  }
}

TEST(Placement, BlocksOutsideTheLargerProblemAreRefused) {
  expect_refused(Placement{-1, 0, 10, 10}, "problem.placement.q_offset");
  expect_refused(Placement{0, -2, 10, 10}, "problem.placement.k_offset");
  expect_refused(Placement{7, 0, 10, 10}, "problem.placement.S_q_total");
  expect_refused(Placement{0, 0, 10, 3}, "problem.placement.S_k_total");
}

}  // namespace
}  // namespace flashref

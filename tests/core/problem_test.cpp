// Problem: masks and their visible keys, parse_mask, make_problem, FLOP counts, describe.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "flashref/error.hpp"
#include "flashref/problem.hpp"

namespace flashref {
namespace {

// Whether query q sees key k, straight from the definitions of Mask (flashref/problem.hpp).
bool visible(Mask mask, std::int64_t q, std::int64_t k, std::int64_t S_q, std::int64_t S_k) {
  switch (mask) {
    case Mask::none:
      return true;
    case Mask::causal_top_left:
      return k <= q;
    case Mask::causal_bottom_right:
      return k <= q + S_k - S_q;
  }
  return false;
}

// last_visible_key(q) is the largest visible key, negative when the row sees none; every key
// below it is visible too (the visible keys are a prefix).
TEST(Problem, LastVisibleKeyMatchesTheMaskDefinitions) {
  for (Mask mask : {Mask::none, Mask::causal_top_left, Mask::causal_bottom_right}) {
    for (std::int64_t S_q = 1; S_q <= 9; ++S_q) {
      for (std::int64_t S_k = 1; S_k <= 9; ++S_k) {
        Problem p = make_problem(1, 1, 1, S_q, S_k, 8, mask);
        for (std::int64_t q = 0; q < S_q; ++q) {
          std::int64_t last = -1;
          for (std::int64_t k = 0; k < S_k; ++k) {
            if (visible(mask, q, k, S_q, S_k)) last = k;
          }
          const std::int64_t got = p.last_visible_key(q);
          SCOPED_TRACE(describe(p) + " q=" + std::to_string(q));
          if (last < 0) {
            EXPECT_LT(got, 0);
          } else {
            EXPECT_EQ(got, last);
          }
          for (std::int64_t k = 0; k < S_k; ++k) EXPECT_EQ(k <= got, visible(mask, q, k, S_q, S_k));
        }
      }
    }
  }
}

TEST(Problem, MasksDifferOnlyWhenLengthsDiffer) {
  const Problem square_tl = make_problem(1, 1, 1, 5, 5, 4, Mask::causal_top_left);
  const Problem square_br = make_problem(1, 1, 1, 5, 5, 4, Mask::causal_bottom_right);
  for (std::int64_t q = 0; q < 5; ++q)
    EXPECT_EQ(square_tl.last_visible_key(q), square_br.last_visible_key(q));
  // S_q > S_k: bottom-right leaves the first S_q - S_k rows with no key; top-left does not.
  const Problem tall_tl = make_problem(1, 1, 1, 6, 2, 4, Mask::causal_top_left);
  const Problem tall_br = make_problem(1, 1, 1, 6, 2, 4, Mask::causal_bottom_right);
  EXPECT_EQ(tall_tl.last_visible_key(0), 0);
  EXPECT_LT(tall_br.last_visible_key(3), 0);
  EXPECT_EQ(tall_br.last_visible_key(4), 0);
  EXPECT_EQ(tall_br.last_visible_key(5), 1);
}

TEST(Problem, ParseMaskSpellingsAndNames) {
  for (Mask m : {Mask::none, Mask::causal_top_left, Mask::causal_bottom_right}) {
    EXPECT_EQ(parse_mask(mask_name(m)), m);
  }
  EXPECT_EQ(parse_mask("causal-top-left"), Mask::causal_top_left);
  EXPECT_EQ(parse_mask("causal_top_left"), Mask::causal_top_left);
  EXPECT_EQ(parse_mask("causal_bottom_right"), Mask::causal_bottom_right);
}

TEST(Problem, ParseMaskErrorNamesTheFieldTheValueAndTheChoices) {
  for (const char* bad : {"causal-br", "", "Causal"}) {
    try {
      parse_mask(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const InvalidArgument& e) {
      EXPECT_EQ(e.field(), "--mask");
      const std::string what = e.what();
      EXPECT_NE(what.find("'" + std::string(bad) + "'"), std::string::npos) << what;
      for (const char* choice : {"none", "causal", "causal-bottom-right"}) {
        EXPECT_NE(what.find(choice), std::string::npos) << what;
      }
    }
  }
}

TEST(Problem, MakeProblemDefaults) {
  const Problem p = make_problem(2, 8, 2, 100, 37, 48, Mask::causal_bottom_right, DType::bf16);
  EXPECT_EQ(p.B, 2);
  EXPECT_EQ(p.H, 8);
  EXPECT_EQ(p.H_kv, 2);
  EXPECT_EQ(p.S_q, 100);
  EXPECT_EQ(p.S_k, 37);
  EXPECT_EQ(p.d, 48);
  EXPECT_EQ(p.scale, 1.0 / std::sqrt(48.0));
  EXPECT_EQ(p.scale, default_scale(48));
  EXPECT_EQ(p.mask, Mask::causal_bottom_right);
  EXPECT_EQ(p.dtype, DType::bf16);
  EXPECT_EQ(p.grad_dtype, DType::bf16);
  EXPECT_EQ(p.group_size(), 4);
  EXPECT_TRUE(p.is_causal());
  EXPECT_FALSE(make_problem(1, 1, 1, 1, 1, 1).is_causal());
}

// FlashAttention's benchmark convention: two matmuls of 2*S_q*S_k*d FLOPs per head forward,
// half of it under a causal mask, and 2.5 times the forward for the backward.
TEST(Problem, FlopCounts) {
  const std::int64_t B = 2, H = 3, S_q = 5, S_k = 7, d = 11;
  const double matmul = 2.0 * S_q * S_k * d;
  const Problem full = make_problem(B, H, 1, S_q, S_k, d, Mask::none);
  EXPECT_EQ(forward_flops(full), B * H * 2 * matmul);
  EXPECT_EQ(backward_flops(full), 2.5 * forward_flops(full));
  for (Mask m : {Mask::causal_top_left, Mask::causal_bottom_right}) {
    const Problem causal = make_problem(B, H, 1, S_q, S_k, d, m);
    EXPECT_EQ(forward_flops(causal), forward_flops(full) / 2);
    EXPECT_EQ(backward_flops(causal), 2.5 * forward_flops(causal));
  }
}

TEST(Problem, DescribeNamesEveryField) {
  Problem p = make_problem(2, 4, 2, 300, 301, 64, Mask::causal_top_left, DType::bf16);
  p.grad_dtype = DType::f32;
  const std::string s = describe(p);
  for (const char* part : {"B=2", "H=4", "H_kv=2", "S_q=300", "S_k=301", "d=64", "mask=causal",
                           "dtype=bf16", "grad_dtype=f32", "scale=0.125"}) {
    EXPECT_NE(s.find(part), std::string::npos) << s << " lacks " << part;
  }
  EXPECT_EQ(describe(make_problem(1, 1, 1, 1, 1, 4)).find("grad_dtype"), std::string::npos);
}

}  // namespace
}  // namespace flashref

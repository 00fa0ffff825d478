// The gold forward: against a direct evaluation of the attention formula, fully masked rows,
// large inputs, and independence from layout and thread count.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "attention_data.hpp"
#include "flashref/error.hpp"
#include "flashref/reference/gold.hpp"

namespace flashref {
namespace {

using reference::gold_backward;
using reference::gold_forward;
using test::AttentionData;
using test::Layout;

std::size_t at(std::int64_t i) {
  return static_cast<std::size_t>(i);
}
constexpr double kInf = std::numeric_limits<double>::infinity();

struct DirectCase {
  const char* name;
  Mask mask;
  double scale;  // 0: default
};

class GoldDirect : public ::testing::TestWithParam<DirectCase> {};

// O_i = sum_j exp(s_ij) V_j / sum_j exp(s_ij) and L_i = log sum_j exp(s_ij) over visible j,
// evaluated straight from the formula: no max subtraction (the inputs are small), the raw
// float16 bits read with hand-written (B, H, S, d) index arithmetic instead of the views.
TEST_P(GoldDirect, MatchesTheFormulaEvaluatedDirectly) {
  const DirectCase& dc = GetParam();
  Problem p = make_problem(2, 4, 2, 7, 5, 6, dc.mask, DType::f16);
  if (dc.scale != 0) p.scale = dc.scale;
  const AttentionData data = test::random_data(p, Layout::bhsd, 99);
  const reference::GoldForward gold = gold_forward(data.forward_params());

  auto element = [](const test::HostTensor& t, std::int64_t heads, std::int64_t S, std::int64_t b,
                    std::int64_t h, std::int64_t s, std::int64_t c) {
    const auto* bits = reinterpret_cast<const std::uint16_t*>(t.storage.data());
    return static_cast<double>(f16_bits_to_float(bits[((b * heads + h) * S + s) * 6 + c]));
  };
  for (std::int64_t b = 0; b < p.B; ++b) {
    for (std::int64_t h = 0; h < p.H; ++h) {
      const std::int64_t h_kv = h / (p.H / p.H_kv);
      for (std::int64_t i = 0; i < p.S_q; ++i) {
        double sum_w = 0, max_s = -kInf, O[6] = {};
        for (std::int64_t j = 0; j < p.S_k; ++j) {
          const bool visible = dc.mask == Mask::none ||
                               (dc.mask == Mask::causal_top_left && j <= i) ||
                               (dc.mask == Mask::causal_bottom_right && j <= i + p.S_k - p.S_q);
          if (!visible) continue;
          double s = 0;
          for (std::int64_t c = 0; c < p.d; ++c) {
            s += element(data.q, p.H, p.S_q, b, h, i, c) *
                 element(data.k, p.H_kv, p.S_k, b, h_kv, j, c);
          }
          s *= p.scale;
          const double w = std::exp(s);
          sum_w += w;
          max_s = std::max(max_s, s);
          for (std::int64_t c = 0; c < p.d; ++c)
            O[c] += w * element(data.v, p.H_kv, p.S_k, b, h_kv, j, c);
        }
        const std::size_t B_ = at(b), H_ = at(h), I_ = at(i);
        if (sum_w == 0) {  // no visible key: bottom-right with S_q > S_k, rows 0 and 1
          EXPECT_EQ(gold.L(B_, H_, I_), -kInf);
          for (std::int64_t c = 0; c < p.d; ++c) EXPECT_EQ(gold.O(B_, H_, I_, at(c)), 0.0);
          continue;
        }
        for (std::int64_t c = 0; c < p.d; ++c) {
          EXPECT_NEAR(gold.O(B_, H_, I_, at(c)), O[c] / sum_w, 1e-14) << b << h << i << c;
        }
        EXPECT_NEAR(gold.L(B_, H_, I_), std::log(sum_w), 1e-14);
        EXPECT_NEAR(gold.m(B_, H_, I_), max_s, 1e-14);
        EXPECT_NEAR(gold.l(B_, H_, I_), sum_w / std::exp(max_s), 1e-13);
        EXPECT_GE(gold.l(B_, H_, I_), 1.0);  // the max term contributes exp(0)
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Masks, GoldDirect,
    ::testing::Values(DirectCase{"none", Mask::none, 0}, DirectCase{"none_scale1", Mask::none, 1.0},
                      DirectCase{"top_left", Mask::causal_top_left, 0},
                      DirectCase{"bottom_right", Mask::causal_bottom_right, 0}),
    [](const auto& info) { return std::string(info.param.name); });

// Bottom-right with S_q > S_k: the first S_q - S_k rows see no key. O = 0, L = m = -inf,
// l = 0, zero dQ; nothing anywhere is NaN.
TEST(GoldMaskedRows, FullyMaskedRowsAreZeroWithMinusInfinityL) {
  const Problem p = make_problem(2, 2, 1, 9, 4, 5, Mask::causal_bottom_right, DType::bf16);
  const AttentionData data = test::random_data(p, Layout::bshd, 3);
  const reference::GoldForward fwd = gold_forward(data.forward_params());
  const reference::GoldBackward bwd = gold_backward(data.backward_params());
  int masked_rows = 0;
  for (std::size_t b = 0; b < 2; ++b) {
    for (std::size_t h = 0; h < 2; ++h) {
      for (std::int64_t i = 0; i < p.S_q; ++i) {
        const std::size_t I = at(i);
        if (p.last_visible_key(i) < 0) {
          ++masked_rows;
          EXPECT_EQ(fwd.L(b, h, I), -kInf);
          EXPECT_EQ(fwd.m(b, h, I), -kInf);
          EXPECT_EQ(fwd.l(b, h, I), 0.0);
          for (std::size_t c = 0; c < 5; ++c) {
            EXPECT_EQ(fwd.O(b, h, I, c), 0.0);
            EXPECT_EQ(bwd.dQ(b, h, I, c), 0.0);
          }
        } else {
          EXPECT_TRUE(std::isfinite(fwd.L(b, h, I)));
        }
      }
    }
  }
  EXPECT_EQ(masked_rows, 2 * 2 * 5);
  for (const auto* t : {&fwd.O, &bwd.dQ, &bwd.dK, &bwd.dV}) {
    for (double x : *t) ASSERT_TRUE(std::isfinite(x));
  }
}

// Inputs of magnitude ~1000 give scores ~1e6: exp would overflow without the max subtraction.
// O rows stay in the convex hull of the visible V rows, and m <= L <= m + log(#visible).
TEST(GoldLargeInputs, NoOverflowAndOInTheConvexHullOfV) {
  const Problem p = make_problem(1, 2, 2, 6, 8, 4, Mask::causal_top_left);
  const AttentionData data = test::random_data(p, Layout::bshd, 8, 1000.0f);
  const reference::GoldForward fwd = gold_forward(data.forward_params());
  const reference::GoldBackward bwd = gold_backward(data.backward_params());
  for (std::int64_t h = 0; h < p.H; ++h) {
    for (std::int64_t i = 0; i < p.S_q; ++i) {
      const double m = fwd.m(0, at(h), at(i)), L = fwd.L(0, at(h), at(i));
      const std::int64_t visible = p.last_visible_key(i) + 1;
      EXPECT_GT(std::fabs(m), 1e3) << "the test should produce large scores";
      EXPECT_GE(L, m);
      EXPECT_LE(L, m + std::log(static_cast<double>(visible)) * (1 + 1e-15));
      for (std::int64_t c = 0; c < p.d; ++c) {
        double lo = kInf, hi = -kInf;
        for (std::int64_t j = 0; j < visible; ++j) {
          lo = std::min<double>(lo, data.v.view.load(0, j, h, c));
          hi = std::max<double>(hi, data.v.view.load(0, j, h, c));
        }
        const double o = fwd.O(0, at(h), at(i), at(c));
        EXPECT_GE(o, lo - 1e-12 * std::fabs(lo));
        EXPECT_LE(o, hi + 1e-12 * std::fabs(hi));
      }
    }
  }
  for (const auto* t : {&bwd.dQ, &bwd.dK, &bwd.dV}) {
    for (double x : *t) ASSERT_TRUE(std::isfinite(x));
  }
}

// The same values in every layout (and with padding between rows) give bit-identical gold
// results: the inputs are read through the views and then computed in one canonical order.
TEST(GoldLayouts, EveryLayoutGivesIdenticalResults) {
  const Problem p = make_problem(2, 4, 2, 11, 7, 6, Mask::causal_bottom_right, DType::bf16);
  const AttentionData reference_data = test::random_data(p, Layout::bshd, 17);
  const reference::GoldForward f0 = gold_forward(reference_data.forward_params());
  const reference::GoldBackward b0 = gold_backward(reference_data.backward_params());
  for (Layout layout : {Layout::bhsd, Layout::padded}) {
    const AttentionData data = test::random_data(p, layout, 17);
    const reference::GoldForward f = gold_forward(data.forward_params());
    const reference::GoldBackward b = gold_backward(data.backward_params());
    EXPECT_TRUE(test::identical(f.O, f0.O));
    EXPECT_TRUE(test::identical(f.L, f0.L));
    EXPECT_TRUE(test::identical(b.dQ, b0.dQ));
    EXPECT_TRUE(test::identical(b.dK, b0.dK));
    EXPECT_TRUE(test::identical(b.dV, b0.dV));
  }
  // The course's (B, S, d) layout is (B, S, H, d) with one head.
  const Problem one_head = make_problem(3, 1, 1, 10, 10, 8, Mask::causal_top_left);
  const AttentionData bshd = test::random_data(one_head, Layout::bshd, 4);
  const AttentionData bsd = test::random_data(one_head, Layout::bsd, 4);
  EXPECT_TRUE(
      test::identical(gold_forward(bsd.forward_params()).O, gold_forward(bshd.forward_params()).O));
  EXPECT_TRUE(test::identical(gold_backward(bsd.backward_params()).dK,
                              gold_backward(bshd.backward_params()).dK));
}

TEST(GoldThreads, ResultsDoNotDependOnTheThreadCount) {
  const Problem p = make_problem(2, 6, 3, 13, 9, 7, Mask::causal_top_left);
  AttentionData data = test::random_data(p, Layout::bshd, 21);
  data.options.num_threads = 1;
  const reference::GoldForward f1 = gold_forward(data.forward_params());
  const reference::GoldBackward b1 = gold_backward(data.backward_params());
  data.options.num_threads = 3;
  const reference::GoldForward f3 = gold_forward(data.forward_params());
  const reference::GoldBackward b3 = gold_backward(data.backward_params());
  EXPECT_TRUE(test::identical(f1.O, f3.O));
  EXPECT_TRUE(test::identical(f1.L, f3.L));
  EXPECT_TRUE(test::identical(b1.dQ, b3.dQ));
  EXPECT_TRUE(test::identical(b1.dK, b3.dK));
  EXPECT_TRUE(test::identical(b1.dV, b3.dV));
}

// The gold reads only the inputs, so it needs no output buffers; bad inputs get the shared
// validation's errors.
TEST(GoldValidation, ChecksInputsAndIgnoresOutputs) {
  const Problem p = make_problem(1, 2, 1, 3, 4, 8);
  const AttentionData data = test::random_data(p, Layout::bshd, 1);
  ForwardParams f = data.forward_params();
  f.o = TensorView{};
  f.lse = nullptr;
  EXPECT_NO_THROW(gold_forward(f));
  f.k.heads = 2;
  try {
    gold_forward(f);
    ADD_FAILURE() << "accepted K with 2 heads for H_kv = 1";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.field(), "params.k");
  }
  BackwardParams b = data.backward_params();
  b.dq = b.dk = b.dv = TensorView{};
  EXPECT_NO_THROW(gold_backward(b));
  b.dO.data = nullptr;
  try {
    gold_backward(b);
    ADD_FAILURE() << "accepted a null dO";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.field(), "params.dO");
  }
  f = data.forward_params();
  f.problem.scale = std::nan("");
  EXPECT_THROW(gold_forward(f), InvalidArgument);
}

}  // namespace
}  // namespace flashref

// The gold on inputs given as doubles (the path of flashref.attention on float64 tensors, which
// torch.autograd.gradcheck perturbs by amounts no storage dtype holds): the same numbers as the
// views' path on the same values, the inputs read exactly, and shapes checked.
#include <gtest/gtest.h>

#include <cstdint>

#include "attention_data.hpp"
#include "flashref/error.hpp"
#include "flashref/reference/gold.hpp"

namespace flashref {
namespace {

using test::AttentionData;
using test::Layout;

// The view's values as a canonical (B, H, S, d) double array.
xt::xtensor<double, 4> values(const TensorView& v) {
  xt::xtensor<double, 4> out(std::array<std::size_t, 4>{static_cast<std::size_t>(v.batch),
                                                        static_cast<std::size_t>(v.heads),
                                                        static_cast<std::size_t>(v.seq),
                                                        static_cast<std::size_t>(v.dim)});
  for (std::int64_t b = 0; b < v.batch; ++b)
    for (std::int64_t h = 0; h < v.heads; ++h)
      for (std::int64_t s = 0; s < v.seq; ++s)
        for (std::int64_t i = 0; i < v.dim; ++i)
          out(static_cast<std::size_t>(b), static_cast<std::size_t>(h), static_cast<std::size_t>(s),
              static_cast<std::size_t>(i)) = v.load(b, s, h, i);
  return out;
}

TEST(GoldDoubleInputs, EqualsTheViewsPathOnTheSameValues) {
  for (Mask mask : {Mask::none, Mask::causal_top_left, Mask::causal_bottom_right}) {
    const Problem p = make_problem(2, 4, 2, 9, 6, 5, mask, DType::f32);
    const AttentionData data = test::random_data(p, Layout::bshd, 5);
    const auto Q = values(data.q.view), K = values(data.k.view), V = values(data.v.view),
               dO = values(data.dO.view);
    const reference::GoldForward by_view = reference::gold_forward(data.forward_params());
    const reference::GoldForward by_value = reference::gold_forward(p, Q, K, V);
    EXPECT_EQ(by_view.O, by_value.O) << mask_name(mask);
    EXPECT_EQ(by_view.L, by_value.L) << mask_name(mask);
    const reference::GoldBackward grad_view = reference::gold_backward(data.backward_params());
    const reference::GoldBackward grad_value = reference::gold_backward(p, Q, K, V, dO);
    EXPECT_EQ(grad_view.dQ, grad_value.dQ) << mask_name(mask);
    EXPECT_EQ(grad_view.dK, grad_value.dK) << mask_name(mask);
    EXPECT_EQ(grad_view.dV, grad_value.dV) << mask_name(mask);
  }
}

TEST(GoldDoubleInputs, ReadsTheInputsExactly) {
  const Problem p = make_problem(1, 1, 1, 3, 4, 2, Mask::none, DType::f32);
  const AttentionData data = test::random_data(p, Layout::bhsd, 6);
  const auto Q = values(data.q.view), K = values(data.k.view), V = values(data.v.view);
  // A step far below float32's resolution at 1 still moves O: nothing rounds the inputs.
  auto V2 = V;
  V2(0, 0, 1, 0) += 1e-12;
  const reference::GoldForward a = reference::gold_forward(p, Q, K, V);
  const reference::GoldForward b = reference::gold_forward(p, Q, K, V2);
  EXPECT_NE(a.O(0, 0, 0, 0), b.O(0, 0, 0, 0));
  EXPECT_EQ(a.O(0, 0, 0, 1), b.O(0, 0, 0, 1));
}

TEST(GoldDoubleInputs, RefusesShapesThatDoNotFitTheProblem) {
  const Problem p = make_problem(1, 2, 1, 3, 4, 2, Mask::none, DType::f32);
  const AttentionData data = test::random_data(p, Layout::bhsd, 7);
  const auto Q = values(data.q.view), K = values(data.k.view), V = values(data.v.view);
  try {
    reference::gold_forward(p, Q, Q, V);
    FAIL() << "K of Q's shape was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.field(), "K");
  }
  try {
    reference::gold_backward(p, Q, K, V, K);
    FAIL() << "dO of K's shape was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.field(), "dO");
  }
}

}  // namespace
}  // namespace flashref

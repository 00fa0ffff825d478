// The baseline ("reference" backend) against the gold: errors of the size its precision
// implies. Too large means a bug; too small for 16-bit dtypes means it skipped the rounding
// of P, dS or the outputs that it exists to model.
#include <gtest/gtest.h>

#include <string>
#include <tuple>

#include "attention_data.hpp"
#include "flashref/reference/backend.hpp"
#include "flashref/reference/gold.hpp"

namespace flashref {
namespace {

using test::AttentionData;
using test::Layout;

// Bounds on the relative L2 error of O, dQ, dK, dV against the gold, per dtype. The unit
// roundoff u is 2^-24 (f32), 2^-11 (f16), 2^-8 (bf16); rounding P (or dS) and the output each
// add about u / sqrt(3) relative RMS error, so the errors sit near u and the bounds leave 5-8x
// of room. The lower bounds are far above float32 rounding (~1e-7): they prove the 16-bit
// roundings happen.
struct Expected {
  DType dtype;
  double upper;
  double lower;
};
const Expected kExpected[] = {
    {DType::f32, 1e-5, 0.0}, {DType::f16, 2e-3, 5e-5}, {DType::bf16, 2e-2, 4e-4}};

// L is computed in float32 from the inputs as stored, the same inputs the gold reads, so its
// error is float32 rounding for every dtype: |L| is a few units, eps_f32 * |L| ~ 1e-6.
constexpr double kLMaxAbs = 1e-5;

class BaselineAccuracy : public ::testing::TestWithParam<std::tuple<Expected, Mask>> {};

TEST_P(BaselineAccuracy, ErrorsAgainstTheGoldHaveTheExpectedSize) {
  const auto [expected, mask] = GetParam();
  const Problem p = make_problem(2, 4, 2, 67, 45, 40, mask, expected.dtype);
  AttentionData data = test::random_data(p, Layout::bshd, 2024);
  const auto backend = reference::make_backend();
  backend->forward(data.forward_params());
  backend->backward(data.backward_params());
  const reference::GoldForward gold_fwd = reference::gold_forward(data.forward_params());
  const reference::GoldBackward gold_bwd = reference::gold_backward(data.backward_params());

  struct Tensor {
    const char* name;
    xt::xtensor<double, 4> candidate;
    const xt::xtensor<double, 4>& gold;
  };
  const Tensor tensors[] = {{"O", test::to_bhsd(data.o.view), gold_fwd.O},
                            {"dQ", test::to_bhsd(data.dq.view), gold_bwd.dQ},
                            {"dK", test::to_bhsd(data.dk.view), gold_bwd.dK},
                            {"dV", test::to_bhsd(data.dv.view), gold_bwd.dV}};
  for (const Tensor& t : tensors) {
    const double error = test::relative_l2(t.candidate, t.gold);
    EXPECT_LT(error, expected.upper) << t.name;
    EXPECT_GT(error, expected.lower) << t.name;
    RecordProperty(std::string(t.name) + "_relative_l2", test::scientific(error));
  }
  const xt::xtensor<double, 3> L = test::lse_tensor(data);
  EXPECT_LT(test::max_abs_error(L, gold_fwd.L), kLMaxAbs);
  // -inf exactly where the gold has it, and only there.
  for (std::size_t i = 0; i < L.size(); ++i) {
    EXPECT_EQ(std::isinf(L.flat(i)), std::isinf(gold_fwd.L.flat(i))) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(DtypesAndMasks, BaselineAccuracy,
                         ::testing::Combine(::testing::ValuesIn(kExpected),
                                            ::testing::Values(Mask::none, Mask::causal_top_left,
                                                              Mask::causal_bottom_right)),
                         [](const auto& info) {
                           return std::string(dtype_name(std::get<0>(info.param).dtype)) + "_" +
                                  (std::get<1>(info.param) == Mask::none ? "none"
                                   : std::get<1>(info.param) == Mask::causal_top_left
                                       ? "top_left"
                                       : "bottom_right");
                         });

// grad_dtype only decides how the finished float32 gradients are stored: bf16 gradients are
// exactly the float32 ones rounded to bf16, element by element.
TEST(BaselineGradDtype, GradientsAreRoundedOnlyOnStore) {
  Problem p = make_problem(1, 4, 2, 33, 20, 16, Mask::causal_top_left, DType::bf16);
  AttentionData bf16_grads = test::random_data(p, Layout::bshd, 5);
  p.grad_dtype = DType::f32;
  AttentionData f32_grads = test::random_data(p, Layout::bshd, 5);
  const auto backend = reference::make_backend();
  for (AttentionData* data : {&bf16_grads, &f32_grads}) {
    backend->forward(data->forward_params());  // the O and L the backward reads
    backend->backward(data->backward_params());
  }
  for (auto member : {&AttentionData::dq, &AttentionData::dk, &AttentionData::dv}) {
    const TensorView& rounded = (bf16_grads.*member).view;
    const TensorView& exact = (f32_grads.*member).view;
    (bf16_grads.*member).for_each([&](auto b, auto s, auto h, auto c) {
      ASSERT_EQ(rounded.load(b, s, h, c), round_to(DType::bf16, exact.load(b, s, h, c)));
    });
  }
  const reference::GoldBackward gold = reference::gold_backward(f32_grads.backward_params());
  const double error = test::relative_l2(test::to_bhsd(f32_grads.dq.view), gold.dQ);
  EXPECT_LT(error, 2e-2);
  EXPECT_GT(error, 4e-4);  // dS is still rounded to bf16 before dQ = dS K
}

}  // namespace
}  // namespace flashref

// The baseline's exact definition, checked bit for bit on a small problem: the test spells out
// every rounding the backend header promises, in plain scalar float32 code, and the backend
// must produce exactly those bits. This pins down "P rounded to the input dtype before P V",
// the backward's D from the stored O and P from the stored L, "dS rounded before dS K and
// dS^T Q", and where the outputs are rounded.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <string>
#include <vector>

#include "attention_data.hpp"
#include "flashref/reference/backend.hpp"
#include "flashref/reference/gold.hpp"

namespace flashref {
namespace {

using test::AttentionData;
using test::Layout;

class BaselineSpec : public ::testing::TestWithParam<DType> {};

TEST_P(BaselineSpec, MatchesTheDocumentedRoundingsBitForBit) {
  const DType t = GetParam();
  const Problem p = make_problem(1, 1, 1, 4, 6, 5, Mask::causal_bottom_right, t);
  AttentionData data = test::random_data(p, Layout::bshd, 8);
  const auto backend = reference::make_backend();
  backend->forward(data.forward_params());
  backend->backward(data.backward_params());

  const int S_q = 4, S_k = 6, d = 5;
  auto Q = [&](int i, int c) { return data.q.view.load(0, i, 0, c); };
  auto K = [&](int j, int c) { return data.k.view.load(0, j, 0, c); };
  auto V = [&](int j, int c) { return data.v.view.load(0, j, 0, c); };
  auto dO = [&](int i, int c) { return data.dO.view.load(0, i, 0, c); };
  const float scale = static_cast<float>(p.scale);

  // Forward, row by row, for the keys j <= i + S_k - S_q that the row sees.
  std::vector<std::vector<float>> S(S_q, std::vector<float>(S_k, -INFINITY));
  for (int i = 0; i < S_q; ++i) {
    const int visible = i + S_k - S_q + 1;
    std::vector<float> P(S_k, 0.0f);
    float m = -INFINITY;
    for (int j = 0; j < visible; ++j) {
      float dot = 0;
      for (int c = 0; c < d; ++c) dot += Q(i, c) * K(j, c);
      S[i][j] = scale * dot;
      m = std::max(m, S[i][j]);
    }
    float l = 0;
    for (int j = 0; j < visible; ++j) l += std::exp(S[i][j] - m);
    for (int j = 0; j < visible; ++j) P[j] = std::exp(S[i][j] - m) / l;
    for (int c = 0; c < d; ++c) {
      float O = 0;
      for (int j = 0; j < S_k; ++j) O += round_to(t, P[j]) * V(j, c);  // P in the input dtype
      EXPECT_EQ(data.o.view.load(0, i, 0, c), round_to(t, O)) << "O(" << i << ", " << c << ")";
    }
    EXPECT_EQ(data.lse[static_cast<std::size_t>(i)], m + std::log(l)) << "L(" << i << ")";
  }

  // Backward, eq. (13)-(17) from what the forward stored: D = dO . O with O in the input dtype,
  // P = exp(S - L) with the float32 L, dP = dO V^T, dS = P * (dP - D) from the unrounded P.
  std::vector<std::vector<float>> P(S_q, std::vector<float>(S_k)), dS(S_q, std::vector<float>(S_k));
  for (int i = 0; i < S_q; ++i) {
    float D = 0;
    for (int c = 0; c < d; ++c) D += dO(i, c) * data.o.view.load(0, i, 0, c);
    const float L = data.lse[static_cast<std::size_t>(i)];
    for (int j = 0; j < S_k; ++j) {
      P[i][j] = std::exp(S[i][j] - L);  // 0 for a masked key (S = -inf)
      float dP = 0;
      for (int c = 0; c < d; ++c) dP += dO(i, c) * V(j, c);
      dS[i][j] = round_to(t, P[i][j] * (dP - D));
    }
  }
  for (int c = 0; c < d; ++c) {
    for (int i = 0; i < S_q; ++i) {  // dQ = scale * dS K
      float dQ = 0;
      for (int j = 0; j < S_k; ++j) dQ += dS[i][j] * K(j, c);
      EXPECT_EQ(data.dq.view.load(0, i, 0, c), round_to(t, dQ * scale))
          << "dQ(" << i << ", " << c << ")";
    }
    for (int j = 0; j < S_k; ++j) {  // dK = scale * dS^T Q, dV = P^T dO with P in the input dtype
      float dK = 0, dV = 0;
      for (int i = 0; i < S_q; ++i) {
        dK += dS[i][j] * Q(i, c);
        dV += round_to(t, P[i][j]) * dO(i, c);
      }
      EXPECT_EQ(data.dk.view.load(0, j, 0, c), round_to(t, dK * scale))
          << "dK(" << j << ", " << c << ")";
      EXPECT_EQ(data.dv.view.load(0, j, 0, c), round_to(t, dV)) << "dV(" << j << ", " << c << ")";
    }
  }
}

// Top-left causal: query row 0 sees key 0 only, so P_00 = 1 and dS_00 = dP_00 - D_0 = 0 in
// exact arithmetic (D_0 = dO_0 . O_0 = dO_0 . V_0 = dP_00), and dQ_0 = 0. The baseline gets
// exactly 0 too: L_0 = S_00 makes P_00 = exp(0) = 1, O_0 = V_0 is stored exactly, and D is
// summed in the order dP is. Large scores (|S| ~ 100) must not disturb it.
TEST_P(BaselineSpec, ARowThatSeesOneKeyHasExactlyZeroDq) {
  const DType t = GetParam();
  const Problem p = make_problem(1, 2, 1, 7, 7, 12, Mask::causal_top_left, t);
  for (const float magnitude : {1.0f, 10.0f}) {
    AttentionData data = test::random_data(p, Layout::bshd, 17, magnitude);
    const auto backend = reference::make_backend();
    backend->forward(data.forward_params());
    backend->backward(data.backward_params());
    const reference::GoldBackward gold = reference::gold_backward(data.backward_params());
    for (std::int64_t h = 0; h < p.H; ++h) {
      for (std::int64_t c = 0; c < p.d; ++c) {
        const auto at = std::array<std::size_t, 4>{0, static_cast<std::size_t>(h), 0,
                                                   static_cast<std::size_t>(c)};
        EXPECT_EQ(gold.dQ[at], 0.0);
        EXPECT_EQ(data.dq.view.load(0, 0, h, c), 0.0f) << "h " << h << ", c " << c;
        // Row 1 sees two keys: its gradient is not zero (with scores of moderate size, where
        // its softmax is not one-hot), so the check above is not vacuous.
        if (c == 0 && magnitude == 1.0f) {
          EXPECT_NE(data.dq.view.load(0, 1, h, c), 0.0f);
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, BaselineSpec,
                         ::testing::Values(DType::f32, DType::f16, DType::bf16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace flashref

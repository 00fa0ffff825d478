// The baseline's exact definition, checked bit for bit on a small problem: the test spells out
// every rounding the backend header promises, in plain scalar float32 code, and the backend
// must produce exactly those bits. This pins down "P rounded to the input dtype before P V",
// "dS rounded before dS K and dS^T Q", and where the outputs are rounded.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "attention_data.hpp"
#include "flashref/reference/backend.hpp"

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
  std::vector<std::vector<float>> P(S_q, std::vector<float>(S_k, 0.0f));
  for (int i = 0; i < S_q; ++i) {
    const int visible = i + S_k - S_q + 1;
    std::vector<float> S(S_k);
    float m = -INFINITY;
    for (int j = 0; j < visible; ++j) {
      float dot = 0;
      for (int c = 0; c < d; ++c) dot += Q(i, c) * K(j, c);
      S[j] = scale * dot;
      m = std::max(m, S[j]);
    }
    float l = 0;
    for (int j = 0; j < visible; ++j) l += std::exp(S[j] - m);
    for (int j = 0; j < visible; ++j) P[i][j] = std::exp(S[j] - m) / l;
    for (int c = 0; c < d; ++c) {
      float O = 0;
      for (int j = 0; j < S_k; ++j) O += round_to(t, P[i][j]) * V(j, c);  // P in the input dtype
      EXPECT_EQ(data.o.view.load(0, i, 0, c), round_to(t, O)) << "O(" << i << ", " << c << ")";
    }
    EXPECT_EQ(data.lse[static_cast<std::size_t>(i)], m + std::log(l)) << "L(" << i << ")";
  }

  // Backward: dP = dO V^T; dS = P * dP - P * (P . dP) per row, from the unrounded P.
  std::vector<std::vector<float>> dS(S_q, std::vector<float>(S_k));
  for (int i = 0; i < S_q; ++i) {
    std::vector<float> dP(S_k);
    for (int j = 0; j < S_k; ++j) {
      float dot = 0;
      for (int c = 0; c < d; ++c) dot += dO(i, c) * V(j, c);
      dP[j] = dot;
    }
    float P_dot_dP = 0;
    for (int j = 0; j < S_k; ++j) P_dot_dP += P[i][j] * dP[j];
    for (int j = 0; j < S_k; ++j) dS[i][j] = round_to(t, P[i][j] * dP[j] - P[i][j] * P_dot_dP);
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

INSTANTIATE_TEST_SUITE_P(Dtypes, BaselineSpec,
                         ::testing::Values(DType::f32, DType::f16, DType::bf16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace flashref

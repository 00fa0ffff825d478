// The gold reference (reference/gold.hpp: double arithmetic on the exact inputs) for a
// ProblemData, in the same canonical (B, H, S, d) layout as RunOutputs.
#pragma once

#include <xtensor/xtensor.hpp>

#include "flashref/verify/problem_data.hpp"

namespace flashref::verify {

struct GoldOutputs {
  xt::xtensor<double, 4> O;           // (B, H, S_q, d)
  xt::xtensor<double, 3> L;           // (B, H, S_q); -inf for fully masked rows
  xt::xtensor<double, 4> dQ, dK, dV;  // only when has_backward; dK, dV: (B, H_kv, S_k, d)
  bool has_backward = false;
};

GoldOutputs compute_gold(const ProblemData& data, bool backward);

}  // namespace flashref::verify

// The gold reference: naive attention on the inputs exactly as given (each element converted
// exactly to double), all arithmetic in double. It is what every backend is judged against.
// Results are host xtensors in the canonical (B, H, S, d) layout.
#pragma once

#include <xtensor/xtensor.hpp>

#include "flashref/params.hpp"

namespace flashref::reference {

struct GoldForward {
  xt::xtensor<double, 4> O;  // (B, H, S_q, d); zero rows for fully masked rows
  xt::xtensor<double, 3> L;  // (B, H, S_q); natural-log logsumexp, -inf for fully masked rows
  xt::xtensor<double, 3> m;  // (B, H, S_q); row max of the visible scaled scores (-inf if none)
  xt::xtensor<double, 3> l;  // (B, H, S_q); sum_j exp(S_ij - m_i) over visible keys (0 if none)
};

struct GoldBackward {
  xt::xtensor<double, 4> dQ;  // (B, H, S_q, d)
  xt::xtensor<double, 4> dK;  // (B, H_kv, S_k, d), summed over the query heads of each group
  xt::xtensor<double, 4> dV;  // (B, H_kv, S_k, d), summed over the query heads of each group
};

// Reads params.q/k/v (host pointers); ignores params.o and params.lse.
GoldForward gold_forward(const ForwardParams& params);
// Reads params.q/k/v/dO (host pointers); recomputes P in double by equations (4)-(5) and
// applies (7)-(11). Ignores params.o, params.lse and the outputs.
GoldBackward gold_backward(const BackwardParams& params);

}  // namespace flashref::reference

// The gold reference: naive attention on the inputs exactly as given (each element converted
// exactly to double), all arithmetic in double. It is what every backend is judged against.
// Results are host xtensors in the canonical (B, H, S, d) layout.
//
// How it computes, per (batch, query head), with S_q x S_k scratch matrices per thread:
//   forward   S = scale * Q K^T (masked: -inf), m, l, P = softmax(S), O = P V, L = m + log l
//   backward  recomputes S and P as above, then the standard equations (7)-(11) with the
//             explicit softmax Jacobian; it never reads O or L, so it is derived independently
//             of the recomputation trick that FlashAttention's backward uses.
// Inputs are read once through their views (any strides and layouts) into double buffers.
// Work is spread over (batch, head) with OpenMP (params.options.num_threads; 0: the default);
// the result does not depend on the thread count.
//
// To test a hypothesis about a wrong candidate ("it forgot the scale", "it used the other
// causal alignment"), change params.problem.scale or .mask and call these again.
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
// Validates the problem and the input views first (flashref::validate_inputs).
GoldForward gold_forward(const ForwardParams& params);
// Reads params.q/k/v/dO (host pointers); recomputes P in double by equations (4)-(5) and
// applies (7)-(11). Ignores params.o, params.lse and the outputs.
// Validates the problem and the input views first (flashref::validate_inputs).
GoldBackward gold_backward(const BackwardParams& params);

// The same on inputs given exactly as doubles in the canonical layout (Q, dO (B, H, S_q, d);
// K, V (B, H_kv, S_k, d)): float64 inputs that no storage dtype holds, as
// torch.autograd.gradcheck perturbs them (flashref.attention on float64 tensors). Validates the
// problem and the shapes (InvalidArgument "Q", "K", "V", "dO").
GoldForward gold_forward(const Problem& p, const xt::xtensor<double, 4>& Q,
                         const xt::xtensor<double, 4>& K, const xt::xtensor<double, 4>& V);
GoldBackward gold_backward(const Problem& p, const xt::xtensor<double, 4>& Q,
                           const xt::xtensor<double, 4>& K, const xt::xtensor<double, 4>& V,
                           const xt::xtensor<double, 4>& dO);

// The backward with the recomputation trick's eq. (17), dS_ij = P_ij (dP_ij - D_i), for a
// given D of shape (B, H, S_q) instead of the exact P_i^T dP_i. With the true
// D = rowsum(dO * O) it equals gold_backward up to rounding; with a wrong D (zero, computed
// from a wrong O, ...) it is what a candidate with that mistake would produce. P is still the
// exact softmax, so a fully masked row still gets zero gradients whatever D says.
// Throws InvalidArgument("D", ...) when D has the wrong shape.
GoldBackward gold_backward_with_D(const BackwardParams& params, const xt::xtensor<double, 3>& D);

}  // namespace flashref::reference

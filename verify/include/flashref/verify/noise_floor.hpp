// The rule's rounding-noise term: how far two correct kernels can drift apart through the
// float32 rounding of the scores (and, for the gradients, of dP - D) alone.
//
// Every kernel computes S_ij = scale * sum_c Q_ic K_jc in float32 (whatever the input dtype),
// and any two correct kernels sum it in different orders, so their score errors are
// independent samples of size about eps_ij = 2^-24 * |scale| * sum_c |Q_ic K_jc|. When the
// scores are large (|S| in the hundreds) that noise dominates O, L and the gradients, and the
// rule's max over a few samples cannot tell a correct kernel from a lucky baseline. sigma_T(e)
// is the first-order standard deviation of element e of tensor T when every visible score
// moves by an independent error of standard deviation eps_ij; the rule adds 3 * max_e sigma_T
// to its floor (rule.hpp). docs/verification.md derives the formulas; in short, with
// P = softmax(S), dS = P * (dP - D):
//
//   sigma_O(i,c)^2  = sum_j (P_ij (V_jc - O_ic) eps_ij)^2     forward: L and O follow S
//   sigma_L(i)^2    = sum_j (P_ij eps_ij)^2
//   sigma_dV(j,c)^2 = sum_i (P_ij dO_ic eps_ij)^2             backward: L and D are inputs,
//   sigma_dQ(i,c)^2 = scale^2 sum_j w_ij^2 K_jc^2              so a score error scales P_ij
//   sigma_dK(j,c)^2 = scale^2 sum_i w_ij^2 Q_ic^2              and dS_ij by (1 + delta_ij)
//
// with sums over visible (i, j) only; for dK and dV, i runs over the rows of every query head
// of the key/value head's group. w_ij^2 = (dS_ij eps_ij)^2 + (P_ij eta_ij)^2 adds the second
// float32 rounding that dS meets: of dP_ij - D_i, two float32 dot products that cancel in
// near one-hot rows, eta_ij = u (sum_c |dO_ic V_jc| + sum_c |dO_ic O_ic|): each sum's
// rounding. It is not capped by how far apart the terms are: only kernels that sum D in dP's
// exact order round the two alike, and the floor covers any correct kernel.
#pragma once

#include <algorithm>
#include <array>

#include <xtensor/xtensor.hpp>

#include "flashref/verify/problem_data.hpp"
#include "flashref/verify/tensor_id.hpp"

namespace flashref::verify {

// One float32 unit roundoff: the relative size of one rounding of a float32 sum.
inline constexpr double kFloat32UnitRoundoff = 0x1p-24;
// One TF32 unit roundoff (10 explicit mantissa bits, round to nearest).
inline constexpr double kTf32UnitRoundoff = 0x1p-11;
// The noise floor's standard deviation for the error of one float32 product x y made as 3xTF32
// (x and y each split into a big TF32 half and a small one, big x small + small x big + big x
// big, the small x small term dropped), relative to |x y|: the `--three-tf32` precision. A third
// of the largest error such a product can have, so that the rule's three standard deviations
// cover it even where one product is the whole sum (d = 1): the three pieces are below 2^-21 +
// 2^-21 + 2^-20 of |x y| for every split and the sum's rounding below 2^-24, so (2^-19 + 2^-24)
// / 3, 11 float32 unit roundoffs. Splits err by at most 29 (both halves truncated), 25 (CUTLASS's
// FastF32, PyTorch's memory-efficient kernel: big truncated, small rounded) and 9 (big rounded to
// nearest: flashref's kernels, Triton's tf32x3).
// docs/verification.md, "3xTF32 products", derives it and gives the measured distributions.
inline constexpr double kThreeTf32ProductSigma = (0x1p-19 + 0x1p-24) / 3.0;

// How a product's operand format rounds: a relative error of at most `u` (one unit roundoff)
// in its normal range, and an absolute one of at most `h` (half its smallest step) below it.
// u = h = 0: the operand is used exactly.
struct OperandRounding {
  double u = 0.0, h = 0.0;
  // The largest rounding error of a value x >= 0: half the step of the format at x (0 is exact).
  double half_step(double x) const { return x == 0.0 ? 0.0 : std::max(u * x, h); }
  bool exact() const { return u == 0.0 && h == 0.0; }
};

// The format of the matrix products' operands whose rounding differs between correct kernels:
// P~ in P~V and dS in dS K, dS^T Q. bf16 (u = 2^-8) and f16 (2^-11, and h = 2^-25 below f16's
// normal range) inputs, TF32 products of float32 inputs (2^-11); float32 without TF32 rounds
// nothing (docs/verification.md, "The P~ operand under cancellation").
OperandRounding product_operand_rounding(DType dtype, bool allow_tf32);

struct ScoreNoise {
  xt::xtensor<double, 4> O;       // sigma_O, (B, H, S_q, d)
  xt::xtensor<double, 3> L;       // sigma_L, (B, H, S_q)
  xt::xtensor<double, 4> dQ;      // sigma_dQ, (B, H, S_q, d); empty unless has_backward
  xt::xtensor<double, 4> dK, dV;  // (B, H_kv, S_k, d); empty unless has_backward
  bool has_backward = false;

  // max_e sigma_T(e) by TensorId: the values the rule's floor uses (0 for a gradient without
  // backward).
  std::array<double, 5> max_by_tensor{};
  double max_sigma(TensorId t) const { return max_by_tensor[static_cast<std::size_t>(t)]; }
};

// Computes every sigma in one pass over the visible (i, j) pairs, in double, from the inputs
// exactly as given: O(B H S_q S_k d), about the cost of the gold forward and backward.
// `backward` also computes the gradients' sigmas and needs data.dO. A row that sees no key has
// sigma 0: its outputs are fixed (O = 0, L = -inf, zero gradients) whatever the scores.
// With `operand` (16-bit inputs, and float32 inputs with TF32 products), sigma_O also holds the
// rounding of P~ as the P~V product's operand, which each kernel does its own way (FlashAttention
// rounds P~ = exp(S - m) before the division by l, a naive kernel P after it):
// sigma_O(i,c)^2 += sum_j (half_step(P_ij) / sqrt(3) V_jc)^2 over rows that see two keys or
// more, in product_operand_rounding's format (docs/verification.md, "The P~ operand under
// cancellation" and "Precision modes"). The rounding of Q, K, V to the input dtype or to TF32
// is deterministic, the same in every kernel, and is not noise. In the backward it adds the
// rounding of dS as the operand of dQ = dS K and dK = dS^T Q, which kernels apply to dS or to
// dS * scale: sigma_dQ(i,c)^2 += scale^2 sum_j (half_step(|dS_ij|) / sqrt(3) K_jc)^2, and
// likewise dK with Q (docs/verification.md, "The gradients under TF32"). P's rounding in
// dV = P^T dO and dO's, V's in dP = dO V^T round the same numbers in every recomputation
// backward and are not noise.
// `operand` is the rule's product_operand_rounding(dtype, allow_tf32); the default, {}, leaves
// the operand terms out: the noise of the float32 scores (and of dP - D) alone.
// `product_sigma` r > 0 (kThreeTf32ProductSigma under --three-tf32) gives every product term of
// every matrix product its own independent error of relative size r, beyond the sums' rounding: the
// scores' eps_ij^2 += (r scale)^2 sum_c (Q_ic K_jc)^2, dP's likewise, and the terms of O, dV, dQ
// and dK (docs/verification.md, "3xTF32 products"). 0 leaves them out.
ScoreNoise score_rounding_noise(const ProblemData& data, bool backward,
                                const OperandRounding& operand = {}, double product_sigma = 0.0);

}  // namespace flashref::verify

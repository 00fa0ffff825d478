// The per-step states of Algorithm 1 on a user's own inputs, and the first step at which a
// candidate kernel's states leave the algorithm (docs/checking-your-kernel.md, "States";
// docs/verification.md, "Judging states").
//
// The states layout (the contract a kernel writes from inside its loop), for query tile i and
// key tile j, after key tiles 0..j have been processed:
//   m   (B, H, T_q, T_k, B_q)     the running max m_i(j) (Alg. 1 line 10), natural-log units
//   l   (B, H, T_q, T_k, B_q)     the running sum l_i(j) (line 12)
//   acc (B, H, T_q, T_k, B_q, d)  the unnormalized accumulator O_i(j) (line 13)
// Rows past S_q in the last query tile, and key tiles that a causal kernel never visits (every
// key of the tile lies after the last key visible to the tile's last row), are ignored. The
// mirror's own arrays carry the state of the last visited tile through skipped tiles (skipping
// changes nothing) and hold NaN in rows past S_q.
//
// A selection (b, h[, i]) keeps one head (and one query tile): the arrays then have 1 in those
// dimensions, and the same selection must be given to judge them.
//
// Baseline states: the cpu mirror (Algorithm 1 line by line) in the candidate's precision,
// recorded by its trace observer. Gold states: the recurrence of lines 10-13 in double on the
// exact inputs, with the score-rounding noise of each state (the rule's noise floor).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>
#include <xtensor/xtensor.hpp>

#include "flashref/verify/problem_data.hpp"

namespace flashref::verify {

// The tiles of a states layout and the part of the problem it covers.
struct StatesGrid {
  std::int64_t B_q = 0, B_k = 0;        // the kernel's tiles, each >= 1
  std::int64_t b = -1, h = -1, i = -1;  // the selection; -1: every batch, head, query tile
};

// The dimensions of the arrays for `grid` on `problem`: (nb, nh, nq, T_k, B_q[, d]) where nb,
// nh, nq are 1 for a selected batch, head, query tile. Throws InvalidArgument("--tile", ...)
// for tiles < 1 and ("--select", ...) for a selection outside the problem (h without b, i
// without h, or an index out of range).
struct StatesShape {
  std::int64_t nb = 0, nh = 0, nq = 0;  // batches, heads, query tiles in the arrays
  std::int64_t T_q = 0, T_k = 0, B_q = 0, B_k = 0, d = 0;
  std::int64_t b0 = 0, h0 = 0, i0 = 0;  // the first batch, head, query tile in the arrays
  std::vector<std::size_t> vector_shape() const;  // (nb, nh, nq, T_k, B_q)
  std::vector<std::size_t> matrix_shape() const;  // (nb, nh, nq, T_k, B_q, d): acc, dQ
  double elements() const;                        // of acc: the largest array
  // The backward's arrays (states.hpp, "Backward states").
  std::vector<std::size_t> row_shape() const;   // (nb, nh, nq, B_q): D
  std::vector<std::size_t> pair_shape() const;  // (nb, nh, nq, T_k, B_q, B_k): P, dP, dS
  std::vector<std::size_t> key_shape() const;   // (nb, nh, T_k, nq, B_k, d): dK, dV
  double backward_elements() const;             // of all seven arrays together
};
StatesShape states_shape(const Problem& problem, const StatesGrid& grid);

// Whether query tile i visits key tile j: some row of the tile sees a key of it (a causal
// kernel skips the others).
bool visits(const Problem& problem, const StatesShape& shape, std::int64_t i, std::int64_t j);

struct ForwardStates {
  xt::xtensor<double, 5> m, l;  // (nb, nh, nq, T_k, B_q)
  xt::xtensor<double, 6> acc;   // (nb, nh, nq, T_k, B_q, d)
};

// The gold states and the standard deviation that the float32 rounding of the scores alone
// gives each of them (noise_floor.hpp's model applied to the prefix of keys 0..j).
struct GoldForwardStates {
  ForwardStates value;
  xt::xtensor<double, 5> sigma_m, sigma_l;
  xt::xtensor<double, 6> sigma_acc;             // of the unnormalized accumulator
  xt::xtensor<double, 6> sigma_acc_normalized;  // of acc / l (the FlashAttention-1 convention)
  // The size of the terms summed into acc: sum over the keys seen of P~ |V| (divide by l for the
  // normalized convention). The floor's rounding part is taken at this size, not at |acc|:
  // two correct kernels round the terms, and the sum may cancel (docs/verification.md).
  xt::xtensor<double, 6> acc_terms;
};

// The cpu mirror's states in the problem's precision (P~ rounded to a 16-bit dtype before
// P~ V), with its portable kernels so the numbers are the same on every machine.
ForwardStates baseline_forward_states(const ProblemData& data, const StatesGrid& grid);
GoldForwardStates gold_forward_states(const ProblemData& data, const StatesGrid& grid);

// m, l, acc: Algorithm 1's states; D .. dK: Algorithm 2's (below).
enum class StateQuantity : std::uint8_t { m, l, acc, D, P, dP, dS, dQ, dV, dK };
std::string_view state_name(StateQuantity q);  // "m", "l", "acc", "D", "P", ..., "dQ_i", "dV_j", "dK_j"
int state_algorithm(StateQuantity q);          // 1 for m, l, acc; 2 for the others
int state_line(StateQuantity q);  // the line of its algorithm: 10, 12, 13; 2, 12, 14, 15, 16, 13, 17
std::string_view state_formula(StateQuantity q);

// The conventions a kernel's states may differ in without being wrong; found, not asked.
struct StateConventions {
  bool m_log2 = false;          // m kept in log2 units: the scores times log2(e)
  bool acc_normalized = false;  // acc divided by l at every step (FlashAttention-1 style)
  // m kept until a key tile raises the max by more than 8 ln 2 (FlashAttention-4's conditional
  // rescale, sum_magnitude.hpp's kConditionalRescale), l and acc relative to the kept m: judged
  // against the gold re-based to it (docs/verification.md, "Judging states").
  bool m_deferred = false;
};
std::string describe(const StateConventions& c);

// A candidate's states in the layout; a quantity not given is not judged.
struct CandidateStates {
  std::optional<xt::xtensor<double, 5>> m, l;
  std::optional<xt::xtensor<double, 6>> acc;
};

// One quantity at one step (b, h, i, j), under the rule: pass iff candidate_err <= k *
// baseline_err + floor, errors against the gold over the tile's rows (and columns of d).
struct StepCheck {
  StateQuantity quantity = StateQuantity::m;
  std::int64_t b = 0, h = 0, i = 0, j = 0;
  double candidate_err = 0.0, baseline_err = 0.0;
  double k = 0.0, floor_rounding = 0.0, floor_noise = 0.0, limit = 0.0, ratio = 0.0;
  // acc under the conditional rescale, 16-bit inputs: u of the dtype times the step's largest
  // sum of |P~ V| terms (docs/verification.md, "Judging states"); 0 otherwise.
  double floor_operand = 0.0;
  bool pass = true;
  // The worst element of the candidate: its row, the global query (the global key for dK_j,
  // dV_j), and column: of d for acc, dQ_i, dK_j, dV_j, the global key for P, dP, dS, -1 for
  // m, l, D. The gold's value there (in the candidate's convention) and the candidate's. For D
  // (a state of the query tile, before any key tile) j is -1.
  std::int64_t row = 0, col = -1;
  double expected = 0.0, found = 0.0;
};

struct FirstDivergence {
  StepCheck step;                       // the first failing quantity, in the algorithm's order
  std::vector<StepCheck> this_step;     // every quantity given, at the same step
  std::vector<StepCheck> previous_step; // every quantity at (i, j - 1); empty for j = 0
  std::string cause;        // a known mistake the states point to ("l_not_rescaled", ...), or ""
  std::string explanation;  // what the step's numbers say
};

struct QuantitySummary {
  StateQuantity quantity = StateQuantity::m;
  std::int64_t steps = 0, failed = 0;
  StepCheck worst;  // the step with the largest ratio
};

struct StatesReport {
  StateConventions conventions;
  std::string conventions_note;  // how they were found
  std::vector<QuantitySummary> quantities;
  std::optional<FirstDivergence> first;
  bool passed() const { return !first.has_value(); }
};

// Judges `candidate` step by step, walking (b, h, i, j) in the algorithm's order and at each
// step m, l, acc in line order; the first failing one is the first divergence. k = 2 (as O);
// floor = 2 float32 rounding steps at the step's max|gold| (for acc, at the size of its terms,
// GoldForwardStates::acc_terms) + 3 sigma (docs/verification.md, "Judging states").
// Throws InvalidArgument("states", ...) when no quantity is given, ("m.npy", ...) etc. for a
// shape that is not the layout's.
StatesReport judge_forward_states(const ProblemData& data, const StatesGrid& grid,
                                  const CandidateStates& candidate);
// The same with the gold and baseline states already computed for `grid`.
StatesReport judge_forward_states(const ProblemData& data, const StatesGrid& grid,
                                  const CandidateStates& candidate, const GoldForwardStates& gold,
                                  const ForwardStates& baseline);

// {"conventions", "quantities", "first_divergence": {b, h, i, j, quantity, line, expected,
// found, ...} or null, "passed"}.
nlohmann::json to_json(const StatesReport& report);

// ---------------------------------------------------------------------------------------------
// Backward states: Algorithm 2 as the cpu backend runs it, in two passes after line 2 (D):
//   the dQ pass, for each (b, h, i), key tiles j in increasing order: P (line 12), dP (14),
//     dS (15) of tile pair (i, j), then the accumulator dQ_i (16);
//   the dK/dV pass, for each (b, h, j), query tiles i in increasing order: dV_j (13), dK_j (17).
// The layout (every array float32; the scale of line 15 is applied once, after the loops, as
// the cpu and most kernels do, so dS and the dQ_i, dK_j accumulators hold no scale):
//   D  (B, H, T_q, B_q)               D = rowsum(dO * O) (line 2)
//   P  (B, H, T_q, T_k, B_q, B_k)     P_ij = exp(S_ij - L_i), 0 where masked (line 12)
//   dP (B, H, T_q, T_k, B_q, B_k)     dP_ij = dO_i V_j^T (line 14); masked entries ignored
//   dS (B, H, T_q, T_k, B_q, B_k)     dS_ij = P_ij * (dP_ij - D_i) (line 15), 0 where masked
//   dQ (B, H, T_q, T_k, B_q, d)       dQ_i after key tiles 0..j: sum dS_ij K_j (line 16)
//   dV (B, H, T_k, T_q, B_k, d)       dV_j after query tiles 0..i: sum P_ij^T dO_i (line 13)
//   dK (B, H, T_k, T_q, B_k, d)       dK_j after query tiles 0..i: sum dS_ij^T Q_i (line 17)
// dK and dV are per query head: the contribution of head h alone (with GQA the kernel's dK_j
// of key/value head h / (H / H_kv) is the sum of its group's). Rows past S_q, keys past S_k
// and tile pairs a causal kernel skips are ignored. A selection (b, h, i) keeps query tile i:
// in dK and dV that is the state after query tile i (the sum over tiles 0..i).
// The mirror's arrays hold NaN past S_q and S_k; in skipped tile pairs P = dS = 0 and dP =
// NaN (not computed); dQ_i carries its last visited state, dK_j and dV_j stay 0 until the
// first query tile that sees key tile j.
struct BackwardStates {
  xt::xtensor<double, 4> D;
  xt::xtensor<double, 6> P, dP, dS;
  xt::xtensor<double, 6> dQ, dV, dK;
};

// The gold states (Algorithm 2 in double on the exact inputs, from the exact O and L), and per
// element the two parts of the rule's floor, in the layout's convention (docs/verification.md,
// "Judging states"): `rounding`, the roundings two correct float32 kernels may differ by
// (absolute), and `sigma`, the standard deviation the float32 rounding of the scores gives.
// `rounding_scaled` is the rounding part for a kernel in a scaled convention (its dS, dQ, dK;
// the other arrays as `rounding`): the scaled values round at their own size, which is not the
// scale times the unscaled one where a dtype turns subnormal.
struct GoldBackwardStates {
  BackwardStates value, rounding, sigma, rounding_scaled;
};

// The cpu mirror's backward (two passes, its trace observer) in the problem's precision, run
// from its own forward's O and L. `data.dO` must be given.
BackwardStates baseline_backward_states(const ProblemData& data, const StatesGrid& grid);
GoldBackwardStates gold_backward_states(const ProblemData& data, const StatesGrid& grid);

// Conventions a correct backward may differ in, found, not asked: the softmax scale applied
// to dS (line 15 as printed), or to the dQ_i and dK_j accumulators inside the loop.
struct BackwardConventions {
  bool dS_scaled = false;
  bool dQ_scaled = false;
  bool dK_scaled = false;
};
std::string describe(const BackwardConventions& c);

// A candidate's backward states; a quantity not given is not judged.
struct CandidateBackwardStates {
  std::optional<xt::xtensor<double, 4>> D;
  std::optional<xt::xtensor<double, 6>> P, dP, dS, dQ, dV, dK;
};

struct BackwardStatesReport {
  BackwardConventions conventions;
  std::string conventions_note;
  std::vector<QuantitySummary> quantities;  // in line order: D, P, dP, dS, dQ_i, dV_j, dK_j
  std::optional<FirstDivergence> first;     // previous_step: (i, j - 1) in the dQ pass, (i - 1,
                                            // j) in the dK/dV pass, empty for D
  bool passed() const { return !first.has_value(); }
};

// Walks D (b, h, i), then the dQ pass (b, h, i, j: P, dP, dS, dQ_i), then the dK/dV pass
// (b, h, j, i: dV_j, dK_j); the first failing state is the first divergence. k = 3 (the
// gradients'); floor = max rounding + 3 max sigma of the step (GoldBackwardStates). Throws
// InvalidArgument("states", ...) when nothing is given or dO is missing, ("D.npy", ...) etc.
// for a shape that is not the layout's.
BackwardStatesReport judge_backward_states(const ProblemData& data, const StatesGrid& grid,
                                           const CandidateBackwardStates& candidate);
BackwardStatesReport judge_backward_states(const ProblemData& data, const StatesGrid& grid,
                                           const CandidateBackwardStates& candidate,
                                           const GoldBackwardStates& gold,
                                           const BackwardStates& baseline);

// The same keys as to_json(StatesReport), with the backward conventions.
nlohmann::json to_json(const BackwardStatesReport& report);

}  // namespace flashref::verify

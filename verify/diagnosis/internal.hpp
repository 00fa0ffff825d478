// Internals of the diagnosis (diagnosis.hpp): the problem the hypotheses are tested on, the
// hypotheses themselves, and the location patterns. Not installed.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <xtensor/xarray.hpp>

#include "flashref/params.hpp"
#include "flashref/reference/gold.hpp"
#include "flashref/verify/diagnosis/diagnose.hpp"
#include "flashref/verify/tensor_set.hpp"

namespace flashref::verify::diagnosis {

// The problem the hypotheses are recomputed on: the whole one, or a slice of a large one.
struct Context {
  Problem problem;
  TensorView q, k, v, dO;                           // dO.data is null when no gradient is checked
  reference::GoldForward forward;                   // O, L, m, l of the gold
  std::optional<reference::GoldBackward> backward;  // when gradients are checked
  TensorSet gold;                // the gold of every tensor that can be compared
  TensorSet candidate;           // the candidate's tensors, sliced like the problem
  std::vector<TensorId> failed;  // the tensors the rule failed, in TensorId order

  bool failed_any(std::initializer_list<TensorId> ids) const;
  bool needs_forward() const { return failed_any({TensorId::O, TensorId::L}); }
  bool needs_backward() const {
    return dO.data != nullptr && failed_any({TensorId::dQ, TensorId::dK, TensorId::dV});
  }
};

// What a candidate with one mistake would produce.
struct Hypothesis {
  std::string code;
  std::string explanation;
  nlohmann::json detail = nlohmann::json::object();
  TensorSet variant;  // only the tensors the mistake changes
  // Explains nothing unless it fits every failed tensor of `variant`: for a mistake that moves
  // each of them, a fit on one next to a miss on another is a coincidence.
  bool all_or_nothing = false;
};

// The gold recomputed for a changed problem (scale, mask): O and L when the forward is checked,
// dQ, dK and dV when gradients are.
TensorSet recompute(const Context& ctx, const Problem& changed);
// Forward and backward params for the context's inputs and `problem`.
ForwardParams forward_params(const Context& ctx, const Problem& problem);
BackwardParams backward_params(const Context& ctx, const Problem& problem);

// Each family, in the order of kDiagnosisCodes. A family returns nothing when it cannot apply.
std::vector<Hypothesis> scale_hypotheses(const Context& ctx);           // no_scale
std::vector<Hypothesis> mask_hypotheses(const Context& ctx);            // mask_*
std::vector<Hypothesis> key_padding_hypotheses(const Context& ctx);     // key_padding_unmasked
std::vector<Hypothesis> lse_hypotheses(const Context& ctx);             // lse_base2, lse_unshifted
std::vector<Hypothesis> output_hypotheses(const Context& ctx);          // unnormalized
std::vector<Hypothesis> epsilon_hypotheses(const Context& ctx);         // softmax_epsilon
std::vector<Hypothesis> gradient_scale_hypotheses(const Context& ctx);  // dq_scale, dk_scale
std::vector<Hypothesis> d_vector_hypotheses(const Context& ctx);        // d_vector
std::vector<Hypothesis> d_per_key_tile_hypotheses(const Context& ctx);  // d_vector, per tile
std::vector<Hypothesis> gqa_hypotheses(const Context& ctx);             // gqa_reduction
std::vector<Hypothesis> diagonal_hypotheses(const Context& ctx);        // diagonal_tiles

// Relative L2 distance ||c - r|| / ||r|| over finite r; equal values (equal infinities
// included) count as no difference, any other non-finite pair makes the distance infinite.
double relative_distance(const xt::xarray<double>& c, const xt::xarray<double>& r);

// Location patterns, on the whole problem. nan_masked_rows looks at every query tensor of
// `candidate` (O, L, dQ); tail_rows at tensor `id`, whose elements are wrong when further
// from the gold than `limit`, the rule's limit.
std::optional<Finding> nan_masked_rows(const TensorSet& candidate, const TensorSet& gold);
// tail_rows when the wrong tail rows look like attention computed with wrong bounds (or were
// never written: NaN, the runner's poison), tail_garbage when O's tail holds values no
// attention can give: outside [min V, max V] (O is a convex combination of V's rows), as reads
// past the end without bounds checks give. `v` is V for tensor O, else null.
std::optional<Finding> tail_rows(TensorId id, const xt::xarray<double>& candidate,
                                 const xt::xarray<double>& gold, double limit,
                                 const HostTensor* v = nullptr);
// Rows that see no key (gold L = -inf) whose O is finite but not 0, or whose L is finite:
// what is there (the mean of V: uniform attention over every key; or junk).
std::optional<Finding> masked_rows_not_zero(const ProblemData& data, const TensorSet& candidate,
                                            const TensorSet& gold);
// max_init_zero: the wrong rows are exactly rows whose largest score is so negative that
// exp(S - 0) underflows in float32 (the running max started at 0 instead of -inf).
std::optional<Finding> max_init_zero(const Context& ctx, TensorId id, double limit);
// rounded_toward_zero: tensor `id`'s errors are small and shrink its magnitudes (truncated sums or
// conversions; rounding.cpp).
std::optional<Finding> rounded_toward_zero(TensorId id, const xt::xarray<double>& candidate,
                                           const xt::xarray<double>& gold);
// Where the wrong elements of tensor `id` sit (rows, columns, tiles, the diagonal, the tails),
// for a failed tensor no finding explains.
Lead locate_errors(TensorId id, const Problem& p, const xt::xarray<double>& candidate,
                   const xt::xarray<double>& gold, double limit, std::int64_t tile);

// "0.125", "1 (no scale)": numbers in explanations.
std::string format_number(double x);

}  // namespace flashref::verify::diagnosis

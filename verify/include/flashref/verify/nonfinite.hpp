// Non-finite values in a problem's inputs and a backend's outputs, named for the user
// (docs/verification.md, "Non-finite inputs"): what `check` and `verify` report about their
// inputs, and what `run` and `trace` warn about their outputs.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <xtensor/xarray.hpp>

#include "flashref/verify/problem_data.hpp"
#include "flashref/verify/tensor_set.hpp"

namespace flashref::verify {

// The NaN and infinities of one tensor, and where the first one (in row-major order of the
// canonical layout: (B, H, S, d), or (B, H, S_q) for L) sits.
struct NonFiniteCount {
  std::string tensor;  // "Q", "O", "L", ...
  std::int64_t nan = 0, pos_inf = 0, neg_inf = 0;
  std::vector<std::int64_t> first;  // the first non-finite value's index
  double first_value = 0.0;
  std::int64_t total() const { return nan + pos_inf + neg_inf; }
  // "Q holds 2 NaN, 1 +inf (first at [0,0,3,1] = nan)".
  std::string text() const;
};

// nullopt when every value of `values` is finite.
std::optional<NonFiniteCount> count_nonfinite(const std::string& tensor,
                                              const xt::xarray<double>& values);

// Q, K, V (and dO when given), as stored in the problem's dtype: one entry per tensor that
// holds a non-finite value.
std::vector<NonFiniteCount> nonfinite_inputs(const ProblemData& data);

// Every tensor of `outputs` (canonical layout) with a non-finite value, except L's -inf where
// `gold_masked_rows` says the row sees no key (that -inf is the right answer). `problem` gives
// which rows see no key.
std::vector<NonFiniteCount> nonfinite_outputs(const TensorSet& outputs, const Problem& problem);

// The largest |S_ij| = |scale Q_i . K_j| over the visible pairs, in double: above float32's
// largest value (3.4e38) a float32 kernel cannot hold the scores, whatever it does.
double max_abs_score(const ProblemData& data);

// The notes `check` and `verify` print about their inputs: each tensor with non-finite values,
// scores beyond float32's range or beyond what exp2 of S log2(e) takes, and scores past the range
// of a softmax that folds the scale into exp2's argument (|S| > 2^31 / log2(e)). `max_abs_score`:
// max_abs_score(data), or the same value from a pass that computed the scores already
// (SumMagnitudes::max_abs_score). Empty when the inputs are unremarkable.
std::vector<std::string> input_notes(const ProblemData& data, double max_abs_score);

// The warnings of `run` and `trace` about their outputs: one per tensor holding NaN or an
// infinity (a fully masked row's L = -inf excepted), naming the first index; when there is
// any, followed by what in the inputs explains it (input_notes), or by the words that the
// inputs explain nothing (a bug of the backend). Empty when every output is finite.
std::vector<std::string> nonfinite_warnings(const TensorSet& outputs, const ProblemData& data);

}  // namespace flashref::verify

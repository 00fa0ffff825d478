// The problem a Python call describes: sizes from the arrays, the mask, scale and dtypes from
// the keywords. Errors name the Python argument ("k", "mask", "dtype"), as ValueError or
// TypeError.
#pragma once

#include <optional>
#include <string>

#include "arrays.hpp"
#include "flashref/problem.hpp"
#include "flashref/verify/problem_data.hpp"

namespace flashref::python {

// `text` parsed by `parse` (which throws InvalidArgument("--option", ...)), re-thrown under the
// Python argument's name.
Mask parse_mask_arg(const std::string& text, const std::string& name);
DType parse_dtype_arg(const std::string& text, const std::string& name);

struct ProblemArgs {
  std::string mask = "none";
  std::optional<double> scale;      // None: 1/sqrt(d)
  std::optional<std::string> dtype;  // None: q's dtype
  std::optional<std::string> grad_dtype;  // None: dtype
};

// Q (B, H, S_q, d), K and V (B, H_kv, S_k, d), dO (B, H, S_q, d) or None, all on the host:
// the problem and its inputs stored in the problem's dtype. q, k, v and do must share a dtype
// (TypeError naming the one that differs); float64 inputs need dtype= (they are rounded to it).
verify::ProblemData problem_data(const AnyArray& q, const AnyArray& k, const AnyArray& v,
                                 const std::optional<AnyArray>& dO, const ProblemArgs& args);

}  // namespace flashref::python

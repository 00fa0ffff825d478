// Shared by the states' computation and their judge (states.hpp): one query row's states in
// double, for the gold and for the judge's hypotheses about a failing step.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include <nlohmann/json.hpp>

#include "flashref/verify/problem_data.hpp"
#include "flashref/verify/states.hpp"

namespace flashref::verify::detail {

struct RowStates {
  std::vector<double> m, l;  // [j]: after key tiles 0..j
  std::vector<double> acc;   // [j * d + c]
  std::vector<double> sigma_m, sigma_l, sigma_acc, sigma_acc_normalized;  // with_noise only
  std::vector<double> acc_terms;  // [j * d + c]: sum of P~ |V| so far (with_noise only)
};

// Alg. 1 lines 9-13 for query row q of head (b, h), in double, over key tiles of B_k keys.
// The row sees keys [0, min(last_key, keys_end - 1)]; keys [S_k, keys_end) are padding (score
// 0, V = 0), as a kernel that reads past S_k without masking sees them.
RowStates gold_row(const ProblemData& data, std::int64_t b, std::int64_t h, std::int64_t q,
                   std::int64_t B_k, std::int64_t last_key, std::int64_t keys_end,
                   bool with_noise);

// Head (b, h) of `data` alone: B = H = H_kv = 1, with its K, V (and dO when given). Per-head
// work is independent, so the mirror and the gold give the same numbers on the slice.
ProblemData head_slice(const ProblemData& data, std::int64_t b, std::int64_t h);

// Runs the cpu mirror with the portable kernels while alive: the baseline must read the same
// on every machine (docs/ embed it).
class PortableIsa {
 public:
  PortableIsa();
  ~PortableIsa();
  PortableIsa(const PortableIsa&) = delete;
  PortableIsa& operator=(const PortableIsa&) = delete;

 private:
  int saved_;
};

// |found - expected|, where a gold -inf (a row that has seen no key) must be matched exactly
// and anything non-finite where the gold is finite is infinitely wrong.
inline double state_error(double found, double expected) {
  constexpr double inf = std::numeric_limits<double>::infinity();
  if (std::isinf(expected)) return found == expected ? 0.0 : inf;
  if (!std::isfinite(found)) return inf;
  return std::fabs(found - expected);
}

// One step's check as JSON: {b, h, i, j, quantity, line, row, [col], expected, found, the
// rule's parts, pass}.
nlohmann::json step_json(const StepCheck& c);
// The first divergence as JSON, for either algorithm: its step, the formula, cause and
// explanation, and every quantity of this step and of the previous one.
nlohmann::json divergence_json(const FirstDivergence& f);

}  // namespace flashref::verify::detail

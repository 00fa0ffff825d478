// Shared by the states' computation and their judge (states.hpp): one query row's states in
// double, for the gold and for the judge's hypotheses about a failing step.
#pragma once

#include <cstdint>
#include <vector>

#include "flashref/verify/problem_data.hpp"

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

}  // namespace flashref::verify::detail

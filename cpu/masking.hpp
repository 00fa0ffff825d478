// The index comparison of the causal mask, run only on tiles that cross the diagonal.
#pragma once

#include <cstdint>
#include <limits>

#include "plan.hpp"

namespace flashref::cpu::detail {

inline constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// S_ij (query rows x key columns, stride ld): -inf where the key is not visible to the row.
inline void mask_tile(const Plan& plan, std::int64_t i, std::int64_t j, float* S, std::int64_t ld) {
  const std::int64_t r0 = plan.row_begin(i);
  const std::int64_t rows = plan.row_end(i) - r0;
  const std::int64_t cols = plan.col_end(j) - plan.col_begin(j);
  for (std::int64_t r = 0; r < rows; ++r) {
    float* s = S + r * ld;
    for (std::int64_t c = plan.visible_keys(r0 + r, j); c < cols; ++c) s[c] = kNegInf;
  }
}

// S_ij^T (key rows x query columns, stride ld), as the dK/dV pass holds it.
inline void mask_tile_transposed(const Plan& plan, std::int64_t i, std::int64_t j, float* S_T,
                                 std::int64_t ld) {
  const std::int64_t r0 = plan.row_begin(i);
  const std::int64_t rows = plan.row_end(i) - r0;
  const std::int64_t cols = plan.col_end(j) - plan.col_begin(j);
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = plan.visible_keys(r0 + r, j); c < cols; ++c) S_T[c * ld + r] = kNegInf;
  }
}

}  // namespace flashref::cpu::detail

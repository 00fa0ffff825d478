// The partial-attention call for one pair of chunks: a query chunk of this rank against a key
// chunk in hand, placed at their global positions so the mask is the whole problem's.
#pragma once

#include <algorithm>
#include <cstdint>
#include <thread>

#include "flashref/params.hpp"

namespace flashref::ring::detail {

inline Problem block_problem(const Problem& whole, std::int64_t q_begin, std::int64_t q_rows,
                             std::int64_t k_begin, std::int64_t k_rows) {
  Problem p = whole;
  p.S_q = q_rows;
  p.S_k = k_rows;
  p.placement = Placement{q_begin, k_begin, whole.S_q, whole.S_k};
  return p;
}

// Whether any query of the block sees any key of it (the last row sees the most). A block
// that sees none contributes L = -inf and zero gradients, so it is never computed.
inline bool block_sees_a_key(const Problem& block) {
  return block.S_q > 0 && block.S_k > 0 && block.last_visible_key(block.S_q - 1) >= 0;
}

// The OpenMP threads of each inner call: the caller's budget (or the machine's) shared by the
// R ranks that run at once.
inline ExecutionOptions inner_options(ExecutionOptions o, int ranks) {
  const int budget =
      o.num_threads > 0 ? o.num_threads : static_cast<int>(std::thread::hardware_concurrency());
  o.num_threads = std::max(1, budget / ranks);
  return o;
}

}  // namespace flashref::ring::detail

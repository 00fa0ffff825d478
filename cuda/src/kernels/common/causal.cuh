// The causal mask's index math, shared by every kernel. Under a causal mask key k is visible
// to query q iff k <= q + causal_offset (0 for top-left, S_k - S_q for bottom-right). The sums
// are 64-bit: q + offset can leave int's range when S_q and S_k are both near it.
#pragma once

#include <cstdint>

#include "kernels/common/args.hpp"
#include "kernels/common/tile_io.cuh"

namespace flashref::cuda::kernels {

// The last key query row q sees (negative: none).
__device__ __forceinline__ int64_t last_visible_key(const AttnArgs& args, int q) {
  return static_cast<int64_t>(q) + args.causal_offset;
}

// The first query row that sees key k.
__device__ __forceinline__ int64_t first_seeing_query(const AttnArgs& args, int k) {
  return static_cast<int64_t>(k) - args.causal_offset;
}

// Whether query row q sees exactly one key. Its softmax is then the constant 1, so P = 1 and
// dS = 0 exactly, which the backward kernels use: recomputing P as 2^(s' - L') would carry
// L's rounding (relative 1e-5 for the scores of large inputs), and the recomputation form
// P (dP - D) would leave the rounding difference between dP (a product of the kernel) and D
// (a sum of the preprocess) where the true gradient is 0.
// Only a whole row (args.whole_rows): a placed block's row may see keys of other blocks.
__device__ __forceinline__ bool sees_one_key(const AttnArgs& args, int64_t q) {
  return args.whole_rows && (args.S_k == 1 || (args.causal && q + args.causal_offset == 0));
}

// Whether query tile [m0, m0 + rows) holds a row that sees one key (sees_one_key), for the
// kernels that check the rows of such a tile only.
__device__ __forceinline__ bool tile_has_single_key_row(const AttnArgs& args, int m0, int rows) {
  return args.whole_rows && (args.S_k == 1 || (args.causal && -args.causal_offset >= m0 &&
                                               -args.causal_offset < m0 + rows));
}

// The transposed backward's columns (query m0 + 2 t + x for x = 8 nt + c, this thread's) that
// see one key, in a tile where tile_has_single_key_row holds: every column when S_k = 1, else
// the one whose query is the causal diagonal's first row, x = -offset - m0 - 2 t (out of the
// thread's range when not its own). In 32 bits, so that a column's test is one compare.
struct SingleKeyColumns {
  bool every;
  int x;
  __device__ __forceinline__ bool holds(int col) const { return every || col == x; }
};
__device__ __forceinline__ SingleKeyColumns single_key_columns(const AttnArgs& args, int m0,
                                                               int t) {
  const int64_t x = -args.causal_offset - m0 - 2 * t;  // within the tile when the test holds
  return {args.S_k == 1, x < -1 || x > (int64_t{1} << 20) ? -1 : static_cast<int>(x)};
}

}  // namespace flashref::cuda::kernels

// Merging partial attention results by their logsumexp: the step that makes context
// parallelism (and split-key attention) exact.
//
// A query row's keys split into disjoint blocks K(1)..K(n). Attending the row to block r alone
// gives O_r = sum_{j in r} exp(S_j - L_r) V_j and L_r = log sum_{j in r} exp(S_j). Over all keys
//     L = log sum_r exp(L_r)                        (the logsumexp of the blocks' L)
//     O = sum_r exp(L_r - L) O_r                    (weights exp(L_r - L) that sum to 1)
// because exp(S_j - L) = exp(L_r - L) exp(S_j - L_r). Merging two at a time with
//     L_ab = max(L_a, L_b) + log(exp(L_a - max) + exp(L_b - max)),
//     O_ab = exp(L_a - L_ab) O_a + exp(L_b - L_ab) O_b
// is associative and commutative (up to rounding), so blocks merge in any order.
// Fully masked cases, as the library's convention for a row that sees no key (O = 0,
// L = -inf, docs/verification.md): a block whose row saw no key has L_r = -inf and contributes
// nothing (weight exactly 0, its O never read); a row that no block lets see a key ends with
// O = 0 and L = -inf. One finite side and one -inf side give the finite side's O and L
// unchanged, bit for bit. L is the natural-log logsumexp (not base 2, not shifted by the max).
// A NaN or +inf L is not a partial result: it propagates as NaN for the judge to find.
//
// Host memory only. The weights and the combination are computed in double per element and
// stored in the float32 accumulator.
#pragma once

#include <cstdint>

#include "flashref/tensor.hpp"

namespace flashref {

// The running merge of one query block: O in float32, logically (B, S_q, H, d) through the
// view's strides, and L, (B, H, S_q) contiguous float32 (the params' L layout).
struct MergeTarget {
  TensorView O;        // dtype f32; written
  float* L = nullptr;  // written
};

// Sets O = 0 and L = -inf everywhere: the merge of no block (the identity of the merge).
// Throws InvalidArgument("merge.O", ...) unless target.O is float32 and L is not null.
void clear_merge(const MergeTarget& target);

// Merges one block's partial result (O_part of any dtype, logically (B, S_q, H, d) with the
// target's shape; L_part (B, H, S_q) contiguous) into the target, row by row as above.
// Throws InvalidArgument naming the field when shapes differ or a pointer is null.
void merge_into(const MergeTarget& target, const TensorView& O_part, const float* L_part);

// Writes the merged O into `out` (any dtype, same shape), rounding each element once.
void store_merged(const MergeTarget& target, const TensorView& out);

}  // namespace flashref

// FLASHREF_LANE_AT(tile, row0, col0, x): where this lane loads its part of the fragment at
// (row0, col0) of a shared-memory tile, in the operand policy's lane layout x (a: an A
// fragment; b: B from the rows of a tile; t: B from a tile whose rows are the reduction index;
// the policy's Lane has x_row and x_col). It expands to the argument list every Ops::load_*
// takes after its destination:
//   the lane's pointer   tile + (row0 + lane_at.x_row) * kStride + col0 + lane_at.x_col,
//   and its parts        tile, kStride, row0, col0, lane_at.x_row, lane_at.x_col.
// Sm80Fp16Ops hands the pointer to ldmatrix; Sm80Tf32Ops forms its four addresses from the
// parts. Both forms exist so that each policy's address arithmetic is compiled where it was
// when the bf16/f16 and TF32 kernels were separate files: formed in the kernel for ldmatrix,
// inside the load for TF32. Moving either changes ptxas's schedule and registers
// (scripts/sass-compare, docs/perf-notes.md "Kernel families").
//
// Used inside the sm80 kernels, where `lane_at` (T::Ops::Lane) and `kStride` are in scope.
#pragma once

#define FLASHREF_LANE_AT(tile, row0, col0, x)                                                \
  (tile) + ((row0) + lane_at.x##_row) * kStride + (col0) + lane_at.x##_col, (tile), kStride, \
      (row0), (col0), lane_at.x##_row, lane_at.x##_col

// The tiling of one call: tile sizes and counts, each tile's rows, and which key tiles a query
// tile sees under the mask (Algorithm 1 lines 1-3, shared by the forward and both backward
// passes), with the scales and the finishing of rows that the algorithm applies.
//
// The plan is the only reader of the planted faults (flashref/cpu/faults.hpp): each one changes
// what the plan hands the algorithm (the mask, a scale, a loop bound, how rows are finished),
// so the algorithm files name no fault. Without faults every answer is the plain algorithm's.
#pragma once

#include <cmath>
#include <cstdint>
#include <numbers>

#include "flashref/cpu/trace.hpp"
#include "flashref/params.hpp"

namespace flashref::cpu::detail {

// Buffer rows are padded to a multiple of kRowPad and columns to a multiple of kColPad so the
// matrix kernels run whole register blocks; the padding is kept at zero.
inline constexpr std::int64_t kRowPad = 8;
inline constexpr std::int64_t kColPad = 16;

constexpr std::int64_t round_up(std::int64_t n, std::int64_t m) {
  return (n + m - 1) / m * m;
}

class Plan {
 public:
  // faults: the bit set of Options::faults (backend.hpp), already checked.
  Plan(const Problem& problem, const ExecutionOptions& options, std::uint32_t faults);

  const Problem& problem() const { return problem_; }  // the mask as applied (faults may swap it)
  // Alg. 1 line 9, Alg. 2 line 11: the softmax scale of S, as float (1 under Fault::no_scale).
  float scale() const { return scale_; }
  // Alg. 2 lines 16 and 17: the scale applied once to dQ_i and dK_j at the end of their loops
  // (scale(); 1 under Fault::dq_scale, scale() * scale() under Fault::dk_scale).
  float dq_scale() const { return dq_scale_; }
  float dk_scale() const { return dk_scale_; }

  std::int64_t B_q() const { return B_q_; }  // as requested (may exceed S_q)
  std::int64_t B_k() const { return B_k_; }
  std::int64_t T_q() const { return T_q_; }
  std::int64_t T_k() const { return T_k_; }
  // Rows any query (key) tile holds at most, and those padded for buffers used as columns.
  std::int64_t q_rows_max() const { return q_rows_max_; }
  std::int64_t k_rows_max() const { return k_rows_max_; }
  std::int64_t q_pad() const { return round_up(q_rows_max_, kColPad); }
  std::int64_t k_pad() const { return round_up(k_rows_max_, kColPad); }
  std::int64_t d_pad() const { return round_up(problem_.d, kColPad); }

  std::int64_t row_begin(std::int64_t i) const { return i * B_q_; }
  std::int64_t row_end(std::int64_t i) const {
    return i + 1 == T_q_ ? problem_.S_q : (i + 1) * B_q_;
  }
  std::int64_t col_begin(std::int64_t j) const { return j * B_k_; }
  std::int64_t col_end(std::int64_t j) const {
    return j + 1 == T_k_ ? problem_.S_k : (j + 1) * B_k_;
  }

  // skipped: no row of query tile i sees any key of key tile j; full: every row sees every
  // key; diagonal: the tile crosses the mask's boundary and needs the index comparison.
  TileKind kind(std::int64_t i, std::int64_t j) const;
  // Query tile i visits key tiles [0, key_tiles_end(i)); the rest are skipped.
  std::int64_t key_tiles_end(std::int64_t i) const;
  // Alg. 1 line 7's bound: key_tiles_end(i), one less for a partial last query tile under
  // Fault::tail_rows.
  std::int64_t forward_key_tiles_end(std::int64_t i) const;
  // Key tile j is seen by query tiles [query_tiles_begin(j), T_q); T_q when by none.
  std::int64_t query_tiles_begin(std::int64_t j) const;
  // Whether the diagonal tiles compare indices (false only under Fault::diagonal_tiles).
  bool masks_diagonal_tiles() const { return mask_diagonal_; }

  // Alg. 1 line 15: whether O_i is divided by l_i (false only under Fault::unnormalized), and
  // whether a row that saw no key gets O = 0 instead of 0 / 0 (false only under
  // Fault::nan_masked_rows).
  bool normalizes_O() const { return normalizes_O_; }
  bool zeroes_keyless_rows() const { return zeroes_keyless_rows_; }
  // Alg. 1 line 16 for a row that saw a key: L = m + log(l), the natural log (log(l) alone
  // under Fault::lse_unshifted, times log2(e) under Fault::lse_base2).
  float logsumexp(float m, float l) const {
    float L = lse_adds_max_ ? m + std::log(l) : std::log(l);
    if (lse_base2_) L *= std::numbers::log2e_v<float>;
    return L;
  }
  // Alg. 2 line 2: whether D = rowsum(dO * O) is computed (false only under Fault::d_vector,
  // which leaves D = 0).
  bool computes_D() const { return computes_D_; }
  // The query heads summed into each key/value head's dK_j, dV_j, from the group's first:
  // the group size H / H_kv (1 under Fault::gqa_reduction).
  std::int64_t dkdv_heads() const { return dkdv_heads_; }

  // Keys of tile j visible to query row q: [col_begin(j), col_begin(j) + visible_keys(q, j)).
  std::int64_t visible_keys(std::int64_t q, std::int64_t j) const;

  // The trace's name for the pair (query tile i, key tile j) of head (b, h) in `pass`; j = -1
  // names query tile i alone (no key columns, kind full).
  TileRef tile_ref(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j,
                   TracePass pass) const;

 private:
  Problem problem_;
  float scale_, dq_scale_, dk_scale_;
  bool mask_diagonal_, tail_rows_, normalizes_O_, zeroes_keyless_rows_, lse_adds_max_, lse_base2_,
      computes_D_;
  std::int64_t dkdv_heads_;
  std::int64_t B_q_, B_k_, T_q_, T_k_, q_rows_max_, k_rows_max_;
};

}  // namespace flashref::cpu::detail

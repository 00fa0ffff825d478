#include "plan.hpp"

#include <algorithm>

#include "flashref/cpu/backend.hpp"
#include "flashref/cpu/faults.hpp"

namespace flashref::cpu::detail {
namespace {

Problem apply_mask_faults(Problem p, std::uint32_t faults) {
  if (has_fault(faults, Fault::mask_ignored)) p.mask = Mask::none;
  if (has_fault(faults, Fault::mask_alignment)) {
    if (p.mask == Mask::causal_top_left) {
      p.mask = Mask::causal_bottom_right;
    } else if (p.mask == Mask::causal_bottom_right) {
      p.mask = Mask::causal_top_left;
    }
  }
  return p;
}

}  // namespace

Plan::Plan(const Problem& problem, const ExecutionOptions& options, std::uint32_t faults)
    : problem_(apply_mask_faults(problem, faults)),
      scale_(has_fault(faults, Fault::no_scale) ? 1.0f : static_cast<float>(problem.scale)),
      dq_scale_(has_fault(faults, Fault::dq_scale) ? 1.0f : scale_),
      dk_scale_(has_fault(faults, Fault::dk_scale) ? scale_ * scale_ : scale_),
      mask_diagonal_(!has_fault(faults, Fault::diagonal_tiles)),
      tail_rows_(has_fault(faults, Fault::tail_rows)),
      normalizes_O_(!has_fault(faults, Fault::unnormalized)),
      zeroes_keyless_rows_(!has_fault(faults, Fault::nan_masked_rows)),
      lse_adds_max_(!has_fault(faults, Fault::lse_unshifted)),
      lse_base2_(has_fault(faults, Fault::lse_base2)),
      computes_D_(!has_fault(faults, Fault::d_vector)),
      dkdv_heads_(has_fault(faults, Fault::gqa_reduction) ? 1 : problem.group_size()),
      B_q_(options.tile_q > 0 ? options.tile_q : kDefaultTileQ),
      B_k_(options.tile_k > 0 ? options.tile_k : kDefaultTileK),
      T_q_((problem.S_q + B_q_ - 1) / B_q_),
      T_k_((problem.S_k + B_k_ - 1) / B_k_),
      q_rows_max_(std::min(B_q_, problem.S_q)),
      k_rows_max_(std::min(B_k_, problem.S_k)) {}

TileKind Plan::kind(std::int64_t i, std::int64_t j) const {
  if (problem_.mask == Mask::none) return TileKind::full;
  // last_visible_key is non-decreasing in the query row, so the tile's first and last rows
  // bound every row's view.
  const std::int64_t first_row_sees = problem_.last_visible_key(row_begin(i));
  const std::int64_t last_row_sees = problem_.last_visible_key(row_end(i) - 1);
  if (col_begin(j) > last_row_sees) return TileKind::skipped;
  if (col_end(j) - 1 <= first_row_sees) return TileKind::full;
  return TileKind::diagonal;
}

std::int64_t Plan::key_tiles_end(std::int64_t i) const {
  const std::int64_t last_row_sees = problem_.last_visible_key(row_end(i) - 1);
  if (last_row_sees < 0) return 0;
  return std::min(T_k_, last_row_sees / B_k_ + 1);
}

std::int64_t Plan::forward_key_tiles_end(std::int64_t i) const {
  const std::int64_t end = key_tiles_end(i);
  const bool partial_last_tile = i + 1 == T_q_ && problem_.S_q % B_q_ != 0;
  return tail_rows_ && partial_last_tile && end > 0 ? end - 1 : end;
}

std::int64_t Plan::query_tiles_begin(std::int64_t j) const {
  // The first query row that sees key col_begin(j), by bisection on the monotone mask.
  const std::int64_t key = col_begin(j);
  std::int64_t lo = 0, hi = problem_.S_q;  // answer in [lo, hi]; hi means "no row"
  while (lo < hi) {
    const std::int64_t mid = lo + (hi - lo) / 2;
    if (problem_.last_visible_key(mid) >= key) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return lo == problem_.S_q ? T_q_ : lo / B_q_;
}

std::int64_t Plan::visible_keys(std::int64_t q, std::int64_t j) const {
  const std::int64_t n = problem_.last_visible_key(q) - col_begin(j) + 1;
  return std::clamp<std::int64_t>(n, 0, col_end(j) - col_begin(j));
}

TileRef Plan::tile_ref(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j,
                       TracePass pass) const {
  TileRef t;
  t.b = b;
  t.h = h;
  t.h_kv = h / problem_.group_size();
  t.i = i;
  t.j = j;
  t.row_begin = row_begin(i);
  t.row_end = row_end(i);
  t.col_begin = j >= 0 ? col_begin(j) : 0;
  t.col_end = j >= 0 ? col_end(j) : 0;
  t.kind = j >= 0 ? kind(i, j) : TileKind::full;
  t.pass = pass;
  return t;
}

}  // namespace flashref::cpu::detail

// Algorithm 2, the pass that owns dQ: one task per query tile Q_i of one head, looping over
// the key tiles it sees (lines 11, 12, 14, 15, 16 of Algorithm 2).
#include <algorithm>
#include <vector>

#include "backward_passes.hpp"
#include "buffer.hpp"
#include "masking.hpp"
#include "pack.hpp"
#include "pass_state.hpp"

namespace flashref::cpu::detail {
namespace {

// As in the forward (forward.cpp), the tiles of S are held transposed, keys as rows: the key
// tiles stream in as stored and only Q_i and dO_i, loaded once per task, are transposed.
struct DqWorkspace {
  DqWorkspace(const Plan& plan, bool trace)
      : q_pad(plan.q_pad()),
        k_pad(plan.k_pad()),
        k_rows(round_up(plan.k_rows_max(), kRowPad)),
        d(plan.problem().d),
        d_pad(plan.d_pad()),
        Q_i_T(d * q_pad),
        dO_i_T(d * q_pad),
        K_j(k_rows * d_pad),
        V_j(k_rows * d_pad),
        S_T(k_rows * q_pad),
        dP_T(k_rows * q_pad),
        dQ_i(q_pad * d_pad),
        S_seen(trace ? q_pad * k_pad : 0),
        P_seen(trace ? q_pad * k_pad : 0),
        dP_seen(trace ? q_pad * k_pad : 0),
        dS_seen(trace ? q_pad * k_pad : 0) {}

  std::size_t q_pad, k_pad, k_rows, d, d_pad;
  FloatBuffer Q_i_T;   // d x B_q: right operand of line 11
  FloatBuffer dO_i_T;  // d x B_q: right operand of line 14
  FloatBuffer K_j;     // B_k x d: left operand of line 11, right operand of line 16
  FloatBuffer V_j;     // B_k x d: left operand of line 14
  FloatBuffer S_T;     // B_k x B_q: S^T (line 11), then P^T in place (line 12)
  FloatBuffer dP_T;    // B_k x B_q: dP^T (line 14), then dS^T in place (line 15)
  FloatBuffer dQ_i;    // B_q x d: the accumulator of line 16
  // Trace only: S, P, dP, dS turned back to (query rows x key columns).
  FloatBuffer S_seen, P_seen, dP_seen, dS_seen;
};

}  // namespace

struct DqTask {
  std::int64_t b, h, i;
};

// Tasks: costly first (plan.key_tiles_end(i) key tiles each).
struct DqPass::Impl : PassState<DqWorkspace, DqTask> {
  using PassState::PassState;

  TileRef tile_ref(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) const {
    return plan.tile_ref(b, h, i, j, TracePass::dq);
  }

  template <bool kTrace>
  void query_tile(DqWorkspace& ws, std::int64_t b, std::int64_t h, std::int64_t i) const;
};

template <bool kTrace>
void DqPass::Impl::query_tile(DqWorkspace& ws, std::int64_t b, std::int64_t h,
                              std::int64_t i) const {
  const Problem& p = plan.problem();
  const std::int64_t d = p.d, d_pad = plan.d_pad(), q_pad = plan.q_pad(), k_pad = plan.k_pad();
  const std::int64_t h_kv = h / p.group_size();
  const std::int64_t r0 = plan.row_begin(i);
  const std::int64_t rows = plan.row_end(i) - r0;
  const std::int64_t M = round_up(rows, kRowPad);  // rows of dQ_i
  const std::int64_t N = round_up(rows, kColPad);  // columns of S^T, dP^T
  const float* L_i = stats.L.data() + stats.index(p, b, h, r0);
  const float* D_i = stats.D.data() + stats.index(p, b, h, r0);

  // Alg. 2 line 10: load Q_i, dO_i (transposed: the right operands of lines 11 and 14), with
  // L_i and D_i computed before the passes; dQ_i = 0.
  load_rows_transposed(params.q, b, h, r0, rows, ws.Q_i_T.data(), q_pad);
  load_rows_transposed(params.dO, b, h, r0, rows, ws.dO_i_T.data(), q_pad);
  std::fill_n(ws.dQ_i.data(), M * d_pad, 0.0f);

  const std::int64_t j_end = plan.key_tiles_end(i);
  // Alg. 2 line 6, this pass's loop: the key tiles query tile i sees.
  for (std::int64_t j = 0; j < j_end; ++j) {
    const std::int64_t c0 = plan.col_begin(j);
    const std::int64_t cols = plan.col_end(j) - c0;
    const std::int64_t Mk = round_up(cols, kRowPad);

    // Alg. 2 line 7: load K_j, V_j.
    load_rows(params.k, b, h_kv, c0, cols, Mk, ws.K_j.data(), d_pad);
    load_rows(params.v, b, h_kv, c0, cols, Mk, ws.V_j.data(), d_pad);

    // Alg. 2 line 11: S_ij = Q_i K_j^T * scale, held as S_ij^T = K_j Q_i^T * scale (-inf
    // where masked, diagonal tiles only).
    k.gemm(ws.S_T.data(), q_pad, ws.K_j.data(), d_pad, ws.Q_i_T.data(), q_pad, Mk, N, d,
           plan.scale(), false, false, nullptr);
    if (plan.kind(i, j) == TileKind::diagonal && plan.masks_diagonal_tiles()) {
      mask_tile_transposed(plan, i, j, ws.S_T.data(), q_pad);
    }
    if constexpr (kTrace) transpose(ws.S_T.data(), q_pad, cols, rows, ws.S_seen.data(), k_pad);

    // Alg. 2 line 12: P_ij = exp(S_ij - L_i).
    k.exp_sub_cols(ws.S_T.data(), q_pad, cols, rows, L_i);
    if constexpr (kTrace) transpose(ws.S_T.data(), q_pad, cols, rows, ws.P_seen.data(), k_pad);

    // Alg. 2 line 14: dP_ij = dO_i V_j^T, held as dP_ij^T = V_j dO_i^T.
    k.gemm(ws.dP_T.data(), q_pad, ws.V_j.data(), d_pad, ws.dO_i_T.data(), q_pad, Mk, N, d, 1.0f,
           false, false, nullptr);
    if constexpr (kTrace) transpose(ws.dP_T.data(), q_pad, cols, rows, ws.dP_seen.data(), k_pad);

    // Alg. 2 line 15: dS_ij = P_ij * (dP_ij - D_i). The scale is applied once, to dQ_i at the
    // end, and dS is rounded to the input dtype for the product of line 16.
    k.ds_cols(ws.dP_T.data(), ws.S_T.data(), q_pad, cols, rows, D_i);
    if constexpr (kTrace) transpose(ws.dP_T.data(), q_pad, cols, rows, ws.dS_seen.data(), k_pad);
    if (p.dtype != DType::f32) {
      k.round_tile(ws.dP_T.data(), q_pad, cols, rows, p.dtype == DType::f16);
    }

    // Alg. 2 line 16: dQ_i += dS_ij K_j, where dS_ij is the transpose of the tile held.
    k.gemm(ws.dQ_i.data(), d_pad, ws.dP_T.data(), q_pad, ws.K_j.data(), d_pad, M, d_pad, cols, 1.0f,
           true, true, nullptr);

    if constexpr (kTrace) {
      DqStep step;
      step.tile = tile_ref(b, h, i, j);
      step.S = {ws.S_seen.data(), rows, cols, k_pad};
      step.P = {ws.P_seen.data(), rows, cols, k_pad};
      step.dP = {ws.dP_seen.data(), rows, cols, k_pad};
      step.dS = {ws.dS_seen.data(), rows, cols, k_pad};
      step.dQ = {ws.dQ_i.data(), rows, d, d_pad};
      trace->dq_step(step);
    }
  }
  if constexpr (kTrace) {
    for (std::int64_t j = j_end; j < plan.T_k(); ++j) {
      TileRef skipped = tile_ref(b, h, i, j);
      skipped.kind = TileKind::skipped;
      trace->tile_skipped(skipped);
    }
  }

  // dQ_i = scale * dQ_i (line 15's 1/sqrt(d), moved out of the loop); write dQ_i.
  const float dq_scale = plan.dq_scale();
  for (std::int64_t r = 0; r < rows; ++r) {
    float* dQ = ws.dQ_i.data() + r * d_pad;
    for (std::int64_t c = 0; c < d; ++c) dQ[c] *= dq_scale;
  }
  round_rows(ws.dQ_i.data(), d_pad, rows, d, p.grad_dtype);
  store_rows(params.dq, b, h, r0, rows, ws.dQ_i.data(), d_pad);

  if constexpr (kTrace) {
    DqTileEnd end;
    end.b = b;
    end.h = h;
    end.i = i;
    end.row_begin = r0;
    end.row_end = r0 + rows;
    end.dQ = {ws.dQ_i.data(), rows, d, d_pad};
    trace->dq_tile_end(end);
  }
}

DqPass::DqPass(const BackwardParams& params, const Plan& plan, const RowStats& stats,
               TraceObserver* trace)
    : impl_(std::make_unique<Impl>(params, plan, stats, trace)) {
  const Problem& p = plan.problem();
  for (std::int64_t b = 0; b < p.B; ++b) {
    for (std::int64_t h = 0; h < p.H; ++h) {
      for (std::int64_t i = 0; i < plan.T_q(); ++i) impl_->tasks.push_back({b, h, i});
    }
  }
  // The tasks with the most key tiles first.
  impl_->schedule([&plan](const DqTask& x, const DqTask& y) {
    return plan.key_tiles_end(x.i) > plan.key_tiles_end(y.i);
  });
}

DqPass::~DqPass() = default;

void DqPass::run() {
  const Impl& impl = *impl_;
  impl_->run([&impl](DqWorkspace& ws, const DqTask& t, auto trace) {
    impl.query_tile<decltype(trace)::value>(ws, t.b, t.h, t.i);
  });
}

}  // namespace flashref::cpu::detail

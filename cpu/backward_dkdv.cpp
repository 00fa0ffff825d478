// Algorithm 2, the pass that owns dK and dV: one task per key tile K_j, V_j of one key/value
// head, looping over the query heads that share it (in increasing order) and, for each, over
// the query tiles that see the key tile (lines 11-15 and 17 of Algorithm 2).
//
// Unlike the forward and the dQ pass, this pass holds the tiles of S as the paper writes them,
// queries as rows: the tile it owns, K_j and V_j, is the one transposed (once per task), and
// the query tiles stream in as stored. Lines 13 and 17 read P and dS transposed.
#include <algorithm>
#include <vector>

#include "backward_passes.hpp"
#include "buffer.hpp"
#include "masking.hpp"
#include "pack.hpp"
#include "pass_state.hpp"

namespace flashref::cpu::detail {
namespace {

struct DkDvWorkspace {
  DkDvWorkspace(const Plan& plan, bool trace)
      : q_rows(round_up(plan.q_rows_max(), kRowPad)),
        k_pad(plan.k_pad()),
        d(plan.problem().d),
        d_pad(plan.d_pad()),
        K_j_T(d * k_pad),
        V_j_T(d * k_pad),
        Q_i(q_rows * d_pad),
        dO_i(q_rows * d_pad),
        S(q_rows * k_pad),
        P_rounded(plan.problem().dtype == DType::f32 ? 0 : q_rows * k_pad),
        dP(q_rows * k_pad),
        dK_j(k_pad * d_pad),
        dV_j(k_pad * d_pad),
        S_seen(trace ? q_rows * k_pad : 0),
        dP_seen(trace ? q_rows * k_pad : 0),
        dS_seen(trace ? q_rows * k_pad : 0) {}

  std::size_t q_rows, k_pad, d, d_pad;
  FloatBuffer K_j_T;      // d x B_k: right operand of line 11
  FloatBuffer V_j_T;      // d x B_k: right operand of line 14
  FloatBuffer Q_i;        // B_q x d: left operand of line 11, right operand of line 17
  FloatBuffer dO_i;       // B_q x d: left operand of line 14, right operand of line 13
  FloatBuffer S;          // B_q x B_k: S (line 11), then P in place (line 12)
  FloatBuffer P_rounded;  // P in the input dtype for line 13 (16-bit dtypes only)
  FloatBuffer dP;         // B_q x B_k: dP (line 14), then dS in place (line 15)
  FloatBuffer dK_j;       // B_k x d: the accumulator of line 17
  FloatBuffer dV_j;       // B_k x d: the accumulator of line 13
  FloatBuffer S_seen, dP_seen, dS_seen;  // copies for the trace only
};

struct DkDvTask {
  std::int64_t b, h_kv, j;
};

}  // namespace

// Tasks: costly first (the number of query tiles that see key tile j).
struct DkDvPass::Impl : PassState<DkDvWorkspace, DkDvTask> {
  using PassState::PassState;

  // The query heads whose gradients flow into key/value head h_kv: [first, end).
  std::int64_t first_head(std::int64_t h_kv) const { return h_kv * plan.problem().group_size(); }
  std::int64_t end_head(std::int64_t h_kv) const { return first_head(h_kv) + plan.dkdv_heads(); }

  TileRef tile_ref(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) const {
    return plan.tile_ref(b, h, i, j, TracePass::dkdv);
  }

  template <bool kTrace>
  void key_tile(DkDvWorkspace& ws, std::int64_t b, std::int64_t h_kv, std::int64_t j) const;

  template <bool kTrace>
  void query_tile(DkDvWorkspace& ws, std::int64_t b, std::int64_t h, std::int64_t i,
                  std::int64_t j) const;
};

template <bool kTrace>
void DkDvPass::Impl::key_tile(DkDvWorkspace& ws, std::int64_t b, std::int64_t h_kv,
                              std::int64_t j) const {
  const Problem& p = plan.problem();
  const std::int64_t d = p.d, d_pad = plan.d_pad(), k_pad = plan.k_pad();
  const std::int64_t c0 = plan.col_begin(j);
  const std::int64_t cols = plan.col_end(j) - c0;
  const std::int64_t M = round_up(cols, kRowPad);  // rows of dK_j, dV_j

  // Alg. 2 line 7: load K_j, V_j (transposed: the right operands of lines 11 and 14);
  // dK_j = 0, dV_j = 0.
  load_rows_transposed(params.k, b, h_kv, c0, cols, ws.K_j_T.data(), k_pad);
  load_rows_transposed(params.v, b, h_kv, c0, cols, ws.V_j_T.data(), k_pad);
  std::fill_n(ws.dK_j.data(), M * d_pad, 0.0f);
  std::fill_n(ws.dV_j.data(), M * d_pad, 0.0f);

  const std::int64_t i_begin = plan.query_tiles_begin(j);
  for (std::int64_t h = first_head(h_kv); h < end_head(h_kv); ++h) {
    if constexpr (kTrace) {
      for (std::int64_t i = 0; i < i_begin; ++i) {
        TileRef skipped = tile_ref(b, h, i, j);
        skipped.kind = TileKind::skipped;
        trace->tile_skipped(skipped);
      }
    }
    // Alg. 2 line 9: for i = 1..T_q, the query tiles at or below the causal diagonal.
    for (std::int64_t i = i_begin; i < plan.T_q(); ++i) query_tile<kTrace>(ws, b, h, i, j);
  }

  // Alg. 2 line 19: write dK_j = scale * dK_j (line 15's 1/sqrt(d), moved out of the loops)
  // and dV_j.
  const float dk_scale = plan.dk_scale();
  for (std::int64_t r = 0; r < cols; ++r) {
    float* dK = ws.dK_j.data() + r * d_pad;
    for (std::int64_t c = 0; c < d; ++c) dK[c] *= dk_scale;
  }
  round_rows(ws.dK_j.data(), d_pad, cols, d, p.grad_dtype);
  round_rows(ws.dV_j.data(), d_pad, cols, d, p.grad_dtype);
  store_rows(params.dk, b, h_kv, c0, cols, ws.dK_j.data(), d_pad);
  store_rows(params.dv, b, h_kv, c0, cols, ws.dV_j.data(), d_pad);

  if constexpr (kTrace) {
    DkDvTileEnd end;
    end.b = b;
    end.h_kv = h_kv;
    end.j = j;
    end.col_begin = c0;
    end.col_end = c0 + cols;
    end.dK = {ws.dK_j.data(), cols, d, d_pad};
    end.dV = {ws.dV_j.data(), cols, d, d_pad};
    trace->dkdv_tile_end(end);
  }
}

template <bool kTrace>
void DkDvPass::Impl::query_tile(DkDvWorkspace& ws, std::int64_t b, std::int64_t h, std::int64_t i,
                                std::int64_t j) const {
  const Problem& p = plan.problem();
  const std::int64_t d = p.d, d_pad = plan.d_pad(), k_pad = plan.k_pad();
  const std::int64_t cols = plan.col_end(j) - plan.col_begin(j);
  const std::int64_t Mk = round_up(cols, kRowPad);  // rows of dK_j, dV_j
  const std::int64_t N = round_up(cols, kColPad);   // columns of S, dP
  const std::int64_t r0 = plan.row_begin(i);
  const std::int64_t rows = plan.row_end(i) - r0;
  const std::int64_t M = round_up(rows, kRowPad);  // rows of S, dP
  const float* L_i = stats.L.data() + stats.index(p, b, h, r0);
  const float* D_i = stats.D.data() + stats.index(p, b, h, r0);

  // Alg. 2 line 10: load Q_i, dO_i, with L_i and D_i computed before the passes.
  load_rows(params.q, b, h, r0, rows, M, ws.Q_i.data(), d_pad);
  load_rows(params.dO, b, h, r0, rows, M, ws.dO_i.data(), d_pad);

  // Alg. 2 line 11: S_ij = Q_i K_j^T * scale (-inf where masked, diagonal tiles only).
  k.gemm(ws.S.data(), k_pad, ws.Q_i.data(), d_pad, ws.K_j_T.data(), k_pad, M, N, d, plan.scale(),
         false, false, nullptr);
  if (plan.kind(i, j) == TileKind::diagonal && plan.masks_diagonal_tiles()) {
    mask_tile(plan, i, j, ws.S.data(), k_pad);
  }
  if constexpr (kTrace) std::copy_n(ws.S.data(), M * k_pad, ws.S_seen.data());

  // Alg. 2 line 12: P_ij = exp(S_ij - L_i).
  k.exp_sub_rows(ws.S.data(), k_pad, rows, cols, L_i);

  // Alg. 2 line 13: dV_j += P_ij^T dO_i, with P in the input dtype as a kernel multiplies it.
  const float* P = ws.S.data();
  if (p.dtype != DType::f32) {
    std::copy_n(ws.S.data(), M * k_pad, ws.P_rounded.data());
    k.round_tile(ws.P_rounded.data(), k_pad, rows, cols, p.dtype == DType::f16);
    P = ws.P_rounded.data();
  }
  k.gemm(ws.dV_j.data(), d_pad, P, k_pad, ws.dO_i.data(), d_pad, Mk, d_pad, rows, 1.0f, true, true,
         nullptr);

  // Alg. 2 line 14: dP_ij = dO_i V_j^T.
  k.gemm(ws.dP.data(), k_pad, ws.dO_i.data(), d_pad, ws.V_j_T.data(), k_pad, M, N, d, 1.0f, false,
         false, nullptr);
  if constexpr (kTrace) std::copy_n(ws.dP.data(), M * k_pad, ws.dP_seen.data());

  // Alg. 2 line 15: dS_ij = P_ij * (dP_ij - D_i), unscaled (the scale goes on dK_j at the end),
  // rounded to the input dtype for line 17.
  k.ds_rows(ws.dP.data(), ws.S.data(), k_pad, rows, cols, D_i);
  if constexpr (kTrace) std::copy_n(ws.dP.data(), M * k_pad, ws.dS_seen.data());
  if (p.dtype != DType::f32) {
    k.round_tile(ws.dP.data(), k_pad, rows, cols, p.dtype == DType::f16);
  }

  // Alg. 2 line 17: dK_j += dS_ij^T Q_i.
  k.gemm(ws.dK_j.data(), d_pad, ws.dP.data(), k_pad, ws.Q_i.data(), d_pad, Mk, d_pad, rows, 1.0f,
         true, true, nullptr);

  if constexpr (kTrace) {
    DkDvStep step;
    step.tile = tile_ref(b, h, i, j);
    step.S = {ws.S_seen.data(), rows, cols, k_pad};
    step.P = {ws.S.data(), rows, cols, k_pad};
    step.dP = {ws.dP_seen.data(), rows, cols, k_pad};
    step.dS = {ws.dS_seen.data(), rows, cols, k_pad};
    step.dV = {ws.dV_j.data(), cols, d, d_pad};
    step.dK = {ws.dK_j.data(), cols, d, d_pad};
    trace->dkdv_step(step);
  }
}

DkDvPass::DkDvPass(const BackwardParams& params, const Plan& plan, const RowStats& stats,
                   TraceObserver* trace)
    : impl_(std::make_unique<Impl>(params, plan, stats, trace)) {
  const Problem& p = plan.problem();
  for (std::int64_t b = 0; b < p.B; ++b) {
    for (std::int64_t h_kv = 0; h_kv < p.H_kv; ++h_kv) {
      for (std::int64_t j = 0; j < plan.T_k(); ++j) impl_->tasks.push_back({b, h_kv, j});
    }
  }
  // The key tiles seen by the most query tiles first.
  impl_->schedule([&plan](const DkDvTask& x, const DkDvTask& y) {
    return plan.query_tiles_begin(x.j) < plan.query_tiles_begin(y.j);
  });
}

DkDvPass::~DkDvPass() = default;

void DkDvPass::run() {
  const Impl& impl = *impl_;
  impl_->run([&impl](DkDvWorkspace& ws, const DkDvTask& t, auto trace) {
    impl.key_tile<decltype(trace)::value>(ws, t.b, t.h_kv, t.j);
  });
}

}  // namespace flashref::cpu::detail

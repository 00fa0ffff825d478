// Algorithm 1: the FlashAttention-2 forward pass, one task per query tile Q_i of one head.
//
// Each task keeps its tile's O_i, l_i, m_i in float32 buffers, streams the key tiles
// K_j, V_j past them with the online softmax, and writes O_i and L_i once at the end. Nothing
// of size S_q x S_k exists: the largest buffer is one B_q x B_k tile of S.
#include <algorithm>
#include <cstring>
#include <vector>

#include "algorithms.hpp"
#include "buffer.hpp"
#include "flashref/cpu/trace.hpp"
#include "kernels.hpp"
#include "masking.hpp"
#include "pack.hpp"
#include "plan.hpp"

namespace flashref::cpu::detail {
namespace {

// One thread's tile buffers. Rows are padded to kRowPad, columns used as a product's N to
// kColPad (plan.hpp).
//
// The tiles of S are held transposed, keys as rows: S_ij^T = K_j Q_i^T. The key tiles, which
// change at every step, then enter the products as stored (row-major, one copy each), and only
// Q_i, loaded once per task, is transposed. The online softmax runs down the columns, one
// query per vector lane.
struct ForwardWorkspace {
  ForwardWorkspace(const Plan& plan, bool trace)
      : q_pad(plan.q_pad()),
        k_rows(round_up(plan.k_rows_max(), kRowPad)),
        d(plan.problem().d),
        d_pad(plan.d_pad()),
        Q_i_T(d * q_pad),
        K_j(k_rows * d_pad),
        V_j(plan.k_rows_max() * d_pad),
        S_T(k_rows * q_pad),
        O_i(q_pad * d_pad),
        m_i(q_pad),
        l_i(q_pad),
        rescale(q_pad),
        L_i(q_pad),
        scratch(2 * q_pad),
        S_seen(trace ? q_pad * plan.k_pad() : 0),
        P_seen(trace ? q_pad * plan.k_pad() : 0),
        m_old(trace ? q_pad : 0),
        Q_seen(trace ? q_pad * d : 0) {}

  std::size_t q_pad, k_rows, d, d_pad;
  FloatBuffer Q_i_T;  // d x B_q: Q_i transposed, right operand of line 9
  FloatBuffer K_j;    // B_k x d: left operand of line 9
  FloatBuffer V_j;    // B_k x d: right operand of line 13
  FloatBuffer S_T;    // B_k x B_q: S_ij^T (line 9), then P~_ij^T in place (line 11)
  FloatBuffer O_i;    // B_q x d: the accumulator of line 13
  FloatBuffer m_i, l_i, rescale, L_i, scratch;
  FloatBuffer S_seen, P_seen, m_old, Q_seen;  // for the trace only (S and P~ as B_q x B_k)
};

class Forward {
 public:
  Forward(const ForwardParams& params, std::uint32_t faults)
      : params_(params), plan_(params.problem, params.options, faults), kernels_(kernels()) {}

  const Plan& plan() const { return plan_; }

  TraceGrid grid() const {
    return {params_.problem, plan_.B_q(), plan_.B_k(),
            plan_.T_q(),     plan_.T_k(), params_.problem.scale};
  }

  // Lines 5-18 for query tile i of head (b, h). With kTrace, reports each step to `trace`.
  template <bool kTrace>
  void query_tile(ForwardWorkspace& ws, std::int64_t b, std::int64_t h, std::int64_t i,
                  TraceObserver* trace) const;

 private:
  TileRef tile_ref(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) const {
    return plan_.tile_ref(b, h, i, j, TracePass::forward);
  }

  // Lines 15-16 with the guards for rows that saw no key.
  void finish_rows(ForwardWorkspace& ws, std::int64_t rows) const;

  const ForwardParams& params_;
  Plan plan_;
  const Kernels& kernels_;
};

template <bool kTrace>
void Forward::query_tile(ForwardWorkspace& ws, std::int64_t b, std::int64_t h, std::int64_t i,
                         TraceObserver* trace) const {
  const Problem& p = plan_.problem();
  const std::int64_t d = p.d, d_pad = plan_.d_pad(), q_pad = plan_.q_pad();
  const std::int64_t k_pad = plan_.k_pad();
  const std::int64_t h_kv = h / p.group_size();
  const std::int64_t r0 = plan_.row_begin(i);
  const std::int64_t rows = plan_.row_end(i) - r0;
  const std::int64_t M = round_up(rows, kRowPad);  // rows of O_i
  const std::int64_t N = round_up(rows, kColPad);  // columns of S_ij^T
  const Kernels& k = kernels_;

  // Alg. 1 line 5: load Q_i (transposed, the right operand of line 9).
  load_rows_transposed(params_.q, b, h, r0, rows, ws.Q_i_T.data(), q_pad);
  // Alg. 1 line 6: O_i(0) = 0, l_i(0) = 0, m_i(0) = -inf.
  std::fill_n(ws.O_i.data(), M * d_pad, 0.0f);
  std::fill_n(ws.l_i.data(), rows, 0.0f);
  std::fill_n(ws.m_i.data(), rows, kNegInf);
  if constexpr (kTrace) {
    transpose(ws.Q_i_T.data(), q_pad, d, rows, ws.Q_seen.data(), d);
    trace->query_tile_begin(tile_ref(b, h, i, -1), {ws.Q_seen.data(), rows, d, d});
  }

  const std::int64_t j_end = plan_.forward_key_tiles_end(i);
  // Alg. 1 line 7: for j = 1..T_k (the key tiles past j_end lie above the causal diagonal).
  for (std::int64_t j = 0; j < j_end; ++j) {
    const std::int64_t c0 = plan_.col_begin(j);
    const std::int64_t cols = plan_.col_end(j) - c0;
    const TileKind kind = plan_.kind(i, j);

    // Alg. 1 line 8: load K_j, V_j.
    load_rows(params_.k, b, h_kv, c0, cols, round_up(cols, kRowPad), ws.K_j.data(), d_pad);
    load_rows(params_.v, b, h_kv, c0, cols, cols, ws.V_j.data(), d_pad);

    // Alg. 1 line 9: S_ij = Q_i K_j^T * scale, held as S_ij^T = K_j Q_i^T * scale; on a
    // diagonal tile, -inf past each row's last visible key (the algorithm's only index
    // comparison).
    k.gemm(ws.S_T.data(), q_pad, ws.K_j.data(), d_pad, ws.Q_i_T.data(), q_pad,
           round_up(cols, kRowPad), N, d, plan_.scale(), false, false, nullptr);
    if (kind == TileKind::diagonal && plan_.masks_diagonal_tiles()) {
      mask_tile_transposed(plan_, i, j, ws.S_T.data(), q_pad);
    }
    if constexpr (kTrace) {
      transpose(ws.S_T.data(), q_pad, cols, rows, ws.S_seen.data(), k_pad);
      std::copy_n(ws.m_i.data(), rows, ws.m_old.data());
    }

    // Alg. 1 line 10: m_i(j) = max(m_i(j-1), rowmax(S_ij)).
    // Alg. 1 line 11: P~_ij = exp(S_ij - m_i(j)).
    // Alg. 1 line 12: l_i(j) = exp(m_i(j-1) - m_i(j)) l_i(j-1) + rowsum(P~_ij).
    k.online_softmax_cols(ws.S_T.data(), q_pad, cols, rows, ws.m_i.data(), ws.l_i.data(),
                          ws.rescale.data(), ws.scratch.data());
    if constexpr (kTrace) transpose(ws.S_T.data(), q_pad, cols, rows, ws.P_seen.data(), k_pad);
    // A kernel multiplies P~ in the input dtype: round it before line 13 (l keeps the
    // unrounded sum, as in FlashAttention-2).
    if (p.dtype != DType::f32) {
      k.round_tile(ws.S_T.data(), q_pad, cols, rows, p.dtype == DType::f16);
    }

    // Alg. 1 line 13: O_i(j) = diag(exp(m_i(j-1) - m_i(j))) O_i(j-1) + P~_ij V_j, where
    // P~_ij is the transpose of the tile held (the product applies the diagonal rescale to
    // O_i(j-1) as it adds to it).
    k.gemm(ws.O_i.data(), d_pad, ws.S_T.data(), q_pad, ws.V_j.data(), d_pad, M, d_pad, cols, 1.0f,
           true, true, ws.rescale.data());

    if constexpr (kTrace) {
      ForwardStep step;
      step.tile = tile_ref(b, h, i, j);
      step.S = {ws.S_seen.data(), rows, cols, k_pad};
      step.m_old = {ws.m_old.data(), static_cast<std::size_t>(rows)};
      step.m_new = {ws.m_i.data(), static_cast<std::size_t>(rows)};
      step.rescale = {ws.rescale.data(), static_cast<std::size_t>(rows)};
      step.P_tilde = {ws.P_seen.data(), rows, cols, k_pad};
      step.l = {ws.l_i.data(), static_cast<std::size_t>(rows)};
      step.O = {ws.O_i.data(), rows, d, d_pad};
      trace->forward_step(step);
    }
  }
  if constexpr (kTrace) {
    for (std::int64_t j = j_end; j < plan_.T_k(); ++j) {
      TileRef skipped = tile_ref(b, h, i, j);
      skipped.kind = TileKind::skipped;
      trace->tile_skipped(skipped);
    }
  }

  // Alg. 1 lines 15-16: O_i = diag(l_i)^-1 O_i, L_i = m_i + log(l_i).
  finish_rows(ws, rows);
  round_rows(ws.O_i.data(), d_pad, rows, d, p.dtype);

  // Alg. 1 lines 17-18: write O_i and L_i.
  store_rows(params_.o, b, h, r0, rows, ws.O_i.data(), d_pad);
  std::copy_n(ws.L_i.data(), rows, params_.lse + (b * p.H + h) * p.S_q + r0);

  if constexpr (kTrace) {
    ForwardTileEnd end;
    end.b = b;
    end.h = h;
    end.i = i;
    end.row_begin = r0;
    end.row_end = r0 + rows;
    end.m = {ws.m_i.data(), static_cast<std::size_t>(rows)};
    end.l = {ws.l_i.data(), static_cast<std::size_t>(rows)};
    end.O = {ws.O_i.data(), rows, d, d_pad};
    end.L = {ws.L_i.data(), static_cast<std::size_t>(rows)};
    trace->query_tile_end(end);
  }
}

void Forward::finish_rows(ForwardWorkspace& ws, std::int64_t rows) const {
  const std::int64_t d = plan_.problem().d, d_pad = plan_.d_pad();
  for (std::int64_t r = 0; r < rows; ++r) {
    float* O = ws.O_i.data() + r * d_pad;
    const float m = ws.m_i.data()[r];
    const float l = ws.l_i.data()[r];
    // l = 0 exactly when the row saw no visible key (any key it sees adds P~ = exp(0) = 1 for
    // its max). A NaN input makes l NaN: such a row goes on to O = NaN, never to a silent 0.
    const bool sees_a_key = l != 0.0f;

    // Alg. 1 line 15: O_i = diag(l_i)^-1 O_i; a row that sees no key gets O = 0, not 0/0.
    if (plan_.normalizes_O()) {
      if (sees_a_key || !plan_.zeroes_keyless_rows()) {
        for (std::int64_t c = 0; c < d; ++c) O[c] /= l;
      } else {
        std::fill_n(O, d, 0.0f);
      }
    }

    // Alg. 1 line 16: L_i = m_i + log(l_i); -inf for a row that sees no key.
    ws.L_i.data()[r] = sees_a_key ? plan_.logsumexp(m, l) : kNegInf;
  }
}

}  // namespace

void run_forward(const ForwardParams& params, const Options& options) {
  const Forward forward(params, options.faults);
  const Plan& plan = forward.plan();
  const Problem& p = plan.problem();

  if (TraceObserver* trace = options.trace) {
    // One thread in the natural order, so the trace reads the same on every run.
    ForwardWorkspace ws(plan, true);
    trace->forward_begin(forward.grid());
    for (std::int64_t b = 0; b < p.B; ++b) {
      for (std::int64_t h = 0; h < p.H; ++h) {
        for (std::int64_t i = 0; i < plan.T_q(); ++i) forward.query_tile<true>(ws, b, h, i, trace);
      }
    }
    return;
  }

  // Tasks (b, h, i), the ones with the most key tiles first so that the dynamic schedule
  // ends with short tasks (under a causal mask the cost grows with i).
  struct Task {
    std::int64_t b, h, i, cost;
  };
  std::vector<Task> tasks;
  tasks.reserve(static_cast<std::size_t>(p.B * p.H * plan.T_q()));
  for (std::int64_t b = 0; b < p.B; ++b) {
    for (std::int64_t h = 0; h < p.H; ++h) {
      for (std::int64_t i = 0; i < plan.T_q(); ++i) {
        tasks.push_back({b, h, i, plan.key_tiles_end(i)});
      }
    }
  }
  std::stable_sort(tasks.begin(), tasks.end(),
                   [](const Task& x, const Task& y) { return x.cost > y.cost; });

  const auto n_tasks = static_cast<std::int64_t>(tasks.size());
  auto workspaces = make_workspaces<ForwardWorkspace>(
      thread_count(params.options, n_tasks), [&plan] { return ForwardWorkspace(plan, false); });
  for_each_task(n_tasks, workspaces, [&](ForwardWorkspace& ws, std::int64_t t) {
    const Task& task = tasks[static_cast<std::size_t>(t)];
    forward.query_tile<false>(ws, task.b, task.h, task.i, nullptr);
  });
}

}  // namespace flashref::cpu::detail

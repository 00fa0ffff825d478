// Algorithm 2: line 2 (D = rowsum(dO * O)) for every query row, then the two passes
// (backward_dq.cpp, backward_dkdv.cpp).
#include <algorithm>
#include <cmath>
#include <vector>

#include "algorithms.hpp"
#include "backward_passes.hpp"
#include "buffer.hpp"
#include "kernels.hpp"
#include "masking.hpp"
#include "pack.hpp"

namespace flashref::cpu::detail {
namespace {

struct RowStatsWorkspace {
  explicit RowStatsWorkspace(const Plan& plan)
      : O_i(static_cast<std::size_t>(plan.q_rows_max() * plan.problem().d)),
        dO_i(static_cast<std::size_t>(plan.q_rows_max() * plan.problem().d)) {}
  FloatBuffer O_i, dO_i;
};

// D and the guarded L for query tile i of head (b, h).
void row_stats_tile(const BackwardParams& params, const Plan& plan, RowStatsWorkspace& ws,
                    std::int64_t b, std::int64_t h, std::int64_t i, RowStats& stats) {
  const Problem& p = plan.problem();
  const std::int64_t d = p.d;
  const std::int64_t r0 = plan.row_begin(i);
  const std::int64_t rows = plan.row_end(i) - r0;
  load_rows(params.o, b, h, r0, rows, rows, ws.O_i.data(), d);
  load_rows(params.dO, b, h, r0, rows, rows, ws.dO_i.data(), d);
  const std::int64_t first = stats.index(p, b, h, r0);
  // Alg. 2 line 2: D_i = rowsum(dO_i * O_i).
  float* D_i = stats.D.data() + first;
  kernels().row_dots(ws.dO_i.data(), ws.O_i.data(), d, rows, d, D_i);
  if (!plan.computes_D()) std::fill_n(D_i, rows, 0.0f);
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t at = first + r;
    const float L = params.lse[at];
    stats.L[static_cast<std::size_t>(at)] = L == kNegInf ? -kNegInf : L;
  }
}

}  // namespace

void run_backward(const BackwardParams& params, const Options& options) {
  const Plan plan(params.problem, params.options, options.faults);
  const Problem& p = plan.problem();
  TraceObserver* trace = options.trace;

  const auto n_rows = static_cast<std::size_t>(p.B * p.H * p.S_q);
  RowStats stats{std::vector<float>(n_rows), std::vector<float>(n_rows)};
  const std::int64_t n_tiles = p.B * p.H * plan.T_q();
  auto tile_task = [&](RowStatsWorkspace& ws, std::int64_t t) {
    const std::int64_t i = t % plan.T_q();
    const std::int64_t h = t / plan.T_q() % p.H;
    const std::int64_t b = t / plan.T_q() / p.H;
    row_stats_tile(params, plan, ws, b, h, i, stats);
  };
  if (trace != nullptr) {
    trace->backward_begin(
        {params.problem, plan.B_q(), plan.B_k(), plan.T_q(), plan.T_k(), params.problem.scale});
    RowStatsWorkspace ws(plan);
    for (std::int64_t t = 0; t < n_tiles; ++t) tile_task(ws, t);
    for (std::int64_t b = 0; b < p.B; ++b) {
      for (std::int64_t h = 0; h < p.H; ++h) {
        trace->backward_D(
            b, h, {stats.D.data() + stats.index(p, b, h, 0), static_cast<std::size_t>(p.S_q)});
      }
    }
  } else {
    auto workspaces = make_workspaces<RowStatsWorkspace>(
        thread_count(params.options, n_tiles), [&plan] { return RowStatsWorkspace(plan); });
    for_each_task(n_tiles, workspaces, tile_task);
  }

  DqPass dq_pass(params, plan, stats, trace);
  DkDvPass dkdv_pass(params, plan, stats, trace);
  dq_pass.run();
  dkdv_pass.run();
}

}  // namespace flashref::cpu::detail

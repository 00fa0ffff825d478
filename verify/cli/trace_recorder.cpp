#include "trace_recorder.hpp"

#include <algorithm>
#include <cmath>
#include <memory>

#include "flashref/backend.hpp"
#include "flashref/cpu/backend.hpp"
#include "flashref/cpu/isa.hpp"
#include "flashref/error.hpp"
#include "flashref/verify/gold.hpp"
#include "flashref/verify/nonfinite.hpp"
#include "flashref/verify/runner.hpp"

namespace flashref::cli {
namespace {

using cpu::TileKind;
using Kind = TraceEntry::Kind;

TraceValues matrix(const cpu::TraceMatrix& m) {
  TraceValues v;
  v.rows = m.rows;
  v.cols = m.cols;
  v.data.reserve(static_cast<std::size_t>(m.rows * m.cols));
  for (std::int64_t r = 0; r < m.rows; ++r)
    for (std::int64_t c = 0; c < m.cols; ++c) v.data.push_back(m(r, c));
  return v;
}

TraceValues vector(cpu::TraceVector x) {
  TraceValues v;
  v.rows = static_cast<std::int64_t>(x.size());
  v.cols = 1;
  v.is_vector = true;
  v.data.assign(x.begin(), x.end());
  return v;
}

// Rows [0, S) of head (0, h) of a tensor, as a matrix.
TraceValues head(const verify::HostTensor& t, std::int64_t h) {
  TraceValues v;
  v.rows = t.S();
  v.cols = t.d();
  for (std::int64_t s = 0; s < t.S(); ++s)
    for (std::int64_t i = 0; i < t.d(); ++i) v.data.push_back(t.get(0, h, s, i));
  return v;
}

std::string range_text(std::int64_t begin, std::int64_t end) {
  return end - begin == 1 ? std::to_string(begin)
                          : std::to_string(begin) + ".." + std::to_string(end - 1);
}

std::string kind_text(TileKind k) {
  switch (k) {
    case TileKind::skipped:
      return "skipped: every key lies after the last key its rows may see; nothing is loaded";
    case TileKind::full:
      return "full: every row sees every key, no index comparison";
    case TileKind::diagonal:
      return "diagonal: crosses the mask's edge, compares indices";
  }
  return "";
}

class Recorder : public cpu::TraceObserver {
 public:
  Recorder(Trace& trace, const TraceSettings& settings) : t_(trace), s_(settings) {}

  void forward_begin(const cpu::TraceGrid& g) override {
    t_.B_q = g.B_q;
    t_.B_k = g.B_k;
    t_.T_q = g.T_q;
    t_.T_k = g.T_k;
    t_.grid.assign(static_cast<std::size_t>(g.T_q),
                   std::vector<TileKind>(static_cast<std::size_t>(g.T_k), TileKind::skipped));
    if (walk_forward()) {
      note(1, 2,
           "split Q into T_q = ceil(S_q / B_q) = " + std::to_string(g.T_q) +
               " tiles of B_q = " + std::to_string(g.B_q) + " rows");
      note(1, 3,
           "split K, V into T_k = ceil(S_k / B_k) = " + std::to_string(g.T_k) +
               " tiles of B_k = " + std::to_string(g.B_k) + " rows");
    }
  }

  void query_tile_begin(const cpu::TileRef& tile, const cpu::TraceMatrix& Q_i) override {
    if (!first_head(tile.b, tile.h) || !walk_forward()) return;
    section("query tile i = " + std::to_string(tile.i) + ": rows " +
                range_text(tile.row_begin, tile.row_end),
            tile.b, tile.h, tile.i, -1);
    value(1, 5, "Q_i", "load Q_i", matrix(Q_i), tile);
    note(1, 6, "O_i = 0, l_i = 0, m_i = -inf");
  }

  void forward_step(const cpu::ForwardStep& st) override {
    const cpu::TileRef& tile = st.tile;
    if (!first_head(tile.b, tile.h)) return;
    t_.grid[static_cast<std::size_t>(tile.i)][static_cast<std::size_t>(tile.j)] = tile.kind;
    if (!walk_forward()) return;
    tile_entry(tile);
    note(1, 8, "load K_j, V_j (keys " + range_text(tile.col_begin, tile.col_end) + ")");
    value(1, 9, "S", "S = Q_i K_j^T * scale" + masked(tile), matrix(st.S), tile);
    value(1, 10, "m_old", "m_old = m_i(j-1)", vector(st.m_old), tile);
    value(1, 10, "m", "m = max(m_old, rowmax(S))", vector(st.m_new), tile);
    value(1, 11, "P~", "P~ = exp(S - m)", matrix(st.P_tilde), tile);
    value(1, 12, "rescale", "rescale = exp(m_old - m)", vector(st.rescale), tile);
    value(1, 12, "l", "l = rescale * l + rowsum(P~)", vector(st.l), tile);
    value(1, 13, "O", "O = diag(rescale) O + P~ V_j", matrix(st.O), tile);
  }

  void tile_skipped(const cpu::TileRef& tile) override {
    const bool kv_pass = tile.pass == cpu::TracePass::dkdv;
    if (tile.b != 0 || (kv_pass ? tile.h_kv != 0 : tile.h != 0)) return;
    if (tile.pass == cpu::TracePass::forward) {
      t_.grid[static_cast<std::size_t>(tile.i)][static_cast<std::size_t>(tile.j)] =
          TileKind::skipped;
      if (!walk_forward()) return;
    } else if (!walk_backward()) {
      return;
    }
    begin_backward_tile(tile);
    tile_entry(tile);
  }

  void query_tile_end(const cpu::ForwardTileEnd& e) override {
    if (!first_head(e.b, e.h) || !walk_forward()) return;
    cpu::TileRef tile;
    tile.b = e.b;
    tile.h = e.h;
    tile.i = e.i;
    tile.j = -1;
    value(1, 15, "O_i", "O_i = diag(l)^-1 O (written)", matrix(e.O), tile);
    value(1, 16, "L_i", "L_i = m + ln(l) (written; -inf for a row that sees no key)", vector(e.L),
          tile);
  }

  void backward_begin(const cpu::TraceGrid& g) override {
    if (!walk_backward()) return;
    note(2, 0,
         "recompute S and P tile by tile from Q, K and the forward's L: no S_q x S_k matrix "
         "is kept (B_q = " +
             std::to_string(g.B_q) + ", B_k = " + std::to_string(g.B_k) + ")");
  }

  void backward_D(std::int64_t b, std::int64_t h, cpu::TraceVector D) override {
    if (!first_head(b, h) || !walk_backward()) return;
    cpu::TileRef tile;
    tile.i = tile.j = -1;
    value(2, 2, "D", "D = rowsum(dO * O), one value per query row", vector(D), tile);
  }

  void dq_step(const cpu::DqStep& st) override {
    const cpu::TileRef& tile = st.tile;
    if (!first_head(tile.b, tile.h) || !walk_backward()) return;
    begin_backward_tile(tile);
    tile_entry(tile);
    value(2, 11, "S", "S = Q_i K_j^T * scale" + masked(tile), matrix(st.S), tile);
    value(2, 12, "P", "P = exp(S - L_i)", matrix(st.P), tile);
    value(2, 14, "dP", "dP = dO_i V_j^T", matrix(st.dP), tile);
    value(2, 15, "dS", "dS = P * (dP - D_i)  (the scale is applied to dQ at the end)",
          matrix(st.dS), tile);
    value(2, 16, "dQ_acc", "dQ_i += dS K_j", matrix(st.dQ), tile);
  }

  void dq_tile_end(const cpu::DqTileEnd& e) override {
    if (!first_head(e.b, e.h) || !walk_backward()) return;
    cpu::TileRef tile;
    tile.b = e.b;
    tile.h = e.h;
    tile.i = e.i;
    tile.j = -1;
    value(2, 16, "dQ_i", "dQ_i = scale * sum_j dS K_j (written)", matrix(e.dQ), tile);
  }

  void dkdv_step(const cpu::DkDvStep& st) override {
    const cpu::TileRef& tile = st.tile;
    if (tile.b != 0 || tile.h_kv != 0 || !walk_backward()) return;
    begin_backward_tile(tile);
    tile_entry(tile);
    value(2, 11, "S", "S = Q_i K_j^T * scale" + masked(tile), matrix(st.S), tile);
    value(2, 12, "P", "P = exp(S - L_i)", matrix(st.P), tile);
    value(2, 13, "dV_acc", "dV_j += P^T dO_i", matrix(st.dV), tile);
    value(2, 14, "dP", "dP = dO_i V_j^T", matrix(st.dP), tile);
    value(2, 15, "dS", "dS = P * (dP - D_i)", matrix(st.dS), tile);
    value(2, 17, "dK_acc", "dK_j += dS^T Q_i  (the scale is applied at the end)", matrix(st.dK),
          tile);
  }

  void dkdv_tile_end(const cpu::DkDvTileEnd& e) override {
    if (e.b != 0 || e.h_kv != 0 || !walk_backward()) return;
    cpu::TileRef tile;
    tile.b = e.b;
    tile.h = e.h_kv;
    tile.i = -1;
    tile.j = e.j;
    value(2, 19, "dK_j", "dK_j = scale * sum dS^T Q_i (written)", matrix(e.dK), tile);
    value(2, 19, "dV_j", "dV_j = sum P^T dO_i (written)", matrix(e.dV), tile);
  }

 private:
  bool walk_forward() const { return !s_.grid_only && !s_.backward; }
  bool walk_backward() const { return !s_.grid_only && s_.backward; }
  static bool first_head(std::int64_t b, std::int64_t h) { return b == 0 && h == 0; }

  static std::string masked(const cpu::TileRef& tile) {
    return tile.kind == TileKind::diagonal ? " (masked entries: -inf)" : "";
  }

  // A section header whenever the backward moves on to another tile its pass owns.
  void begin_backward_tile(const cpu::TileRef& tile) {
    if (tile.pass == cpu::TracePass::dq) {
      const std::int64_t key = tile.i;
      if (pass_ == cpu::TracePass::dq && owned_ == key) return;
      pass_ = cpu::TracePass::dq;
      owned_ = key;
      section("dQ pass, query tile i = " + std::to_string(tile.i) + ": rows " +
                  range_text(tile.row_begin, tile.row_end) + " (loops over key tiles j)",
              tile.b, tile.h, tile.i, -1);
      note(2, 10, "load Q_i, O_i, dO_i; dQ_i = 0");
    } else if (tile.pass == cpu::TracePass::dkdv) {
      const std::int64_t key = tile.j;
      if (pass_ == cpu::TracePass::dkdv && owned_ == key) return;
      pass_ = cpu::TracePass::dkdv;
      owned_ = key;
      section("dK/dV pass, key tile j = " + std::to_string(tile.j) + ": keys " +
                  range_text(tile.col_begin, tile.col_end) + " (loops over query tiles i)",
              tile.b, tile.h_kv, -1, tile.j);
      note(2, 7, "load K_j, V_j; dK_j = dV_j = 0");
    }
  }

  void section(const std::string& text, std::int64_t b, std::int64_t h, std::int64_t i,
               std::int64_t j) {
    TraceEntry e;
    e.kind = Kind::section;
    e.text = text;
    e.b = b;
    e.h = h;
    e.i = i;
    e.j = j;
    t_.entries.push_back(std::move(e));
  }

  void note(int algorithm, int line, const std::string& text) {
    TraceEntry e;
    e.kind = Kind::note;
    e.algorithm = algorithm;
    e.line = line;
    e.text = text;
    t_.entries.push_back(std::move(e));
  }

  void tile_entry(const cpu::TileRef& tile) {
    TraceEntry e;
    e.kind = Kind::tile;
    e.b = tile.b;
    e.h = tile.h;
    e.i = tile.i;
    e.j = tile.j;
    e.tile_kind = tile.kind;
    std::string where = tile.pass == cpu::TracePass::dkdv
                            ? "query tile i = " + std::to_string(tile.i) + " (rows " +
                                  range_text(tile.row_begin, tile.row_end) + ", head " +
                                  std::to_string(tile.h) + ")"
                            : "key tile j = " + std::to_string(tile.j) + " (keys " +
                                  range_text(tile.col_begin, tile.col_end) + ")";
    e.text = where + ": " + kind_text(tile.kind);
    t_.entries.push_back(std::move(e));
  }

  void value(int algorithm, int line, const std::string& symbol, const std::string& text,
             TraceValues values, const cpu::TileRef& tile) {
    TraceEntry e;
    e.kind = Kind::value;
    e.algorithm = algorithm;
    e.line = line;
    e.symbol = symbol;
    e.text = text;
    e.b = tile.b;
    e.h = tile.h;
    e.i = tile.i;
    e.j = tile.j;
    e.tile_kind = tile.kind;
    e.values = std::move(values);
    t_.entries.push_back(std::move(e));
  }

  Trace& t_;
  const TraceSettings& s_;
  cpu::TracePass pass_ = cpu::TracePass::forward;
  std::int64_t owned_ = -1;
};

// Largest |t - gold| over every head of a result (the gold is finite for O and gradients).
double max_error(const verify::HostTensor& t, std::int64_t heads,
                 const xt::xarray<double>& gold) {
  double worst = 0.0;
  for (std::int64_t b = 0; b < t.B(); ++b)
    for (std::int64_t h = 0; h < heads; ++h)
      for (std::int64_t s = 0; s < t.S(); ++s)
        for (std::int64_t i = 0; i < t.d(); ++i) {
          const double g = gold(static_cast<std::size_t>(b), static_cast<std::size_t>(h),
                                static_cast<std::size_t>(s), static_cast<std::size_t>(i));
          worst = std::max(worst, std::fabs(t.get(b, h, s, i) - g));
        }
  return worst;
}

}  // namespace

Trace record_trace(const verify::ProblemData& data, const TraceSettings& settings) {
  if (settings.tile_q < 1 || settings.tile_k < 1) {
    throw InvalidArgument("--tile", "tile sizes must be >= 1, got " +
                                        std::to_string(settings.tile_q) + "," +
                                        std::to_string(settings.tile_k));
  }
  const Problem& p = data.problem;
  Trace trace;
  trace.problem = p;
  trace.backward = settings.backward;
  Recorder recorder(trace, settings);
  // The portable kernels: AVX2/AVX-512 ones may round a last bit differently, and the
  // walkthrough in docs/ must read the same on every machine. Restored afterwards.
  struct IsaScope {
    cpu::Isa saved = cpu::active_isa();
    IsaScope() { cpu::select_isa(cpu::Isa::generic); }
    ~IsaScope() { cpu::select_isa(saved); }
  } portable;
  verify::RunOptions run;
  run.exec.tile_q = settings.tile_q;
  run.exec.tile_k = settings.tile_k;
  run.backward = settings.backward;
  const std::unique_ptr<Backend> traced = cpu::make_backend({.trace = &recorder});
  const verify::RunOutputs out = verify::run_backend(*traced, data, run);
  trace.warnings = verify::nonfinite_warnings(out.values, data);
  if (settings.grid_only) return trace;

  trace.Q = head(data.q, 0);
  trace.K = head(data.k, 0);
  trace.V = head(data.v, 0);
  trace.O = head(out.o, 0);
  trace.L.rows = p.S_q;
  trace.L.cols = 1;
  trace.L.is_vector = true;
  for (std::int64_t s = 0; s < p.S_q; ++s)
    trace.L.data.push_back(out.lse(0, 0, static_cast<std::size_t>(s)));

  const verify::TensorSet gold = verify::compute_gold(data, settings.backward);
  using verify::TensorId;
  trace.gold_error.emplace_back("O", max_error(out.o, p.H, gold.at(TensorId::O)));
  double L_error = 0.0;
  for (std::size_t n = 0; n < gold.at(TensorId::L).size(); ++n) {
    const double g = gold.at(TensorId::L).flat(n), c = out.lse.flat(n);
    L_error = std::max(L_error, g == c ? 0.0 : std::fabs(c - g));
  }
  trace.gold_error.emplace_back("L", L_error);
  if (settings.backward) {
    trace.dO = head(data.dO, 0);
    trace.dQ = head(out.dq, 0);
    trace.dK = head(out.dk, 0);
    trace.dV = head(out.dv, 0);
    trace.gold_error.emplace_back("dQ", max_error(out.dq, p.H, gold.at(TensorId::dQ)));
    trace.gold_error.emplace_back("dK", max_error(out.dk, p.H_kv, gold.at(TensorId::dK)));
    trace.gold_error.emplace_back("dV", max_error(out.dv, p.H_kv, gold.at(TensorId::dV)));
  }
  return trace;
}

}  // namespace flashref::cli

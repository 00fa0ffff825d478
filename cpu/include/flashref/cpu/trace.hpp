// The trace hook of the cpu backend: watch Algorithm 1 (forward) and Algorithm 2 (backward)
// run, step by step, with the values of every quantity the paper names.
//
// Make the backend with an observer, cpu::make_backend({.trace = &observer}) (backend.hpp),
// and call its forward() or backward(). The backend then runs single-threaded in a fixed order
// (batch, head, query tile, key tile), so the sequence of callbacks is the same on every run,
// and calls the observer after each step with read-only views of its state. The views point
// into the backend's scratch buffers: they are valid only during the callback (copy what you
// keep). Without an observer the backend runs its normal parallel code and pays nothing for
// the hook.
//
// Conventions:
// - Tile indices i, j are 0-based (the paper's are 1-based: tile i here is the paper's i + 1).
//   Query tile i holds rows [row_begin, row_end) of Q; key tile j holds rows
//   [col_begin, col_end) of K and V. The last tile of each may be partial.
// - Matrices are row-major floats, rows x cols, element (r, c) at data[r * stride + c], with r
//   and c relative to the tile (add row_begin / col_begin for global indices).
// - Values are float32 as the algorithm holds them (it accumulates in float32 for every
//   dtype). For float16/bfloat16 the products P~ V, P^T dO, dS K and dS^T Q read P~, P and dS
//   rounded to that dtype; the callbacks show the unrounded values, the accumulators show the
//   products as computed.
// - Causal masks: a key tile is `skipped` when every key in it lies after the last key visible
//   to the tile's last query row (nothing is loaded or computed), `full` when every query row
//   of the tile sees every key of it (no index comparison), `diagonal` otherwise (the only
//   tiles that compare indices; masked entries of S are -inf and of P~/P are 0).
//   Without a mask every tile is `full`.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "flashref/problem.hpp"

namespace flashref::cpu {

enum class TileKind : std::uint8_t { skipped, full, diagonal };

// "skipped", "full", "diagonal".
std::string_view tile_kind_name(TileKind k);

// Which loop a step belongs to: Algorithm 1, or one of the two passes of Algorithm 2.
enum class TracePass : std::uint8_t { forward, dq, dkdv };

// "forward", "dq", "dkdv".
std::string_view trace_pass_name(TracePass p);

// A read-only row-major float matrix valid during one callback.
struct TraceMatrix {
  const float* data = nullptr;
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  std::int64_t stride = 0;  // elements between consecutive rows (>= cols)
  float operator()(std::int64_t r, std::int64_t c) const { return data[r * stride + c]; }
};

// A read-only float vector (one value per row of a tile, or per query row of a head).
using TraceVector = std::span<const float>;

// The tiling of one run: Algorithm 1 lines 1-3 (and the same split for Algorithm 2).
struct TraceGrid {
  Problem problem;   // as given in the params
  std::int64_t B_q;  // query rows per tile (options.tile_q, or the default), >= 1
  std::int64_t B_k;  // key rows per tile (options.tile_k, or the default), >= 1
  std::int64_t T_q;  // ceil(S_q / B_q) query tiles
  std::int64_t T_k;  // ceil(S_k / B_k) key tiles
  double scale;      // the softmax scale applied to Q K^T
};

// Which pair of tiles a step works on.
struct TileRef {
  std::int64_t b = 0;     // batch index
  std::int64_t h = 0;     // query head
  std::int64_t h_kv = 0;  // key/value head that query head h reads (h / (H / H_kv))
  std::int64_t i = 0;     // query tile
  std::int64_t j = 0;     // key tile
  std::int64_t row_begin = 0, row_end = 0;  // query rows of Q_i
  std::int64_t col_begin = 0, col_end = 0;  // key rows of K_j, V_j
  TileKind kind = TileKind::full;
  TracePass pass = TracePass::forward;
};

// Algorithm 1, lines 8-13: one key tile j processed for query tile i.
struct ForwardStep {
  TileRef tile;
  TraceMatrix S;        // line 9: S_ij = Q_i K_j^T * scale (rows x cols); -inf where masked
  TraceVector m_old;    // m_i(j-1), one per row: -inf until the row has seen a key
  TraceVector m_new;    // line 10: m_i(j) = max(m_i(j-1), rowmax(S_ij))
  TraceVector rescale;  // exp(m_i(j-1) - m_i(j)), the factor of lines 12-13; 1 where both -inf
  TraceMatrix P_tilde;  // line 11: P~_ij = exp(S_ij - m_i(j)) (rows x cols); 0 where masked
  TraceVector l;        // line 12: l_i(j) = rescale * l_i(j-1) + rowsum(P~_ij)
  TraceMatrix O;        // line 13: O_i(j) = diag(rescale) O_i(j-1) + P~_ij V_j (rows x d)
};

// Algorithm 1, lines 15-18: query tile i finished.
struct ForwardTileEnd {
  std::int64_t b = 0, h = 0, i = 0;
  std::int64_t row_begin = 0, row_end = 0;
  TraceVector m;  // m_i(T_k): the row max over all visible keys (-inf: the row sees no key)
  TraceVector l;  // l_i(T_k)
  TraceMatrix O;  // line 15: O_i = diag(l)^-1 O_i(T_k), as written (rounded to the dtype)
  TraceVector L;  // line 16: L_i = m_i + ln(l_i), as written; -inf where the row sees no key
};

// Algorithm 2, lines 11-16, in the pass that owns query tile i (dQ pass): key tile j.
struct DqStep {
  TileRef tile;
  TraceMatrix S;   // line 11: S_ij = Q_i K_j^T * scale (rows x cols); -inf where masked
  TraceMatrix P;   // line 12: P_ij = exp(S_ij - L_i); 0 where masked
  TraceMatrix dP;  // line 14: dP_ij = dO_i V_j^T
  TraceMatrix dS;  // line 15: dS_ij = P_ij * (dP_ij - D_i), before the scale (applied to dQ)
  TraceMatrix dQ;  // line 16: the accumulator sum over key tiles so far of dS K (rows x d),
                   // before the final multiplication by the scale
};

// The dQ pass finished query tile i: dQ_i = scale * sum_j dS_ij K_j, as written.
struct DqTileEnd {
  std::int64_t b = 0, h = 0, i = 0;
  std::int64_t row_begin = 0, row_end = 0;
  TraceMatrix dQ;  // rows x d, rounded to the gradient dtype
};

// Algorithm 2, lines 11-17, in the pass that owns key tile j (dK/dV pass): query tile i of
// query head tile.h (the pass loops over the query heads that share key/value head h_kv, in
// increasing order, and for each over its query tiles). Matrices are in the same orientation
// as DqStep's (rows are queries, columns are keys) even though this pass computes them
// transposed.
struct DkDvStep {
  TileRef tile;
  TraceMatrix S;   // line 11
  TraceMatrix P;   // line 12
  TraceMatrix dP;  // line 14
  TraceMatrix dS;  // line 15, before the scale (applied to dK)
  TraceMatrix dV;  // line 13: dV_j accumulator, sum of P^T dO so far (cols x d)
  TraceMatrix dK;  // line 17: dK_j accumulator, sum of dS^T Q so far, before the scale (cols x d)
};

// The dK/dV pass finished key tile j of key/value head h_kv (lines 18-19), as written.
struct DkDvTileEnd {
  std::int64_t b = 0, h_kv = 0, j = 0;
  std::int64_t col_begin = 0, col_end = 0;
  TraceMatrix dK;  // cols x d: scale * sum over the group's heads and query tiles of dS^T Q
  TraceMatrix dV;  // cols x d: sum over the group's heads and query tiles of P^T dO
};

// Receives the steps. Every callback has an empty default, so an observer overrides only what
// it needs. Callbacks may throw; the exception leaves forward()/backward() (outputs then hold
// whatever was written before it).
class TraceObserver {
 public:
  virtual ~TraceObserver() = default;

  // --- Algorithm 1 (forward). Order: forward_begin; then for each (b, h, i):
  // query_tile_begin, for each j in 0..T_k-1 either forward_step or tile_skipped (skipped tiles
  // are reported in increasing j after the last visited one), then query_tile_end.
  virtual void forward_begin(const TraceGrid& /*grid*/) {}
  // Lines 4-6: query tile i of head (b, h) loaded (Q_i: rows x d); O = 0, l = 0, m = -inf.
  virtual void query_tile_begin(const TileRef& /*tile with j = -1*/, const TraceMatrix& /*Q_i*/) {}
  virtual void forward_step(const ForwardStep& /*step*/) {}
  // A key tile entirely above the causal diagonal: lines 8-13 are not run for it.
  virtual void tile_skipped(const TileRef& /*tile*/) {}
  virtual void query_tile_end(const ForwardTileEnd& /*end*/) {}

  // --- Algorithm 2 (backward). Order: backward_begin; backward_D for every (b, h); the dQ
  // pass, for each (b, h, i): dq_step for each visited j in increasing order, tile_skipped for
  // the key tiles after them, dq_tile_end; then the dK/dV pass, for each (b, h_kv, j) and each
  // query head h of the group in increasing order: tile_skipped for the query tiles above the
  // diagonal (increasing i), dkdv_step for the others (increasing i); then dkdv_tile_end.
  virtual void backward_begin(const TraceGrid& /*grid*/) {}
  // Line 2: D = rowsum(dO * O) for all S_q rows of head (b, h).
  virtual void backward_D(std::int64_t /*b*/, std::int64_t /*h*/, TraceVector /*D*/) {}
  virtual void dq_step(const DqStep& /*step*/) {}
  virtual void dq_tile_end(const DqTileEnd& /*end*/) {}
  virtual void dkdv_step(const DkDvStep& /*step*/) {}
  virtual void dkdv_tile_end(const DkDvTileEnd& /*end*/) {}
};

}  // namespace flashref::cpu

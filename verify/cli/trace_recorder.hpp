// The walkthrough of `flashref trace`: runs the tiled cpu backend with its trace hook
// (cpu/trace.hpp) on a tiny problem and records every step of Algorithm 1 (or 2) with its line
// number and values, for trace_render.hpp to print as text, markdown or JSON.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "flashref/cpu/trace.hpp"
#include "flashref/verify/problem_data.hpp"

namespace flashref::cli {

// A matrix (rows x cols, row-major) or a vector (cols == 1 and is_vector) of recorded values.
struct TraceValues {
  std::int64_t rows = 0, cols = 0;
  bool is_vector = false;
  std::vector<double> data;
  double operator()(std::int64_t r, std::int64_t c) const { return data[r * cols + c]; }
};

struct TraceEntry {
  enum class Kind { section, tile, note, value };
  Kind kind = Kind::note;
  int algorithm = 0;   // 1 or 2 for values
  int line = 0;        // the algorithm's line number, 0 for none
  std::string symbol;  // "S", "m_old", "m", "P~", "rescale", "l", "O", "L", "D", "P", "dP", ...
  std::string text;    // the math ("m = max(m_old, rowmax(S))"), a title, or a note
  // Where: head (b, h) or key/value head h_kv in the dK/dV pass, query tile i, key tile j
  // (-1 where not applicable) and the tile's kind for tile entries.
  std::int64_t b = 0, h = 0, i = -1, j = -1;
  cpu::TileKind tile_kind = cpu::TileKind::full;
  TraceValues values;
};

struct TraceSettings {
  int tile_q = 4;          // B_q
  int tile_k = 4;          // B_k
  bool backward = false;   // walk Algorithm 2 instead of Algorithm 1
  bool grid_only = false;  // record only the tile kinds (for pictures of large grids)
};

struct Trace {
  Problem problem;
  std::int64_t B_q = 0, B_k = 0, T_q = 0, T_k = 0;
  bool backward = false;
  // Tile kinds of the first head, [i][j]: what the backend reported for each pair of tiles.
  std::vector<std::vector<cpu::TileKind>> grid;
  std::vector<TraceEntry> entries;
  // Inputs and results of the first head (b = 0, h = 0, and its key/value head).
  TraceValues Q, K, V, dO;
  TraceValues O, L, dQ, dK, dV;  // as the backend wrote them
  // Largest |result - gold| (gold: naive attention in double) per result symbol.
  std::vector<std::pair<std::string, double>> gold_error;
  // Outputs holding NaN or an infinity, and what in the inputs explains them
  // (verify/nonfinite.hpp, nonfinite_warnings); empty when every output is finite.
  std::vector<std::string> warnings;
};

// Runs the cpu backend with the trace hook on `data` and records the walkthrough, with the
// backend's portable (generic) kernels so the numbers are the same on every machine. Throws
// InvalidArgument for a problem the tiles or the cpu backend reject.
Trace record_trace(const verify::ProblemData& data, const TraceSettings& settings);

}  // namespace flashref::cli

// A TraceObserver that copies every callback's data, for tests to inspect after the run.
#pragma once

#include <cstdint>
#include <vector>

#include "flashref/cpu/trace.hpp"

namespace flashref::cputest {

// A copied TraceMatrix, contiguous.
struct Mat {
  std::int64_t rows = 0, cols = 0;
  std::vector<float> v;
  Mat() = default;
  explicit Mat(const cpu::TraceMatrix& m) : rows(m.rows), cols(m.cols) {
    v.reserve(static_cast<std::size_t>(rows * cols));
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t c = 0; c < cols; ++c) v.push_back(m(r, c));
  }
  float operator()(std::int64_t r, std::int64_t c) const {
    return v[static_cast<std::size_t>(r * cols + c)];
  }
};

inline std::vector<float> copy(cpu::TraceVector x) {
  return {x.begin(), x.end()};
}

struct ForwardStepCopy {
  cpu::TileRef tile;
  Mat S, P_tilde, O;
  std::vector<float> m_old, m_new, rescale, l;
};

struct ForwardEndCopy {
  std::int64_t b, h, i, row_begin, row_end;
  std::vector<float> m, l, L;
  Mat O;
};

struct GradStepCopy {
  cpu::TileRef tile;
  Mat S, P, dP, dS, acc1, acc2;  // dq: acc1 = dQ; dkdv: acc1 = dV, acc2 = dK
};

// Every event in order, as a tag and an index into the matching vector.
enum class Event {
  forward_begin,
  query_tile_begin,
  forward_step,
  skipped,
  query_tile_end,
  backward_begin,
  backward_D,
  dq_step,
  dq_tile_end,
  dkdv_step,
  dkdv_tile_end
};

class RecordingObserver : public cpu::TraceObserver {
 public:
  std::vector<Event> events;
  std::vector<cpu::TraceGrid> grids;
  std::vector<cpu::TileRef> tile_begins, skipped;
  std::vector<Mat> Q_tiles;
  std::vector<ForwardStepCopy> forward_steps;
  std::vector<ForwardEndCopy> forward_ends;
  struct DCopy {
    std::int64_t b, h;
    std::vector<float> D;
  };
  std::vector<DCopy> Ds;
  std::vector<GradStepCopy> dq_steps, dkdv_steps;
  std::vector<cpu::DqTileEnd> dq_ends;
  std::vector<Mat> dq_end_values;
  std::vector<cpu::DkDvTileEnd> dkdv_ends;
  std::vector<Mat> dk_end_values, dv_end_values;

  void forward_begin(const cpu::TraceGrid& g) override {
    events.push_back(Event::forward_begin);
    grids.push_back(g);
  }
  void query_tile_begin(const cpu::TileRef& t, const cpu::TraceMatrix& Q_i) override {
    events.push_back(Event::query_tile_begin);
    tile_begins.push_back(t);
    Q_tiles.emplace_back(Q_i);
  }
  void forward_step(const cpu::ForwardStep& s) override {
    events.push_back(Event::forward_step);
    forward_steps.push_back({s.tile, Mat(s.S), Mat(s.P_tilde), Mat(s.O), copy(s.m_old),
                             copy(s.m_new), copy(s.rescale), copy(s.l)});
  }
  void tile_skipped(const cpu::TileRef& t) override {
    events.push_back(Event::skipped);
    skipped.push_back(t);
  }
  void query_tile_end(const cpu::ForwardTileEnd& e) override {
    events.push_back(Event::query_tile_end);
    forward_ends.push_back(
        {e.b, e.h, e.i, e.row_begin, e.row_end, copy(e.m), copy(e.l), copy(e.L), Mat(e.O)});
  }
  void backward_begin(const cpu::TraceGrid& g) override {
    events.push_back(Event::backward_begin);
    grids.push_back(g);
  }
  void backward_D(std::int64_t b, std::int64_t h, cpu::TraceVector D) override {
    events.push_back(Event::backward_D);
    Ds.push_back({b, h, copy(D)});
  }
  void dq_step(const cpu::DqStep& s) override {
    events.push_back(Event::dq_step);
    dq_steps.push_back({s.tile, Mat(s.S), Mat(s.P), Mat(s.dP), Mat(s.dS), Mat(s.dQ), Mat()});
  }
  void dq_tile_end(const cpu::DqTileEnd& e) override {
    events.push_back(Event::dq_tile_end);
    dq_ends.push_back(e);
    dq_ends.back().dQ = {};  // the view dies with the callback: the values are in dq_end_values
    dq_end_values.emplace_back(e.dQ);
  }
  void dkdv_step(const cpu::DkDvStep& s) override {
    events.push_back(Event::dkdv_step);
    dkdv_steps.push_back({s.tile, Mat(s.S), Mat(s.P), Mat(s.dP), Mat(s.dS), Mat(s.dV), Mat(s.dK)});
  }
  void dkdv_tile_end(const cpu::DkDvTileEnd& e) override {
    events.push_back(Event::dkdv_tile_end);
    dkdv_ends.push_back(e);
    dkdv_ends.back().dK = {};  // the values are in dk_end_values and dv_end_values
    dkdv_ends.back().dV = {};
    dk_end_values.emplace_back(e.dK);
    dv_end_values.emplace_back(e.dV);
  }
};

}  // namespace flashref::cputest

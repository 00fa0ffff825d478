// The two passes of Algorithm 2 and what they share.
//
// Algorithm 2 as printed owns a key tile and accumulates dQ across key tiles with atomics.
// Here P is computed twice instead: a dQ pass owns a query tile and loops over key tiles
// (lines 11, 12, 14, 15, 16), and a dK/dV pass owns a key tile and loops over the query tiles
// of every query head that shares it (lines 11-15, 17). Each output element is then written by
// one task in a fixed order: no atomics, no locks, and the result is bitwise the same for any
// number of threads.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "flashref/cpu/trace.hpp"
#include "flashref/params.hpp"
#include "plan.hpp"

namespace flashref::cpu::detail {

// Per query row of every head, laid out (B, H, S_q) like L.
struct RowStats {
  // Alg. 2 line 2: D = rowsum(dO * O) (0 when the plan says so: Plan::computes_D).
  std::vector<float> D;
  // L, except that a row that sees no key (L = -inf) holds +inf, so that line 12's
  // exp(S - L) gives P = 0 there instead of exp(+inf).
  std::vector<float> L;

  std::int64_t index(const Problem& p, std::int64_t b, std::int64_t h, std::int64_t q) const {
    return (b * p.H + h) * p.S_q + q;
  }
};

// The dQ pass: writes dQ. The constructor allocates every thread's buffers (so a failure
// throws before any output is written); run() must be called at most once.
class DqPass {
 public:
  // With `trace`, run() goes single-threaded in the natural order and reports to it.
  DqPass(const BackwardParams& params, const Plan& plan, const RowStats& stats,
         TraceObserver* trace);
  ~DqPass();
  void run();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The dK/dV pass: writes dK and dV. Same contract as DqPass.
class DkDvPass {
 public:
  DkDvPass(const BackwardParams& params, const Plan& plan, const RowStats& stats,
           TraceObserver* trace);
  ~DkDvPass();
  void run();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace flashref::cpu::detail

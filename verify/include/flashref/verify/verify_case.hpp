// One verification case: everything that determines a `flashref verify` run, and the command
// line that reproduces it. The CLI parses into it, the RapidCheck generators draw it, and a
// failing property prints reproduce_command() of it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "flashref/params.hpp"
#include "flashref/verify/precision.hpp"
#include "flashref/verify/problem_data.hpp"

namespace flashref::verify {

struct VerifyCase {
  Problem problem;
  int tile_q = 0;   // B_q (0: the backend's default)
  int tile_k = 0;   // B_k (0: the backend's default)
  int threads = 0;  // OpenMP threads for host backends (0: OpenMP's default)
  std::uint64_t seed = 0;
  Layout layout = Layout::bshd;
  bool large = false;    // large-magnitude Q and K (problem_data.hpp)
  bool backward = true;  // also judge dQ, dK, dV
  bool allow_tf32 = false;
  // false: the cuda backend may run its atomic (non-reproducible) backward; judged the same.
  bool deterministic = true;
  DType lse_dtype = DType::f32;  // the dtype L is judged as stored in (precision.hpp)
  // R >= 1: each backend runs as R ranks of ring attention over the in-process transport
  // (flashref/ring/ring_backend.hpp), judged like the backend itself; 0: the backend alone.
  int ranks = 0;
};

// The most ranks the in-process ring runs (each rank is a thread).
inline constexpr int kMaxRanks = 64;

// The ring's name for a backend run as c.ranks ranks ("ring4(cpu)"), and the inverse: the
// backend's own name from a report's ("cpu" from "ring4(cpu)"; other names unchanged).
std::string ring_name(int ranks, const std::string& backend);
std::string inner_backend_name(const std::string& reported);

// The no-argument `flashref verify` problem: B=2, H=4, H_kv=2, S=300, d=64, causal, bf16,
// forward and backward, seed 0.
VerifyCase default_case();

ExecutionOptions exec_options(const VerifyCase& c);
InputOptions input_options(const VerifyCase& c);
Precision precision(const VerifyCase& c);

// The tile size a worst index is placed in along each axis: the case's tiles, or the cpu
// backend's defaults when they are 0.
std::int64_t report_tile_q(const VerifyCase& c);
std::int64_t report_tile_k(const VerifyCase& c);

// "flashref verify --backends cpu --shape 1,2,5,7,3 --heads-kv 1 --mask causal ...": every
// field, so the run is reproduced exactly (scale printed with 17 significant digits).
std::string reproduce_command(const VerifyCase& c, const std::vector<std::string>& backends);

// One line: the problem, then describe_settings().
std::string describe(const VerifyCase& c);
// The settings beyond the problem: tiles, seed, layout, inputs, passes, threads, flags.
std::string describe_settings(const VerifyCase& c);

}  // namespace flashref::verify

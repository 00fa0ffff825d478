// Timing a backend: forward, backward and forward+backward medians after warm-up, GFLOP/s
// (forward_flops / backward_flops of problem.hpp) and peak extra memory.
//
// Host backends are timed with std::chrono::steady_clock around each call and their memory is
// the peak resident-set growth of one call (memory.hpp). Device backends are timed with
// DeviceRuntime::time_ms (device events, L2 flushed between repetitions) and their memory is
// the growth of DeviceRuntime::bytes_in_use() across one call, which shows workspace a backend
// keeps, not transient allocations it frees before returning.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "flashref/backend.hpp"
#include "flashref/verify/host_tensor.hpp"

namespace flashref::verify {

struct BenchConfig {
  Problem problem;
  ExecutionOptions exec;  // tiles, threads, allow_tf32
  Layout layout = Layout::bshd;
  int warmup = 1;         // untimed runs first
  int reps = 5;           // timed runs; the median is reported
  bool backward = false;  // also time backward and forward+backward
  bool flush_l2 = true;   // device backends: flush L2 before each timed run
  std::uint64_t seed = 0;
};

struct BenchRow {
  std::string backend;
  std::string pass;  // "forward", "backward" or "forward+backward"
  Problem problem;
  int threads = 0;  // OpenMP threads the host backend ran with
  int tile_q = 0, tile_k = 0;
  int warmup = 0, reps = 0;
  std::vector<double> times_ms;
  double median_ms = 0.0, min_ms = 0.0, max_ms = 0.0;
  double flops = 0.0;                  // FlashAttention's count (problem.hpp)
  double gflops = 0.0;                 // flops / median time
  std::int64_t peak_extra_bytes = -1;  // -1: not measured
  std::string memory_method;
  std::string timer;   // "steady_clock" or "device events"
  std::string device;  // the CPU model or the device name
  std::string sweep;   // the named sweep this row belongs to, if any
  std::string label;   // the sweep point's label, if any
  std::string plan;    // Backend::plan(): which kernels ran, and why ("" when one way)
};

// Throws InvalidArgument for bad settings (reps < 1, warmup < 0, a problem validate() rejects)
// and Unsupported when the backend's supports() says no.
std::vector<BenchRow> bench_backend(const Backend& backend, const BenchConfig& config);

double median(std::vector<double> values);

// {"backend", "pass", "problem", "median_ms", "gflops", "peak_extra_bytes", ...}
nlohmann::json to_json(const BenchRow& row);
std::string format_bench_table(const std::vector<BenchRow>& rows);

}  // namespace flashref::verify

#include "flashref/verify/bench/bench.hpp"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <sstream>

#include "flashref/error.hpp"
#include "flashref/verify/bench/memory.hpp"
#include "flashref/verify/problem_data.hpp"
#include "flashref/verify/report.hpp"
#include "staging.hpp"

namespace flashref::verify {

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

namespace {

void require_settings(const Backend& backend, const BenchConfig& c) {
  validate(c.problem);
  if (c.reps < 1) throw InvalidArgument("--reps", "must be >= 1, got " + std::to_string(c.reps));
  if (c.warmup < 0) {
    throw InvalidArgument("--warmup", "must be >= 0, got " + std::to_string(c.warmup));
  }
  const Support s = backend.supports(c.problem);
  if (!s.ok) throw Unsupported(backend.name() + ": " + s.reason);
}

// Times `call` on the host: `warmup` untimed runs, then `reps` runs timed one by one.
std::vector<double> time_host(const std::function<void()>& call, int warmup, int reps) {
  for (int i = 0; i < warmup; ++i) call();
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    call();
    const auto t1 = std::chrono::steady_clock::now();
    ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  return ms;
}

}  // namespace

std::vector<BenchRow> bench_backend(const Backend& backend, const BenchConfig& c) {
  require_settings(backend, c);
  const Problem& p = c.problem;
  InputOptions inputs;
  inputs.seed = c.seed;
  inputs.layout = c.layout;
  const ProblemData data = make_problem_data(p, inputs);

  Staging staging(backend);
  const DeviceRuntime* rt = staging.runtime();
  HostTensor o(p.dtype, c.layout, p.B, p.H, p.S_q, p.d);
  xt::xtensor<float, 3> lse(std::array{static_cast<std::size_t>(p.B), static_cast<std::size_t>(p.H),
                                       static_cast<std::size_t>(p.S_q)});
  ForwardParams fwd;
  fwd.problem = p;
  fwd.q = staging.input(data.q);
  fwd.k = staging.input(data.k);
  fwd.v = staging.input(data.v);
  fwd.o = staging.output(o);
  fwd.lse = staging.output(lse);
  fwd.options = c.exec;

  HostTensor dq, dk, dv;
  BackwardParams bwd;
  if (c.backward) {
    dq = HostTensor(p.grad_dtype, c.layout, p.B, p.H, p.S_q, p.d);
    dk = HostTensor(p.grad_dtype, c.layout, p.B, p.H_kv, p.S_k, p.d);
    dv = HostTensor(p.grad_dtype, c.layout, p.B, p.H_kv, p.S_k, p.d);
    bwd.problem = p;
    bwd.q = fwd.q;
    bwd.k = fwd.k;
    bwd.v = fwd.v;
    bwd.o = fwd.o;
    bwd.lse = fwd.lse;
    bwd.dO = staging.input(data.dO);
    bwd.dq = staging.output(dq);
    bwd.dk = staging.output(dk);
    bwd.dv = staging.output(dv);
    bwd.options = c.exec;
  }

  const std::function<void()> run_forward = [&] { backend.forward(fwd); };
  const std::function<void()> run_backward = [&] { backend.backward(bwd); };
  const std::function<void()> run_both = [&] {
    backend.forward(fwd);
    backend.backward(bwd);
  };

  auto measure = [&](const std::string& pass, const std::function<void()>& call, double flops) {
    BenchRow row;
    row.backend = backend.name();
    row.plan = backend.plan(p, c.exec);
    row.pass = pass;
    row.problem = p;
    row.tile_q = c.exec.tile_q;
    row.tile_k = c.exec.tile_k;
    row.warmup = c.warmup;
    row.reps = c.reps;
    row.flops = flops;
    if (rt != nullptr) {
      row.times_ms = rt->time_ms(call, c.warmup, c.reps, c.flush_l2);
      row.timer = "device events";
      row.device = rt->device_name();
      rt->synchronize();
      const std::size_t before = rt->bytes_in_use();
      call();
      rt->synchronize();
      const std::size_t after = rt->bytes_in_use();
      row.peak_extra_bytes = static_cast<std::int64_t>(after > before ? after - before : 0);
      row.memory_method = "device bytes in use after one call minus before (kept workspace)";
    } else {
      row.threads = c.exec.num_threads > 0 ? c.exec.num_threads : omp_get_max_threads();
      row.times_ms = time_host(call, c.warmup, c.reps);
      row.timer = "steady_clock";
      row.device = host_cpu_name();
      const PeakMemory m = measure_peak_rss_growth(call);
      row.peak_extra_bytes = m.bytes;
      row.memory_method = m.method;
    }
    row.median_ms = median(row.times_ms);
    row.min_ms = *std::min_element(row.times_ms.begin(), row.times_ms.end());
    row.max_ms = *std::max_element(row.times_ms.begin(), row.times_ms.end());
    row.gflops = row.median_ms > 0.0 ? flops / (row.median_ms * 1e6) : 0.0;
    return row;
  };

  std::vector<BenchRow> rows;
  rows.push_back(measure("forward", run_forward, forward_flops(p)));
  if (c.backward) {
    // O and L for the backward come from the forward runs above.
    rows.push_back(measure("backward", run_backward, backward_flops(p)));
    rows.push_back(measure("forward+backward", run_both, forward_flops(p) + backward_flops(p)));
  }
  return rows;
}

nlohmann::json to_json(const BenchRow& r) {
  nlohmann::json j = {{"backend", r.backend},
                      {"pass", r.pass},
                      {"problem", to_json(r.problem)},
                      {"median_ms", r.median_ms},
                      {"min_ms", r.min_ms},
                      {"max_ms", r.max_ms},
                      {"times_ms", r.times_ms},
                      {"gflops", r.gflops},
                      {"flops", r.flops},
                      {"peak_extra_bytes", r.peak_extra_bytes},
                      {"memory_method", r.memory_method},
                      {"threads", r.threads},
                      {"tile_q", r.tile_q},
                      {"tile_k", r.tile_k},
                      {"warmup", r.warmup},
                      {"reps", r.reps},
                      {"timer", r.timer},
                      {"device", r.device}};
  if (!r.sweep.empty()) j["sweep"] = r.sweep;
  if (!r.label.empty()) j["label"] = r.label;
  if (!r.plan.empty()) j["plan"] = r.plan;
  return j;
}

std::string format_bench_table(const std::vector<BenchRow>& rows) {
  std::ostringstream o;
  char line[256];
  std::snprintf(line, sizeof line, "%-11s %-17s %11s %11s %10s %14s  %s\n", "backend", "pass",
                "median ms", "min ms", "GFLOP/s", "peak extra MiB", "problem");
  o << line;
  for (const BenchRow& r : rows) {
    char mem[32];
    if (r.peak_extra_bytes < 0)
      std::snprintf(mem, sizeof mem, "n/a");
    else
      std::snprintf(mem, sizeof mem, "%.2f", static_cast<double>(r.peak_extra_bytes) / 1048576.0);
    std::snprintf(line, sizeof line, "%-11s %-17s %11.3f %11.3f %10.2f %14s  ", r.backend.c_str(),
                  r.pass.c_str(), r.median_ms, r.min_ms, r.gflops, mem);
    o << line << (r.label.empty() ? describe(r.problem) : r.label) << "\n";
  }
  return o.str();
}

}  // namespace flashref::verify

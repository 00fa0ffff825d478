// Times the cpu backend's forward and backward against the naive reference backend on one
// problem (by default the one of cpu/README.md's Performance: float32, B=1, H=8, S=2048, d=64,
// causal, 2 threads).
//
//   flashref_cpu_timing [--shape B,H,S_q,S_k,d] [--heads-kv N] [--mask none|causal|...]
//                       [--dtype f32|f16|bf16] [--threads N] [--tile Bq,Bk] [--reps N]
//                       [--isa generic|avx2|avx512] [--no-reference]
//
// Prints the median of --reps timed runs after one warm-up, with GFLOP/s counted as
// FlashAttention's benchmarks count them (flashref::forward_flops / backward_flops).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "flashref/cpu/backend.hpp"
#include "flashref/cpu/isa.hpp"
#include "flashref/error.hpp"
#include "flashref/params.hpp"
#include "flashref/reference/backend.hpp"

namespace {

using flashref::DType;

struct Options {
  std::int64_t B = 1, H = 8, H_kv = 0, S_q = 2048, S_k = 2048, d = 64;
  flashref::Mask mask = flashref::Mask::causal_top_left;
  DType dtype = DType::f32;
  int threads = 2, tile_q = 0, tile_k = 0, reps = 5;
  bool reference = true;
};

std::vector<std::int64_t> parse_list(const std::string& s) {
  std::vector<std::int64_t> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) out.push_back(std::stoll(item));
  return out;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int a = 1; a < argc; ++a) {
    const std::string arg = argv[a];
    auto value = [&]() -> std::string {
      if (a + 1 >= argc) throw flashref::InvalidArgument(arg, "needs a value");
      return argv[++a];
    };
    if (arg == "--shape") {
      const auto v = parse_list(value());
      if (v.size() != 5) throw flashref::InvalidArgument(arg, "expected B,H,S_q,S_k,d");
      o.B = v[0], o.H = v[1], o.S_q = v[2], o.S_k = v[3], o.d = v[4];
    } else if (arg == "--heads-kv") {
      o.H_kv = std::stoll(value());
    } else if (arg == "--mask") {
      o.mask = flashref::parse_mask(value());
    } else if (arg == "--dtype") {
      o.dtype = flashref::parse_dtype(value());
    } else if (arg == "--threads") {
      o.threads = std::stoi(value());
    } else if (arg == "--tile") {
      const auto v = parse_list(value());
      if (v.size() != 2) throw flashref::InvalidArgument(arg, "expected Bq,Bk");
      o.tile_q = static_cast<int>(v[0]), o.tile_k = static_cast<int>(v[1]);
    } else if (arg == "--reps") {
      o.reps = std::max(1, std::stoi(value()));
    } else if (arg == "--isa") {
      const std::string name = value();
      bool found = false;
      for (auto isa : flashref::cpu::available_isas()) {
        if (flashref::cpu::isa_name(isa) == name) found = flashref::cpu::select_isa(isa);
      }
      if (!found) throw flashref::InvalidArgument(arg, "'" + name + "' is not available here");
    } else if (arg == "--no-reference") {
      o.reference = false;
    } else {
      throw flashref::InvalidArgument(arg, "unknown option");
    }
  }
  if (o.H_kv == 0) o.H_kv = o.H;
  return o;
}

struct Buffer {
  std::vector<unsigned char> bytes;
  flashref::TensorView view;
  Buffer(DType t, std::int64_t B, std::int64_t S, std::int64_t H, std::int64_t d)
      : bytes(static_cast<std::size_t>(B * S * H * d) * flashref::dtype_size(t)),
        view(flashref::bshd_view(bytes.data(), t, B, S, H, d)) {}
  void randomize(std::mt19937& rng) {
    std::normal_distribution<float> normal;
    const std::int64_t n = view.batch * view.seq * view.heads * view.dim;
    for (std::int64_t i = 0; i < n; ++i)
      flashref::store_from_float(view.data, view.dtype, i, normal(rng));
  }
};

double process_cpu_ms() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_nsec) * 1e-6;
}

// Median wall-clock ms over `reps` runs after a warm-up (first touch of the buffers, thread
// pool start), and the median CPU ms of the process (all threads) per run: on a shared
// machine, CPU time divided by the thread count is a steadier view of the work than wall time.
std::pair<double, double> median_ms(const std::function<void()>& run, int reps) {
  run();
  std::vector<double> wall, cpu;
  for (int r = 0; r < reps; ++r) {
    const double c0 = process_cpu_ms();
    const auto t0 = std::chrono::steady_clock::now();
    run();
    wall.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    cpu.push_back(process_cpu_ms() - c0);
  }
  std::sort(wall.begin(), wall.end());
  std::sort(cpu.begin(), cpu.end());
  return {wall[wall.size() / 2], cpu[cpu.size() / 2]};
}

}  // namespace

int main(int argc, char** argv) try {
  const Options o = parse(argc, argv);
  flashref::Problem p =
      flashref::make_problem(o.B, o.H, o.H_kv, o.S_q, o.S_k, o.d, o.mask, o.dtype);
  Buffer q(o.dtype, o.B, o.S_q, o.H, o.d), k(o.dtype, o.B, o.S_k, o.H_kv, o.d),
      v(o.dtype, o.B, o.S_k, o.H_kv, o.d), out(o.dtype, o.B, o.S_q, o.H, o.d),
      dO(o.dtype, o.B, o.S_q, o.H, o.d), dq(o.dtype, o.B, o.S_q, o.H, o.d),
      dk(o.dtype, o.B, o.S_k, o.H_kv, o.d), dv(o.dtype, o.B, o.S_k, o.H_kv, o.d);
  std::mt19937 rng(0);
  q.randomize(rng), k.randomize(rng), v.randomize(rng), dO.randomize(rng);
  std::vector<float> lse(static_cast<std::size_t>(o.B * o.H * o.S_q));

  flashref::ExecutionOptions exec;
  exec.num_threads = o.threads;
  exec.tile_q = o.tile_q;
  exec.tile_k = o.tile_k;
  const flashref::ForwardParams fwd{p, q.view, k.view, v.view, out.view, lse.data(), exec};
  const flashref::BackwardParams bwd{p,          q.view,  k.view,  v.view,  out.view, dO.view,
                                     lse.data(), dq.view, dk.view, dv.view, exec};

  std::printf("problem: %s, threads %d, isa %s\n", flashref::describe(p).c_str(), o.threads,
              std::string(flashref::cpu::isa_name(flashref::cpu::active_isa())).c_str());
  auto report = [&](const char* backend, const flashref::Backend& be, int reps) {
    const auto [f, f_cpu] = median_ms([&] { be.forward(fwd); }, reps);
    const auto [b, b_cpu] = median_ms([&] { be.backward(bwd); }, reps);
    std::printf(
        "%-10s forward %9.2f ms %7.1f GFLOP/s (cpu time %8.2f ms)   backward %9.2f ms "
        "%7.1f GFLOP/s (cpu time %8.2f ms)\n",
        backend, f, flashref::forward_flops(p) / f / 1e6, f_cpu, b,
        flashref::backward_flops(p) / b / 1e6, b_cpu);
    return std::pair{f, b};
  };
  const auto cpu = report("cpu", *flashref::cpu::make_backend(), o.reps);
  if (o.reference) {
    const auto ref = report("reference", *flashref::reference::make_backend(), std::min(o.reps, 3));
    std::printf("speed-up of cpu over reference: forward %.1fx, backward %.1fx\n",
                ref.first / cpu.first, ref.second / cpu.second);
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "flashref_cpu_timing: %s\n", e.what());
  return 2;
}

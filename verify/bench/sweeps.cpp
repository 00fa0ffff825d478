#include "flashref/verify/bench/sweeps.hpp"

#include <string>

#include "flashref/error.hpp"

namespace flashref::verify {

const std::vector<Sweep>& sweeps() {
  static const std::vector<Sweep> table = {
      {"cpu-peer",
       "the CPU comparison of docs/benchmarks.md: float32, B=1, H=8, S=2048, d=64, causal, "
       "forward and backward, against PyTorch's CPU flash attention (bench/cpu_peers.py)",
       {"cpu", "reference"},
       [] {
         return std::vector<SweepPoint>{
             {make_problem(1, 8, 8, 2048, 2048, 64, Mask::causal_top_left, DType::f32), true,
              "f32 B=1 H=8 S=2048 d=64 causal"}};
       }},
      // The cuda backend's sweeps. bench/peers.py runs PyTorch's backends, the naive
      // one included, on the same points (`--sweep NAME`), so the two tables line up.
      {"naive-memory",
       "the course's problem 1: B=8, one head, d in {16, 32, 64, 128}, S in {256, 1024, 4096, "
       "8192, 16384}, float32, no mask, forward and backward (the naive side: bench/peers.py)",
       {"cuda"},
       [] {
         std::vector<SweepPoint> points;
         for (std::int64_t d : {16, 32, 64, 128})
           for (std::int64_t S : {256, 1024, 4096, 8192, 16384})
             points.push_back({make_problem(8, 1, 1, S, S, d, Mask::none, DType::f32), true,
                               "B=8 S=" + std::to_string(S) + " d=" + std::to_string(d)});
         return points;
       }},
      {"course",
       "the course's problem 5: B=1, one head, causal, S = 128..65536 and d = 16..128 (powers "
       "of two), bfloat16 and float32, forward, backward and forward+backward",
       {"cuda"},
       [] {
         std::vector<SweepPoint> points;
         for (DType t : {DType::bf16, DType::f32})
           for (std::int64_t d : {16, 32, 64, 128})
             for (std::int64_t S = 128; S <= 65536; S *= 2)
               points.push_back({make_problem(1, 1, 1, S, S, d, Mask::causal_top_left, t), true,
                                 std::string(dtype_name(t)) + " S=" + std::to_string(S) +
                                     " d=" + std::to_string(d)});
         return points;
       }},
      {"leaderboard",
       "the course's leaderboard: bfloat16, causal, B=1, H=16, S=16384, d=64, and the same at "
       "d=128, forward and backward",
       {"cuda"},
       [] {
         std::vector<SweepPoint> points;
         for (std::int64_t d : {64, 128})
           points.push_back(
               {make_problem(1, 16, 16, 16384, 16384, d, Mask::causal_top_left, DType::bf16), true,
                "bf16 B=1 H=16 S=16384 d=" + std::to_string(d) + " causal"});
         return points;
       }},
  };
  return table;
}

const Sweep& find_sweep(std::string_view name) {
  std::string known;
  for (const Sweep& s : sweeps()) {
    if (s.name == name) return s;
    known += (known.empty() ? "" : ", ") + s.name;
  }
  throw InvalidArgument("--sweep", "unknown sweep '" + std::string(name) + "'; known: " + known);
}

}  // namespace flashref::verify

#include "flashref/verify/problem_data.hpp"

#include <cmath>
#include <numbers>
#include <random>

namespace flashref::verify {
namespace {

// SplitMix64: spreads (seed, stream) into independent, well-mixed generator seeds.
std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// std::normal_distribution is implementation-defined; Box-Muller on mt19937_64 (whose output
// the standard fixes) gives the same inputs for a seed on every platform and compiler.
class Normal {
 public:
  explicit Normal(std::uint64_t seed) : engine_(seed) {}
  double operator()() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    // u1 in (0, 1], so log(u1) is finite; u2 in [0, 1).
    const double u1 = static_cast<double>((engine_() >> 11) + 1) * 0x1.0p-53;
    const double u2 = static_cast<double>(engine_() >> 11) * 0x1.0p-53;
    const double r = std::sqrt(-2.0 * std::log(u1));
    const double theta = 2.0 * std::numbers::pi * u2;
    spare_ = r * std::sin(theta);
    has_spare_ = true;
    return r * std::cos(theta);
  }

 private:
  std::mt19937_64 engine_;
  double spare_ = 0.0;
  bool has_spare_ = false;
};

HostTensor random_tensor(const Problem& p, const InputOptions& o, std::int64_t heads,
                         std::int64_t seq, std::uint64_t stream, double stddev) {
  HostTensor t(p.dtype, o.layout, p.B, heads, seq, p.d);
  Normal normal(splitmix64(o.seed ^ splitmix64(stream)));
  // Canonical (b, h, s, i) order, so a seed gives the same values in either layout.
  for (std::int64_t b = 0; b < p.B; ++b)
    for (std::int64_t h = 0; h < heads; ++h)
      for (std::int64_t s = 0; s < seq; ++s)
        for (std::int64_t i = 0; i < p.d; ++i)
          t.set(b, h, s, i, static_cast<float>(stddev * normal()));
  return t;
}

}  // namespace

ProblemData make_problem_data(const Problem& problem, const InputOptions& options) {
  const double qk_std = options.large ? kLargeInputStd : 1.0;
  ProblemData data;
  data.problem = problem;
  data.q = random_tensor(problem, options, problem.H, problem.S_q, 1, qk_std);
  data.k = random_tensor(problem, options, problem.H_kv, problem.S_k, 2, qk_std);
  data.v = random_tensor(problem, options, problem.H_kv, problem.S_k, 3, 1.0);
  data.dO = random_tensor(problem, options, problem.H, problem.S_q, 4, 1.0);
  return data;
}

}  // namespace flashref::verify

// Seeded random inputs for one problem: Q, K, V and dO in the problem's dtype.
#pragma once

#include <cstdint>

#include "flashref/problem.hpp"
#include "flashref/verify/host_tensor.hpp"

namespace flashref::verify {

// Standard deviation of Q and K for large-magnitude inputs. The scores S = scale * Q K^T then
// have a standard deviation of kLargeInputStd^2 = 100 for the default scale 1/sqrt(d)
// (independent of d), so rows hold scores of several hundred: exp() overflows in float32
// unless the running max is subtracted, and the softmax is nearly one-hot.
inline constexpr double kLargeInputStd = 10.0;

struct InputOptions {
  std::uint64_t seed = 0;
  bool large = false;            // Q and K ~ N(0, kLargeInputStd^2) instead of N(0, 1)
  Layout layout = Layout::bshd;  // memory layout of the generated tensors
};

struct ProblemData {
  Problem problem;
  HostTensor q;   // (B, H, S_q, d)
  HostTensor k;   // (B, H_kv, S_k, d)
  HostTensor v;   // (B, H_kv, S_k, d)
  HostTensor dO;  // (B, H, S_q, d)
};

// Normal values (Box-Muller on mt19937_64, so identical on every platform), rounded to the
// problem's dtype; each tensor draws from its own stream derived from the seed. V and dO are
// always N(0, 1).
ProblemData make_problem_data(const Problem& problem, const InputOptions& options);

}  // namespace flashref::verify

// Runs any Backend on host tensors and returns what it wrote.
//
// Outputs are poisoned (every byte 0xff: NaN in every dtype) before the run, so an element the
// backend never wrote shows up as NaN in the statistics. Device backends get their inputs
// through Backend::device_runtime(); verify/ itself never links CUDA.
#pragma once

#include <xtensor/xtensor.hpp>

#include "flashref/backend.hpp"
#include "flashref/verify/problem_data.hpp"
#include "flashref/verify/tensor_set.hpp"

namespace flashref::verify {

struct RunOptions {
  ExecutionOptions exec;         // tiles, threads, allow_tf32, stream
  Layout layout = Layout::bshd;  // layout of the tensors the backend sees (inputs are copied)
  bool backward = false;         // also run backward, from the backend's own O and L
};

struct RunOutputs {
  // Raw outputs, exactly as written, in the run's layout.
  HostTensor o;               // (B, H, S_q, d), problem.dtype
  xt::xtensor<float, 3> lse;  // L, (B, H, S_q)
  HostTensor dq, dk, dv;      // empty unless backward; problem.grad_dtype

  // The same values as double in the canonical layout, for the statistics: O and L, and
  // dQ, dK, dV after a backward.
  TensorSet values;
  bool has_backward() const { return values.has_backward(); }
};

// Validates the problem, then runs forward (and backward). Throws what the backend throws
// (InvalidArgument, Unsupported, std::runtime_error); checks nothing about the values.
RunOutputs run_backend(const Backend& backend, const ProblemData& data, const RunOptions& options);

// Runs only the backward, from the given O (problem.dtype, any layout) and L (B, H, S_q)
// instead of the backend's own: how the rule gives the baseline the inputs a candidate's
// backward received. The result has o, lse and the values O and L set to the given ones, and
// the gradients.
RunOutputs run_backward_from(const Backend& backend, const ProblemData& data,
                             const RunOptions& options, const HostTensor& o,
                             const xt::xtensor<float, 3>& lse);

}  // namespace flashref::verify

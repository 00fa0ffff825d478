#include "flashref/verify/runner.hpp"

#include <array>
#include <optional>

#include <xtensor/xbuilder.hpp>
#include <xtensor/xmanipulation.hpp>

#include "flashref/error.hpp"
#include "staging.hpp"

namespace flashref::verify {
namespace {

// The input in the run's layout: the caller's tensor, or a copy when the layouts differ.
const HostTensor& in_layout(const HostTensor& t, Layout layout, std::optional<HostTensor>& copy) {
  if (t.layout() == layout) return t;
  copy = t.with_layout(layout);
  return *copy;
}

// Backward of `backend` from `bwd`'s staged q, k, v, o and lse; stages dO and fills the
// gradients of `out`.
void run_backward(const Backend& backend, const ProblemData& data, const RunOptions& options,
                  Staging& staging, BackwardParams bwd, RunOutputs& out) {
  const Problem& p = data.problem;
  std::optional<HostTensor> dO_copy;
  const HostTensor& dO = in_layout(data.dO, options.layout, dO_copy);
  out.dq = HostTensor(p.grad_dtype, options.layout, p.B, p.H, p.S_q, p.d);
  out.dk = HostTensor(p.grad_dtype, options.layout, p.B, p.H_kv, p.S_k, p.d);
  out.dv = HostTensor(p.grad_dtype, options.layout, p.B, p.H_kv, p.S_k, p.d);
  bwd.problem = p;
  bwd.dO = staging.input(dO);
  bwd.dq = staging.output(out.dq);
  bwd.dk = staging.output(out.dk);
  bwd.dv = staging.output(out.dv);
  bwd.options = options.exec;
  backend.backward(bwd);
  staging.fetch(out.dq, bwd.dq);
  staging.fetch(out.dk, bwd.dk);
  staging.fetch(out.dv, bwd.dv);
  out.values[TensorId::dQ] = out.dq.to_double();
  out.values[TensorId::dK] = out.dk.to_double();
  out.values[TensorId::dV] = out.dv.to_double();
}

xt::xtensor<float, 3> lse_shaped(const Problem& p) {
  return xt::xtensor<float, 3>(std::array{static_cast<std::size_t>(p.B),
                                          static_cast<std::size_t>(p.H),
                                          static_cast<std::size_t>(p.S_q)});
}

}  // namespace

RunOutputs run_backend(const Backend& backend, const ProblemData& data, const RunOptions& options) {
  const Problem& p = data.problem;
  validate(p);
  std::optional<HostTensor> q_copy, k_copy, v_copy;
  const HostTensor& q = in_layout(data.q, options.layout, q_copy);
  const HostTensor& k = in_layout(data.k, options.layout, k_copy);
  const HostTensor& v = in_layout(data.v, options.layout, v_copy);

  RunOutputs out;
  out.o = HostTensor(p.dtype, options.layout, p.B, p.H, p.S_q, p.d);
  out.lse = lse_shaped(p);

  Staging staging(backend);
  ForwardParams fwd;
  fwd.problem = p;
  fwd.q = staging.input(q);
  fwd.k = staging.input(k);
  fwd.v = staging.input(v);
  fwd.o = staging.output(out.o);
  fwd.lse = staging.output(out.lse);
  fwd.options = options.exec;
  backend.forward(fwd);
  staging.fetch(out.o, fwd.o);
  staging.fetch(out.lse, fwd.lse);
  out.values[TensorId::O] = out.o.to_double();
  out.values[TensorId::L] = xt::cast<double>(out.lse);

  if (options.backward) {
    // The backend's own O and L: the backward is judged as used in training.
    BackwardParams bwd;
    bwd.q = fwd.q;
    bwd.k = fwd.k;
    bwd.v = fwd.v;
    bwd.o = fwd.o;
    bwd.lse = fwd.lse;
    run_backward(backend, data, options, staging, bwd, out);
  }
  return out;
}

RunOutputs run_backward_from(const Backend& backend, const ProblemData& data,
                             const RunOptions& options, const HostTensor& o,
                             const xt::xtensor<float, 3>& lse) {
  const Problem& p = data.problem;
  validate(p);
  if (o.dtype() != p.dtype || o.B() != p.B || o.H() != p.H || o.S() != p.S_q || o.d() != p.d) {
    throw InvalidArgument("o", "must be the problem's O: dtype " +
                                   std::string(dtype_name(p.dtype)) + ", shape (B, H, S_q, d)");
  }
  if (lse.shape() != lse_shaped(p).shape()) {
    throw InvalidArgument("lse", "must have shape (B, H, S_q)");
  }
  std::optional<HostTensor> q_copy, k_copy, v_copy, o_copy;
  const HostTensor& q = in_layout(data.q, options.layout, q_copy);
  const HostTensor& k = in_layout(data.k, options.layout, k_copy);
  const HostTensor& v = in_layout(data.v, options.layout, v_copy);
  RunOutputs out;
  out.o = in_layout(o, options.layout, o_copy);
  out.lse = lse;
  out.values[TensorId::O] = out.o.to_double();
  out.values[TensorId::L] = xt::cast<double>(out.lse);

  Staging staging(backend);
  BackwardParams bwd;
  bwd.q = staging.input(q);
  bwd.k = staging.input(k);
  bwd.v = staging.input(v);
  bwd.o = staging.input(out.o);
  bwd.lse = staging.input(out.lse);
  run_backward(backend, data, options, staging, bwd, out);
  return out;
}

}  // namespace flashref::verify

#include "flashref/verify/runner.hpp"

#include <array>
#include <optional>

#include <xtensor/xbuilder.hpp>
#include <xtensor/xmanipulation.hpp>

#include "staging.hpp"

namespace flashref::verify {
namespace {

// The input in the run's layout: the caller's tensor, or a copy when the layouts differ.
const HostTensor& in_layout(const HostTensor& t, Layout layout, std::optional<HostTensor>& copy) {
  if (t.layout() == layout) return t;
  copy = t.with_layout(layout);
  return *copy;
}

}  // namespace

RunOutputs run_backend(const Backend& backend, const ProblemData& data, const RunOptions& options) {
  const Problem& p = data.problem;
  validate(p);
  std::optional<HostTensor> q_copy, k_copy, v_copy, dO_copy;
  const HostTensor& q = in_layout(data.q, options.layout, q_copy);
  const HostTensor& k = in_layout(data.k, options.layout, k_copy);
  const HostTensor& v = in_layout(data.v, options.layout, v_copy);

  RunOutputs out;
  out.o = HostTensor(p.dtype, options.layout, p.B, p.H, p.S_q, p.d);
  out.lse =
      xt::xtensor<float, 3>(std::array{static_cast<std::size_t>(p.B), static_cast<std::size_t>(p.H),
                                       static_cast<std::size_t>(p.S_q)});

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
  out.O = out.o.to_double();
  out.L = xt::cast<double>(out.lse);

  if (options.backward) {
    const HostTensor& dO = in_layout(data.dO, options.layout, dO_copy);
    out.dq = HostTensor(p.grad_dtype, options.layout, p.B, p.H, p.S_q, p.d);
    out.dk = HostTensor(p.grad_dtype, options.layout, p.B, p.H_kv, p.S_k, p.d);
    out.dv = HostTensor(p.grad_dtype, options.layout, p.B, p.H_kv, p.S_k, p.d);
    BackwardParams bwd;
    bwd.problem = p;
    bwd.q = fwd.q;
    bwd.k = fwd.k;
    bwd.v = fwd.v;
    bwd.o = fwd.o;  // the backend's own O and L: the backward is judged as used in training
    bwd.lse = fwd.lse;
    bwd.dO = staging.input(dO);
    bwd.dq = staging.output(out.dq);
    bwd.dk = staging.output(out.dk);
    bwd.dv = staging.output(out.dv);
    bwd.options = options.exec;
    backend.backward(bwd);
    staging.fetch(out.dq, bwd.dq);
    staging.fetch(out.dk, bwd.dk);
    staging.fetch(out.dv, bwd.dv);
    out.dQ = out.dq.to_double();
    out.dK = out.dk.to_double();
    out.dV = out.dv.to_double();
    out.has_backward = true;
  }
  return out;
}

}  // namespace flashref::verify

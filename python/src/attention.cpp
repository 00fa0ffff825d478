#include "attention.hpp"

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>
#include <xtensor/xtensor.hpp>

#include "arrays.hpp"
#include "flashref/backend.hpp"
#include "flashref/error.hpp"
#include "flashref/params.hpp"
#include "flashref/reference/gold.hpp"
#include "problem_args.hpp"

namespace flashref::python {
namespace {

// One backend object per name for the life of the process: the cuda backend keeps its
// workspace pool between calls.
const Backend& backend_named(const std::string& name) {
  static std::mutex mutex;
  static std::map<std::string, std::unique_ptr<Backend>> backends;
  const std::lock_guard<std::mutex> lock(mutex);
  std::unique_ptr<Backend>& b = backends[name];
  if (!b) b = make_backend(name);
  return *b;
}

const Backend& backend_for(const AnyArray& q) {
  if (q.device_type() == nb::device::cpu::value) return backend_named("cpu");
  if (q.device_type() == nb::device::cuda::value) return backend_named("cuda");
  throw nb::type_error("q: flashref.attention runs on CPU or CUDA tensors");
}

Problem problem_of(const TensorView& q, const TensorView& k, const std::string& mask,
                   double scale) {
  Problem p;
  p.B = q.batch;
  p.H = q.heads;
  p.S_q = q.seq;
  p.d = q.dim;
  p.H_kv = k.heads;
  p.S_k = k.seq;
  p.mask = parse_mask_arg(mask, "mask");
  p.scale = scale;
  p.dtype = q.dtype;
  p.grad_dtype = q.dtype;
  return p;
}

void require_lse(const OutArray& lse, const Problem& p, bool on_device) {
  if (lse.dtype() != nb::dtype<float>() || lse.ndim() != 3 ||
      static_cast<std::int64_t>(lse.shape(0)) != p.B ||
      static_cast<std::int64_t>(lse.shape(1)) != p.H ||
      static_cast<std::int64_t>(lse.shape(2)) != p.S_q || lse.stride(2) != 1 ||
      lse.stride(1) != p.S_q || lse.stride(0) != p.H * p.S_q) {
    throw InvalidArgument("lse", "must be contiguous float32 of shape (B, H, S_q)");
  }
  if ((lse.device_type() == nb::device::cuda::value) != on_device) {
    throw InvalidArgument("lse", "must be on q's device");
  }
}

ExecutionOptions options_of(std::uintptr_t stream, bool allow_tf32, bool deterministic = true) {
  ExecutionOptions o;
  o.stream = reinterpret_cast<void*>(stream);
  o.allow_tf32 = allow_tf32;
  o.deterministic = deterministic;
  return o;
}

void forward(const AnyArray& q, const AnyArray& k, const AnyArray& v, OutArray o, OutArray lse,
             const std::string& mask, double scale, std::uintptr_t stream, bool allow_tf32) {
  const Backend& backend = backend_for(q);
  ForwardParams params;
  params.q = view_of(q, "q");
  params.k = view_of(k, "k");
  params.v = view_of(v, "v");
  params.o = view_of(o, "o");
  params.problem = problem_of(params.q, params.k, mask, scale);
  require_lse(lse, params.problem, q.device_type() == nb::device::cuda::value);
  params.lse = static_cast<float*>(lse.data());
  params.options = options_of(stream, allow_tf32);
  nb::gil_scoped_release release;
  backend.forward(params);
}

void backward(const AnyArray& q, const AnyArray& k, const AnyArray& v, const AnyArray& o,
              const AnyArray& dO, OutArray lse, OutArray dq, OutArray dk, OutArray dv,
              const std::string& mask, double scale, std::uintptr_t stream, bool allow_tf32,
              bool deterministic) {
  const Backend& backend = backend_for(q);
  BackwardParams params;
  params.q = view_of(q, "q");
  params.k = view_of(k, "k");
  params.v = view_of(v, "v");
  params.o = view_of(o, "o");
  params.dO = view_of(dO, "do");
  params.dq = view_of(dq, "dq");
  params.dk = view_of(dk, "dk");
  params.dv = view_of(dv, "dv");
  params.problem = problem_of(params.q, params.k, mask, scale);
  params.problem.grad_dtype = params.dq.dtype;
  require_lse(lse, params.problem, q.device_type() == nb::device::cuda::value);
  params.lse = static_cast<const float*>(lse.data());
  params.options = options_of(stream, allow_tf32, deterministic);
  nb::gil_scoped_release release;
  backend.backward(params);
}

// The float64 gold on float64 host tensors (flashref.attention's path for gradcheck): reads
// the inputs exactly, writes O, L or dQ, dK, dV into the given float64 arrays.
Problem gold_problem(const xt::xtensor<double, 4>& q, const xt::xtensor<double, 4>& k,
                     const std::string& mask, double scale) {
  Problem p;
  p.B = static_cast<std::int64_t>(q.shape(0));
  p.H = static_cast<std::int64_t>(q.shape(1));
  p.S_q = static_cast<std::int64_t>(q.shape(2));
  p.d = static_cast<std::int64_t>(q.shape(3));
  p.H_kv = static_cast<std::int64_t>(k.shape(1));
  p.S_k = static_cast<std::int64_t>(k.shape(2));
  p.mask = parse_mask_arg(mask, "mask");
  p.scale = scale;
  return p;
}

xt::xtensor<double, 4> as4(const AnyArray& a, const std::string& name) {
  if (a.ndim() != 4) throw InvalidArgument(name, "must be 4-D (B, H, S, d) here");
  return to_double(a, name);
}

// Copies `values` into the float64 array `out` (its own strides), whose shape must match.
template <class Values>
void write_f64(const Values& values, OutArray out, const std::string& name) {
  if (out.dtype() != nb::dtype<double>() || out.device_type() != nb::device::cpu::value ||
      out.ndim() != values.dimension()) {
    throw InvalidArgument(name, "must be a float64 host array of the result's rank");
  }
  for (std::size_t i = 0; i < out.ndim(); ++i) {
    if (out.shape(i) != values.shape()[i]) throw InvalidArgument(name, "has the wrong shape");
  }
  double* data = static_cast<double*>(out.data());
  std::vector<std::size_t> index(out.ndim(), 0);
  for (std::size_t n = 0; n < values.size(); ++n) {
    std::int64_t offset = 0;
    for (std::size_t i = 0; i < index.size(); ++i) offset += static_cast<std::int64_t>(index[i]) * out.stride(i);
    data[offset] = values.data()[n];
    for (std::size_t i = index.size(); i-- > 0;) {
      if (++index[i] < out.shape(i)) break;
      index[i] = 0;
    }
  }
}

void gold_forward(const AnyArray& q, const AnyArray& k, const AnyArray& v, OutArray o,
                  OutArray lse, const std::string& mask, double scale) {
  const xt::xtensor<double, 4> Q = as4(q, "q"), K = as4(k, "k"), V = as4(v, "v");
  const Problem p = gold_problem(Q, K, mask, scale);
  reference::GoldForward f;
  {
    nb::gil_scoped_release release;
    f = reference::gold_forward(p, Q, K, V);
  }
  write_f64(f.O, o, "o");
  write_f64(f.L, lse, "lse");
}

void gold_backward(const AnyArray& q, const AnyArray& k, const AnyArray& v, const AnyArray& dO,
                   OutArray dq, OutArray dk, OutArray dv, const std::string& mask, double scale) {
  const xt::xtensor<double, 4> Q = as4(q, "q"), K = as4(k, "k"), V = as4(v, "v"),
                               dO4 = as4(dO, "do");
  const Problem p = gold_problem(Q, K, mask, scale);
  reference::GoldBackward b;
  {
    nb::gil_scoped_release release;
    b = reference::gold_backward(p, Q, K, V, dO4);
  }
  write_f64(b.dQ, dq, "dq");
  write_f64(b.dK, dk, "dk");
  write_f64(b.dV, dv, "dv");
}

// Backend::plan() of the named backend for a problem of these sizes (what would run it, and
// why; "" for a backend with one way).
std::string plan(const std::string& backend, std::int64_t B, std::int64_t H, std::int64_t H_kv,
                 std::int64_t S_q, std::int64_t S_k, std::int64_t d, const std::string& mask,
                 const std::string& dtype, bool allow_tf32) {
  Problem p = make_problem(B, H, H_kv, S_q, S_k, d, parse_mask_arg(mask, "mask"),
                           parse_dtype_arg(dtype, "dtype"));
  validate(p);
  ExecutionOptions options;
  options.allow_tf32 = allow_tf32;
  return make_backend(backend)->plan(p, options);
}

}  // namespace

void bind_attention(nb::module_& m) {
  m.def("attention_forward", &forward, nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("o"),
        nb::arg("lse"), nb::arg("mask"), nb::arg("scale"), nb::arg("stream"),
        nb::arg("allow_tf32"),
        "Writes O and L for Q, K, V, all (B, H, S, d) with any strides (d contiguous).");
  m.def("attention_backward", &backward, nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("o"),
        nb::arg("do_"), nb::arg("lse"), nb::arg("dq"), nb::arg("dk"), nb::arg("dv"),
        nb::arg("mask"), nb::arg("scale"), nb::arg("stream"), nb::arg("allow_tf32"),
        nb::arg("deterministic") = true,
        "Writes dQ, dK, dV; deterministic=False lets the cuda backend sum dQ atomically.");
  m.def("gold_forward", &gold_forward, nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("o"),
        nb::arg("lse"), nb::arg("mask"), nb::arg("scale"),
        "The float64 gold's O and L for float64 host arrays (B, H, S, d).");
  m.def("gold_backward", &gold_backward, nb::arg("q"), nb::arg("k"), nb::arg("v"),
        nb::arg("do_"), nb::arg("dq"), nb::arg("dk"), nb::arg("dv"), nb::arg("mask"),
        nb::arg("scale"), "The float64 gold's dQ, dK, dV for float64 host arrays.");
  m.def("backend_names", &backend_names, "The backends this build has.");
  m.def("plan", &plan, nb::arg("backend"), nb::arg("B"), nb::arg("H"), nb::arg("H_kv"),
        nb::arg("S_q"), nb::arg("S_k"), nb::arg("d"), nb::arg("mask"), nb::arg("dtype"),
        nb::arg("allow_tf32"), "Which of the backend's kernels would run the problem, and why.");
}

}  // namespace flashref::python

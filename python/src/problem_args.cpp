#include "problem_args.hpp"

#include <cmath>

#include "flashref/error.hpp"
#include "flashref/params.hpp"

namespace flashref::python {
namespace {

std::string shape_text(const AnyArray& a) {
  std::string s = "(";
  for (std::size_t i = 0; i < a.ndim(); ++i) s += (i ? ", " : "") + std::to_string(a.shape(i));
  return s + ")";
}

void require_rank4(const AnyArray& a, const std::string& name) {
  if (a.ndim() != 4) {
    throw InvalidArgument(name, "must be (B, H, S, d) or the course's (B, S, d), got shape " +
                                    shape_text(a));
  }
}

// Every array's dtype is q's: a kernel gets its inputs in one dtype.
void require_same_dtype(const AnyArray& a, const AnyArray& q, const std::string& name) {
  if (a.dtype() != q.dtype()) {
    throw nb::type_error((name + ": dtype differs from q's; give q, k, v and do in one dtype")
                             .c_str());
  }
}

}  // namespace

Mask parse_mask_arg(const std::string& text, const std::string& name) {
  try {
    return parse_mask(text);
  } catch (const InvalidArgument&) {
    throw InvalidArgument(name, "unknown mask '" + text +
                                    "' (expected 'none', 'causal' or 'causal-bottom-right')");
  }
}

DType parse_dtype_arg(const std::string& text, const std::string& name) {
  try {
    return parse_dtype(text);
  } catch (const InvalidArgument&) {
    throw InvalidArgument(name, "unknown dtype '" + text +
                                    "' (expected 'float32', 'float16' or 'bfloat16')");
  }
}

verify::ProblemData problem_data(const AnyArray& q, const AnyArray& k, const AnyArray& v,
                                 const std::optional<AnyArray>& dO, const ProblemArgs& args) {
  require_rank4(q, "q");
  require_rank4(k, "k");
  require_rank4(v, "v");
  require_same_dtype(k, q, "k");
  require_same_dtype(v, q, "v");
  if (dO) {
    require_rank4(*dO, "do");
    require_same_dtype(*dO, q, "do");
  }
  Problem p;
  p.B = static_cast<std::int64_t>(q.shape(0));
  p.H = static_cast<std::int64_t>(q.shape(1));
  p.S_q = static_cast<std::int64_t>(q.shape(2));
  p.d = static_cast<std::int64_t>(q.shape(3));
  p.H_kv = static_cast<std::int64_t>(k.shape(1));
  p.S_k = static_cast<std::int64_t>(k.shape(2));
  if (static_cast<std::int64_t>(k.shape(0)) != p.B || static_cast<std::int64_t>(k.shape(3)) != p.d) {
    throw InvalidArgument("k", "shape " + shape_text(k) + " does not fit q's " + shape_text(q) +
                                   ": B and d must match");
  }
  for (std::size_t i = 0; i < 4; ++i) {
    if (v.shape(i) != k.shape(i)) {
      throw InvalidArgument("v", "shape " + shape_text(v) + " must equal k's " + shape_text(k));
    }
  }
  if (p.H % p.H_kv != 0) {
    throw InvalidArgument("k", "its " + std::to_string(p.H_kv) + " heads must divide q's " +
                                   std::to_string(p.H) + " (grouped-query attention)");
  }
  if (dO) {
    for (std::size_t i = 0; i < 4; ++i) {
      if (dO->shape(i) != q.shape(i)) {
        throw InvalidArgument("do", "shape " + shape_text(*dO) + " must equal q's " + shape_text(q));
      }
    }
  }
  p.mask = parse_mask_arg(args.mask, "mask");
  const bool f64 = q.dtype() == nb::dtype<double>();
  if (args.dtype) {
    p.dtype = parse_dtype_arg(*args.dtype, "dtype");
  } else if (f64) {
    throw nb::type_error(
        "q: float64 inputs need dtype= (the dtype your kernel computed in; they are rounded to it)");
  } else {
    p.dtype = array_dtype(q.dtype(), "q");
  }
  p.grad_dtype = args.grad_dtype ? parse_dtype_arg(*args.grad_dtype, "grad_dtype") : p.dtype;
  p.scale = args.scale ? *args.scale : default_scale(p.d);
  if (!std::isfinite(p.scale)) throw InvalidArgument("scale", "must be finite");
  try {
    validate(p);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument("q", e.what());
  }
  verify::ProblemData data;
  data.problem = p;
  data.q = to_host_tensor(q, p.dtype, "q");
  data.k = to_host_tensor(k, p.dtype, "k");
  data.v = to_host_tensor(v, p.dtype, "v");
  if (dO) data.dO = to_host_tensor(*dO, p.dtype, "do");
  return data;
}

}  // namespace flashref::python

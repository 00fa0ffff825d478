#include "flashref/problem.hpp"

#include <sstream>

#include "flashref/error.hpp"

namespace flashref {

std::string_view mask_name(Mask m) {
  switch (m) {
    case Mask::none: return "none";
    case Mask::causal_top_left: return "causal";
    case Mask::causal_bottom_right: return "causal-bottom-right";
  }
  return "?";
}

Mask parse_mask(std::string_view s) {
  if (s == "none") return Mask::none;
  if (s == "causal" || s == "causal-top-left" || s == "causal_top_left") return Mask::causal_top_left;
  if (s == "causal-bottom-right" || s == "causal_bottom_right") return Mask::causal_bottom_right;
  throw InvalidArgument("--mask", "unknown mask '" + std::string(s) +
                                      "' (expected none, causal or causal-bottom-right)");
}

Problem make_problem(std::int64_t B, std::int64_t H, std::int64_t H_kv, std::int64_t S_q,
                     std::int64_t S_k, std::int64_t d, Mask mask, DType dtype) {
  Problem p;
  p.B = B;
  p.H = H;
  p.H_kv = H_kv;
  p.S_q = S_q;
  p.S_k = S_k;
  p.d = d;
  p.scale = d > 0 ? default_scale(d) : 1.0;
  p.mask = mask;
  p.dtype = dtype;
  p.grad_dtype = dtype;
  return p;
}

double forward_flops(const Problem& p) {
  const double full = 4.0 * static_cast<double>(p.B) * static_cast<double>(p.H) *
                      static_cast<double>(p.S_q) * static_cast<double>(p.S_k) *
                      static_cast<double>(p.d);
  return p.is_causal() ? full / 2.0 : full;
}

double backward_flops(const Problem& p) { return 2.5 * forward_flops(p); }

std::string describe(const Problem& p) {
  std::ostringstream s;
  s << "B=" << p.B << " H=" << p.H << " H_kv=" << p.H_kv << " S_q=" << p.S_q << " S_k=" << p.S_k
    << " d=" << p.d << " mask=" << mask_name(p.mask) << " dtype=" << dtype_name(p.dtype);
  if (p.grad_dtype != p.dtype) s << " grad_dtype=" << dtype_name(p.grad_dtype);
  s << " scale=" << p.scale;
  if (p.placement.placed()) {
    const Placement& at = p.placement;
    s << " block=q[" << at.q_offset << "," << at.q_offset + p.S_q << ")/" << at.S_q_total << ",k["
      << at.k_offset << "," << at.k_offset + p.S_k << ")/" << at.S_k_total;
  }
  return s.str();
}

}  // namespace flashref

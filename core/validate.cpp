// Input validation shared by every backend. Each check names the field and the values.
#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "flashref/error.hpp"
#include "flashref/params.hpp"

namespace flashref {
namespace {

std::string shape_str(std::int64_t b, std::int64_t s, std::int64_t h, std::int64_t d) {
  std::ostringstream o;
  o << "(" << b << ", " << s << ", " << h << ", " << d << ")";
  return o.str();
}

void require_view(const TensorView& v, const std::string& field, DType dtype, std::int64_t B,
                  std::int64_t S, std::int64_t H, std::int64_t d) {
  if (v.data == nullptr) throw InvalidArgument(field, "data pointer is null");
  if (v.dtype != dtype) {
    throw InvalidArgument(field, "dtype is " + std::string(dtype_name(v.dtype)) +
                                     " but the problem needs " + std::string(dtype_name(dtype)));
  }
  if (v.batch != B || v.seq != S || v.heads != H || v.dim != d) {
    throw InvalidArgument(field, "shape (batch, seq, heads, dim) is " +
                                     shape_str(v.batch, v.seq, v.heads, v.dim) +
                                     " but the problem needs " + shape_str(B, S, H, d));
  }
  if (v.batch_stride < 0 || v.seq_stride < 0 || v.head_stride < 0) {
    std::ostringstream o;
    o << "strides must be non-negative, got batch_stride=" << v.batch_stride
      << " seq_stride=" << v.seq_stride << " head_stride=" << v.head_stride;
    throw InvalidArgument(field, o.str());
  }
}

// A byte range and, for views, the start of every contiguous row of `dim` elements.
struct Footprint {
  std::string field;
  std::uintptr_t lo = 0, hi = 0;     // bytes [lo, hi)
  const TensorView* view = nullptr;  // null for L, which is contiguous
};

Footprint footprint(const TensorView& v, const std::string& field) {
  const ElementSpan span = element_span(v);
  const auto base = reinterpret_cast<std::uintptr_t>(v.data);
  const auto size = static_cast<std::uintptr_t>(dtype_size(v.dtype));
  return {field, base + static_cast<std::uintptr_t>(span.lo) * size,
          base + static_cast<std::uintptr_t>(span.hi) * size, &v};
}

Footprint footprint(const float* lse, std::int64_t count, const std::string& field) {
  const auto base = reinterpret_cast<std::uintptr_t>(lse);
  return {field, base, base + static_cast<std::uintptr_t>(count) * sizeof(float), nullptr};
}

// Sorted byte intervals [start, end) of every row of a footprint.
std::vector<std::pair<std::uintptr_t, std::uintptr_t>> rows(const Footprint& f) {
  std::vector<std::pair<std::uintptr_t, std::uintptr_t>> r;
  if (f.view == nullptr) {
    r.emplace_back(f.lo, f.hi);
    return r;
  }
  const TensorView& v = *f.view;
  const auto base = reinterpret_cast<std::uintptr_t>(v.data);
  const auto size = static_cast<std::uintptr_t>(dtype_size(v.dtype));
  r.reserve(static_cast<std::size_t>(v.batch * v.seq * v.heads));
  for (std::int64_t b = 0; b < v.batch; ++b)
    for (std::int64_t s = 0; s < v.seq; ++s)
      for (std::int64_t h = 0; h < v.heads; ++h) {
        const auto start = base + static_cast<std::uintptr_t>(v.offset(b, s, h)) * size;
        r.emplace_back(start, start + static_cast<std::uintptr_t>(v.dim) * size);
      }
  std::sort(r.begin(), r.end());
  return r;
}

bool sorted_rows_intersect(const std::vector<std::pair<std::uintptr_t, std::uintptr_t>>& a,
                           const std::vector<std::pair<std::uintptr_t, std::uintptr_t>>& b) {
  std::size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (a[i].second <= b[j].first)
      ++i;
    else if (b[j].second <= a[i].first)
      ++j;
    else
      return true;
  }
  return false;
}

// Outputs must not alias themselves (a stride of 0, or rows that overlap), each other, or any
// input. Byte spans are compared first; rows are compared exactly only when spans overlap, so
// interleaved layouts (one buffer holding dQ, dK, dV side by side) are accepted.
// True when a view's rows cannot overlap by construction: taking the dims of extent > 1 in
// increasing stride order, each stride steps past everything the smaller dims reach. Every
// packed or padded layout passes in O(1), so only unusual strides pay for the exact row-by-row
// check (which costs milliseconds at B*S*H = 2^18 rows, inside every timed call).
bool rows_disjoint_by_strides(const TensorView& v) {
  std::pair<std::int64_t, std::int64_t> dims[3] = {
      {v.batch_stride, v.batch}, {v.seq_stride, v.seq}, {v.head_stride, v.heads}};
  std::sort(std::begin(dims), std::end(dims));
  std::int64_t reach = v.dim;  // elements covered by the smaller dims, from a row's start
  for (const auto& [stride, extent] : dims) {
    if (extent <= 1) continue;
    if (stride < reach) return false;
    reach += stride * (extent - 1);
  }
  return true;
}

void require_no_overlap(const std::vector<Footprint>& outputs,
                        const std::vector<Footprint>& inputs) {
  for (const Footprint& out : outputs) {
    if (out.view != nullptr && !rows_disjoint_by_strides(*out.view)) {
      const auto r = rows(out);
      for (std::size_t i = 1; i < r.size(); ++i) {
        if (r[i].first < r[i - 1].second) {
          throw InvalidArgument(out.field, "output rows overlap each other (check its strides: " +
                                               std::to_string(out.view->batch_stride) + ", " +
                                               std::to_string(out.view->seq_stride) + ", " +
                                               std::to_string(out.view->head_stride) + ")");
        }
      }
    }
  }
  auto check_pair = [](const Footprint& a, const Footprint& b) {
    if (a.hi <= b.lo || b.hi <= a.lo) return;
    if (sorted_rows_intersect(rows(a), rows(b))) {
      throw InvalidArgument(a.field, "output memory overlaps " + b.field +
                                         "; outputs must not alias inputs or other outputs");
    }
  };
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    for (std::size_t j = i + 1; j < outputs.size(); ++j) check_pair(outputs[i], outputs[j]);
    for (const Footprint& in : inputs) check_pair(outputs[i], in);
  }
}

void require_tiles(const ExecutionOptions& options) {
  if (options.tile_q < 0 || options.tile_k < 0) {
    throw InvalidArgument("params.options.tile_q/tile_k",
                          "tile sizes must be >= 1 (or 0 for the backend's default), got " +
                              std::to_string(options.tile_q) + "," +
                              std::to_string(options.tile_k));
  }
  if (options.num_threads < 0) {
    throw InvalidArgument("params.options.num_threads",
                          "must be >= 0, got " + std::to_string(options.num_threads));
  }
}

}  // namespace

namespace {

// A block must lie inside the larger problem it is placed in.
void validate_placement(const Problem& p) {
  const Placement& at = p.placement;
  auto inside = [](std::int64_t offset, std::int64_t length, std::int64_t total,
                   const char* offset_field, const char* total_field, const char* length_name) {
    if (offset < 0) {
      throw InvalidArgument(offset_field, "must be >= 0, got " + std::to_string(offset));
    }
    if (total < offset + length) {
      throw InvalidArgument(total_field,
                            "must be >= the block's offset + " + std::string(length_name) + " = " +
                                std::to_string(offset) + " + " + std::to_string(length) + ", got " +
                                std::to_string(total));
    }
  };
  inside(at.q_offset, p.S_q, at.S_q_total, "problem.placement.q_offset",
         "problem.placement.S_q_total", "S_q");
  inside(at.k_offset, p.S_k, at.S_k_total, "problem.placement.k_offset",
         "problem.placement.S_k_total", "S_k");
}

}  // namespace

void validate(const Problem& p) {
  auto positive = [](std::int64_t v, const char* field) {
    if (v < 1) throw InvalidArgument(field, "must be >= 1, got " + std::to_string(v));
  };
  positive(p.B, "problem.B");
  positive(p.H, "problem.H");
  positive(p.H_kv, "problem.H_kv");
  positive(p.S_q, "problem.S_q");
  positive(p.S_k, "problem.S_k");
  if (p.H % p.H_kv != 0) {
    throw InvalidArgument("problem.H_kv", "H_kv = " + std::to_string(p.H_kv) +
                                              " must divide H = " + std::to_string(p.H));
  }
  if (p.d < 1 || p.d > 256) {
    throw InvalidArgument("problem.d", "head dim must be in 1..256, got " + std::to_string(p.d));
  }
  if (!std::isfinite(p.scale)) {
    std::ostringstream o;
    o << "softmax scale must be finite, got " << p.scale;
    throw InvalidArgument("problem.scale", o.str());
  }
  if (p.placement.placed()) validate_placement(p);
}

namespace {

// The problem, then Q, K, V: the checks every validation of params starts with.
template <class Params>
void require_problem_and_qkv(const Params& params) {
  const Problem& p = params.problem;
  validate(p);
  require_view(params.q, "params.q", p.dtype, p.B, p.S_q, p.H, p.d);
  require_view(params.k, "params.k", p.dtype, p.B, p.S_k, p.H_kv, p.d);
  require_view(params.v, "params.v", p.dtype, p.B, p.S_k, p.H_kv, p.d);
}

}  // namespace

void validate_inputs(const ForwardParams& params) {
  require_problem_and_qkv(params);
}

void validate_inputs(const BackwardParams& params) {
  require_problem_and_qkv(params);
  const Problem& p = params.problem;
  require_view(params.dO, "params.dO", p.dtype, p.B, p.S_q, p.H, p.d);
}

void validate(const ForwardParams& params) {
  require_problem_and_qkv(params);
  const Problem& p = params.problem;
  require_view(params.o, "params.o", p.dtype, p.B, p.S_q, p.H, p.d);
  if (params.lse == nullptr) throw InvalidArgument("params.lse", "data pointer is null");
  require_no_overlap(
      {footprint(params.o, "params.o"), footprint(params.lse, p.B * p.H * p.S_q, "params.lse")},
      {footprint(params.q, "params.q"), footprint(params.k, "params.k"),
       footprint(params.v, "params.v")});
  require_tiles(params.options);
}

void validate(const BackwardParams& params) {
  require_problem_and_qkv(params);
  const Problem& p = params.problem;
  require_view(params.o, "params.o", p.dtype, p.B, p.S_q, p.H, p.d);
  require_view(params.dO, "params.dO", p.dtype, p.B, p.S_q, p.H, p.d);
  if (params.lse == nullptr) throw InvalidArgument("params.lse", "data pointer is null");
  require_view(params.dq, "params.dq", p.grad_dtype, p.B, p.S_q, p.H, p.d);
  require_view(params.dk, "params.dk", p.grad_dtype, p.B, p.S_k, p.H_kv, p.d);
  require_view(params.dv, "params.dv", p.grad_dtype, p.B, p.S_k, p.H_kv, p.d);
  require_no_overlap(
      {footprint(params.dq, "params.dq"), footprint(params.dk, "params.dk"),
       footprint(params.dv, "params.dv")},
      {footprint(params.q, "params.q"), footprint(params.k, "params.k"),
       footprint(params.v, "params.v"), footprint(params.o, "params.o"),
       footprint(params.dO, "params.dO"), footprint(params.lse, p.B * p.H * p.S_q, "params.lse")});
  require_tiles(params.options);
}

}  // namespace flashref

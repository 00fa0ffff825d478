#include "flashref/merge.hpp"

#include <cmath>
#include <limits>
#include <string>

#include "flashref/error.hpp"

namespace flashref {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

void require_target(const MergeTarget& t) {
  if (t.O.data == nullptr) throw InvalidArgument("merge.O", "data pointer is null");
  if (t.O.dtype != DType::f32) {
    throw InvalidArgument("merge.O",
                          "the accumulator must be f32, got " + std::string(dtype_name(t.O.dtype)));
  }
  if (t.L == nullptr) throw InvalidArgument("merge.L", "data pointer is null");
}

std::string shape_of(const TensorView& v) {
  return "(" + std::to_string(v.batch) + ", " + std::to_string(v.seq) + ", " +
         std::to_string(v.heads) + ", " + std::to_string(v.dim) + ")";
}

void require_same_shape(const MergeTarget& t, const TensorView& v, const char* field) {
  if (v.data == nullptr) throw InvalidArgument(field, "data pointer is null");
  if (v.batch != t.O.batch || v.seq != t.O.seq || v.heads != t.O.heads || v.dim != t.O.dim) {
    throw InvalidArgument(
        field, "shape " + shape_of(v) + " differs from the accumulator's " + shape_of(t.O));
  }
}

// Index of row (b, s, h) in an L of shape (B, H, S).
std::int64_t lse_index(const TensorView& v, std::int64_t b, std::int64_t s, std::int64_t h) {
  return (b * v.heads + h) * v.seq + s;
}

}  // namespace

void clear_merge(const MergeTarget& target) {
  require_target(target);
  const TensorView& O = target.O;
  for (std::int64_t b = 0; b < O.batch; ++b) {
    for (std::int64_t s = 0; s < O.seq; ++s) {
      for (std::int64_t h = 0; h < O.heads; ++h) {
        float* row = static_cast<float*>(O.data) + O.offset(b, s, h);
        for (std::int64_t i = 0; i < O.dim; ++i) row[i] = 0.0f;
        target.L[lse_index(O, b, s, h)] = kNegInf;
      }
    }
  }
}

void merge_into(const MergeTarget& target, const TensorView& O_part, const float* L_part) {
  require_target(target);
  require_same_shape(target, O_part, "merge.O_part");
  if (L_part == nullptr) throw InvalidArgument("merge.L_part", "data pointer is null");
  const TensorView& O = target.O;
  for (std::int64_t b = 0; b < O.batch; ++b) {
    for (std::int64_t s = 0; s < O.seq; ++s) {
      for (std::int64_t h = 0; h < O.heads; ++h) {
        const std::int64_t li = lse_index(O, b, s, h);
        const float L_b = L_part[li];
        float* O_a = static_cast<float*>(O.data) + O.offset(b, s, h);
        // The block saw no key of this row: it contributes nothing.
        if (L_b == kNegInf) continue;
        const float L_a = target.L[li];
        if (L_a == kNegInf) {
          // Nothing merged yet: the block's result is the merge, exactly.
          for (std::int64_t i = 0; i < O.dim; ++i) O_a[i] = O_part.load(b, s, h, i);
          target.L[li] = L_b;
          continue;
        }
        // L_ab = logaddexp(L_a, L_b), shifted by the max so exp cannot overflow.
        const double a = L_a, bb = L_b;
        const double m = std::fmax(a, bb);
        const double L_ab = m + std::log(std::exp(a - m) + std::exp(bb - m));
        const double w_a = std::exp(a - L_ab);
        const double w_b = std::exp(bb - L_ab);
        for (std::int64_t i = 0; i < O.dim; ++i) {
          O_a[i] = static_cast<float>(w_a * O_a[i] + w_b * O_part.load(b, s, h, i));
        }
        target.L[li] = static_cast<float>(L_ab);
      }
    }
  }
}

void store_merged(const MergeTarget& target, const TensorView& out) {
  require_target(target);
  require_same_shape(target, out, "merge.out");
  const TensorView& O = target.O;
  for (std::int64_t b = 0; b < O.batch; ++b) {
    for (std::int64_t s = 0; s < O.seq; ++s) {
      for (std::int64_t h = 0; h < O.heads; ++h) {
        for (std::int64_t i = 0; i < O.dim; ++i) out.store(b, s, h, i, O.load(b, s, h, i));
      }
    }
  }
}

}  // namespace flashref

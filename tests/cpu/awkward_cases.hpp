// The deterministic awkward problems the cpu tests run against the gold: every shape below
// crossed with every mask and dtype.
#pragma once

#include <string>
#include <vector>

#include "cpu_test_support.hpp"

namespace flashref::cputest {

struct ShapeCase {
  const char* name;
  std::int64_t B, H, H_kv, S_q, S_k, d;
  int tile_q, tile_k;
  Layout layout;
  float stddev;  // of Q and K: large values stress the softmax
};

inline const std::vector<ShapeCase>& awkward_shapes() {
  static const std::vector<ShapeCase> shapes{
      {"S1", 3, 4, 2, 1, 1, 16, 4, 4, Layout::bshd, 1.0f},
      {"S_below_tile", 2, 1, 1, 5, 7, 8, 16, 16, Layout::bhsd, 1.0f},
      {"partial_tiles_Bq_ne_Bk", 1, 2, 2, 37, 53, 16, 16, 8, Layout::bshd, 1.0f},
      {"Sq_gt_Sk", 1, 2, 1, 70, 33, 32, 16, 16, Layout::bshd, 1.0f},
      {"Sq_lt_Sk", 2, 1, 1, 33, 70, 24, 8, 16, Layout::bhsd, 1.0f},
      {"d7_tiles_1x1", 1, 1, 1, 9, 6, 7, 1, 1, Layout::bshd, 1.0f},
      {"d33_odd_tiles", 1, 3, 3, 29, 31, 33, 5, 7, Layout::bhsd, 1.0f},
      {"gqa", 2, 6, 2, 24, 40, 16, 8, 16, Layout::bshd, 1.0f},
      {"mqa", 1, 4, 1, 21, 19, 64, 16, 8, Layout::bhsd, 1.0f},
      {"tiles_above_S", 1, 2, 2, 20, 12, 32, 128, 96, Layout::bshd, 1.0f},
      {"default_tiles", 1, 2, 1, 150, 130, 64, 0, 0, Layout::bshd, 1.0f},
      {"d256", 1, 1, 1, 17, 23, 256, 8, 16, Layout::bshd, 1.0f},
      {"large_scores", 1, 2, 2, 45, 45, 64, 16, 16, Layout::bshd, 6.0f},
  };
  return shapes;
}

inline const std::vector<Mask>& all_masks() {
  static const std::vector<Mask> masks{Mask::none, Mask::causal_top_left,
                                       Mask::causal_bottom_right};
  return masks;
}

inline const std::vector<DType>& all_dtypes() {
  static const std::vector<DType> dtypes{DType::f32, DType::f16, DType::bf16};
  return dtypes;
}

struct AwkwardCase {
  ShapeCase shape;
  Mask mask;
  DType dtype;

  Problem problem() const {
    return make_problem(shape.B, shape.H, shape.H_kv, shape.S_q, shape.S_k, shape.d, mask, dtype);
  }
  ExecutionOptions options() const { return tiles(shape.tile_q, shape.tile_k); }
  std::string name() const {
    std::string m(mask_name(mask));
    for (char& c : m) c = c == '-' ? '_' : c;
    return std::string(shape.name) + "_" + m + "_" + std::string(dtype_name(dtype));
  }
};

inline std::vector<AwkwardCase> awkward_cases() {
  std::vector<AwkwardCase> cases;
  for (const ShapeCase& s : awkward_shapes())
    for (Mask m : all_masks())
      for (DType t : all_dtypes()) cases.push_back({s, m, t});
  return cases;
}

}  // namespace flashref::cputest

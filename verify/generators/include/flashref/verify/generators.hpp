// RapidCheck generators for verification cases: the one definition shared by the property
// tests and `flashref fuzz`.
//
// Cases are biased to the shapes that break attention kernels: S = 1, S shorter than a tile,
// S a multiple of the tile plus or minus one, S_q != S_k both ways, B_q != B_k, d = 1, odd d,
// GQA and MQA, every mask (bottom-right causal with S_q > S_k gives fully masked rows), every
// dtype, large-magnitude inputs, both layouts, non-default scales. Sizes are bounded so one
// case takes milliseconds; everything shrinks toward small values.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include <rapidcheck.h>

#include "flashref/verify/verify_case.hpp"

namespace flashref::verify {

struct CaseBounds {
  std::int64_t max_seq = 160;   // S_q, S_k in 1..max_seq
  std::int64_t max_d = 130;     // d in 1..max_d
  std::int64_t d_multiple = 1;  // d a multiple of this (a backend with head-dim kernels: 8)
  int max_tile = 80;            // B_q, B_k in 1..max_tile, or 0 (backend default)
  // A kernel with fixed tiles (a Python function's B_q, B_k): when > 0 the tile is not drawn,
  // and the sequence lengths are biased to multiples of it plus or minus one.
  int tile_q = 0, tile_k = 0;
  // When not empty, d is drawn from these (a kernel with head-dim specializations) instead of
  // 1..max_d; shrinking goes toward the first.
  std::vector<std::int64_t> head_dims;
  bool gqa = true;             // false: H_kv = H (a kernel without grouped-query attention)
  bool other_scales = true;    // false: scale = 1/sqrt(d) always (a kernel with no scale argument)
  // Upper bound on B * H * S_q * S_k * d: the batch and heads shrink to fit, so a case with
  // long sequences still runs the double-precision gold in milliseconds.
  std::int64_t max_work = std::int64_t{1} << 23;
  std::vector<DType> dtypes{DType::f32, DType::f16, DType::bf16};
  std::vector<Mask> masks{Mask::none, Mask::causal_top_left, Mask::causal_bottom_right};
  bool backward = true;  // the cases' `backward` flag
};

rc::Gen<VerifyCase> gen_case(const CaseBounds& bounds = {});

// Short labels of a case's awkward features ("S_q=1", "S_q>S_k", "B_q!=B_k", "d odd", "GQA",
// "MQA", "large", "fully masked rows", ...): for RC_CLASSIFY and coverage tests.
std::vector<std::string> case_features(const VerifyCase& c);

// How RapidCheck prints a case (found by argument-dependent lookup): the description and the
// command that reproduces it.
void showValue(const VerifyCase& c, std::ostream& os);

}  // namespace flashref::verify

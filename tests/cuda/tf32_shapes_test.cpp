// The TF32 tensor-core path (float32 inputs with allow_tf32) against the gold, under the rule
// with a TF32 baseline (the verify runner gives the reference backend the same allow_tf32, so
// the baseline rounds every matmul operand to TF32): fixed awkward problems for every mask,
// random problems from verify/'s generator, and one long causal problem.
#include <gtest/gtest.h>
#include <rapidcheck.h>

#include <cstdlib>
#include <ostream>
#include <string>
#include <vector>

#include "cuda_test_support.hpp"
#include "flashref/verify/generators.hpp"

namespace flashref {
namespace {

// Unless RC_PARAMS is set (a replay, a quick device run), 120 cases.
const bool kDefaultCaseCount = [] {
  setenv("RC_PARAMS", "max_success=120", /*overwrite=*/0);
  return true;
}();

struct Shape {
  const char* name;
  std::int64_t B, H, H_kv, S_q, S_k, d;
  bool large = false;
  verify::Layout layout = verify::Layout::bshd;
  double scale = 0.0;  // 0: 1/sqrt(d)
  DType grad_dtype = DType::f32;
};

// Partial tiles of every TF32 kernel (B_q 64 / 16 rows per warp, B_k 32 / 64, dK/dV key
// tiles of 64 and query steps of 16-64), S = 1 both ways, S_q != S_k both ways (fully masked
// rows), GQA, MQA, the head dims that pad up to 32, 64 and 128 (float32 takes multiples of 4).
const std::vector<Shape>& shapes() {
  static const std::vector<Shape> s = {
      {"single_element", 1, 1, 1, 1, 1, 64},
      {"one_query_many_keys", 1, 2, 2, 1, 200, 64},
      {"many_queries_one_key", 1, 2, 2, 200, 1, 64},
      {"partial_tiles_129", 1, 2, 2, 129, 129, 64},
      {"sq_less_than_sk", 2, 2, 1, 77, 300, 64},
      {"sq_more_than_sk", 1, 2, 2, 300, 77, 64},
      {"gqa_6_over_2", 1, 6, 2, 150, 170, 64},
      {"mqa_4_over_1", 2, 4, 1, 97, 97, 32},
      {"d4", 1, 2, 2, 70, 90, 4},
      {"d12", 1, 2, 1, 33, 47, 12},
      {"d40", 1, 2, 1, 100, 65, 40},
      {"d72", 1, 2, 2, 65, 100, 72},
      {"d128", 1, 2, 2, 130, 140, 128},
      {"bhsd_layout", 2, 3, 3, 90, 110, 64, false, verify::Layout::bhsd},
      {"large_inputs", 1, 2, 2, 160, 160, 64, true},
      {"negative_scale", 1, 2, 2, 100, 120, 64, false, verify::Layout::bshd, -0.3},
      {"bf16_gradients", 1, 2, 2, 100, 100, 64, false, verify::Layout::bshd, 0.0, DType::bf16},
  };
  return s;
}

struct Param {
  Shape shape;
  Mask mask;
};

std::vector<Param> params() {
  std::vector<Param> out;
  for (const Shape& s : shapes())
    for (Mask m : {Mask::none, Mask::causal_top_left, Mask::causal_bottom_right})
      out.push_back({s, m});
  return out;
}

void PrintTo(const Param& p, std::ostream* os) {
  *os << p.shape.name << " tf32 " << mask_name(p.mask);
}

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  std::string mask(mask_name(info.param.mask));
  for (char& c : mask)
    if (c == '-') c = '_';
  return std::string(info.param.shape.name) + "_" + mask;
}

class Tf32AwkwardShapes : public ::testing::TestWithParam<Param> {};

TEST_P(Tf32AwkwardShapes, ForwardAndBackwardPassTheRuleWithATf32Baseline) {
  FLASHREF_REQUIRE_GPU();
  const Param& p = GetParam();
  const Shape& s = p.shape;
  verify::VerifyCase c;
  c.problem = make_problem(s.B, s.H, s.H_kv, s.S_q, s.S_k, s.d, p.mask, DType::f32);
  if (s.scale != 0.0) c.problem.scale = s.scale;
  c.problem.grad_dtype = s.grad_dtype;
  c.large = s.large;
  c.layout = s.layout;
  c.seed = 7;
  c.backward = true;
  c.allow_tf32 = true;
  EXPECT_TRUE(cuda_test::verified(c));
}

INSTANTIATE_TEST_SUITE_P(Cuda, Tf32AwkwardShapes, ::testing::ValuesIn(params()), param_name);

TEST(CudaTf32VsGold, RandomCasesPassTheRuleWithATf32Baseline) {
  FLASHREF_REQUIRE_GPU();
  (void)kDefaultCaseCount;
  verify::CaseBounds bounds;
  bounds.max_seq = 300;   // past every TF32 tile, so each kernel sees partial tiles
  bounds.max_d = 128;     // the TF32 kernels' largest head dim
  bounds.d_multiple = 4;  // float32 rows load in 16-byte vectors
  bounds.dtypes = {DType::f32};
  const bool ok = rc::check("cuda tf32: O, L, dQ, dK, dV pass the rule", [&] {
    verify::VerifyCase c = *verify::gen_case(bounds);
    c.allow_tf32 = true;
    const Problem& p = c.problem;
    RC_TAG(std::string(mask_name(p.mask)));
    RC_CLASSIFY(p.mask == Mask::causal_bottom_right && p.S_q > p.S_k, "fully masked rows");
    RC_CLASSIFY(p.H_kv < p.H, "GQA/MQA");
    RC_CLASSIFY(c.large, "large");
    const verify::VerifyReport report = verify::run_verification(c, {"cuda"});
    RC_ASSERT(report.backends.size() == 1u);
    if (!report.backends[0].available) RC_FAIL(report.backends[0].unavailable_reason);
    if (!report.passed()) RC_FAIL(verify::format_table(report));
  });
  EXPECT_TRUE(ok);
}

// Many key tiles per query tile (and query tiles per key tile), every causal tile class, the
// double-buffered loops run long: S = 2048, causal, two heads sharing one key/value head.
TEST(CudaTf32VsGold, LongCausalProblemPassesTheRule) {
  FLASHREF_REQUIRE_GPU();
  verify::VerifyCase c;
  c.problem = make_problem(1, 2, 1, 2048, 2048, 64, Mask::causal_top_left, DType::f32);
  c.seed = 3;
  c.backward = true;
  c.allow_tf32 = true;
  EXPECT_TRUE(cuda_test::verified(c));
}

}  // namespace
}  // namespace flashref

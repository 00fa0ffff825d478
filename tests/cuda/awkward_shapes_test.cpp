// The cuda backend against the gold, under the baseline-relative rule, on a fixed list of
// awkward problems: S = 1, partial tiles, S_q != S_k both ways (fully masked rows with
// bottom-right causal), GQA and MQA, head dims that pad up (8, 40, 72) and the largest (256),
// both layouts, large-magnitude inputs, a negative scale, gradients in another dtype. Every
// problem runs for every dtype and mask, forward and backward.
#include <gtest/gtest.h>

#include <cmath>
#include <ostream>
#include <string>
#include <vector>

#include "cuda_test_support.hpp"
#include "flashref/verify/check.hpp"
#include "flashref/verify/check_report.hpp"
#include "flashref/verify/runner.hpp"

namespace flashref {
namespace {

struct Shape {
  const char* name;
  std::int64_t B, H, H_kv, S_q, S_k, d;
  bool large = false;
  verify::Layout layout = verify::Layout::bshd;
  double scale = 0.0;  // 0: 1/sqrt(d)
  bool f32_grads = false;
};

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
      {"d8", 1, 2, 2, 70, 90, 8},
      {"d40", 1, 2, 1, 100, 65, 40},
      {"d72", 1, 2, 2, 65, 100, 72},
      {"d128", 1, 2, 2, 130, 140, 128},
      {"d256", 1, 2, 2, 130, 90, 256},
      {"bhsd_layout", 2, 3, 3, 90, 110, 64, false, verify::Layout::bhsd},
      {"large_inputs", 1, 2, 2, 160, 160, 64, true},
      {"negative_scale", 1, 2, 2, 100, 120, 64, false, verify::Layout::bshd, -0.3},
      {"f32_gradients", 1, 2, 2, 100, 100, 64, false, verify::Layout::bshd, 0.0, true},
  };
  return s;
}

struct Param {
  Shape shape;
  DType dtype;
  Mask mask;
};

std::vector<Param> params() {
  std::vector<Param> out;
  for (const Shape& s : shapes())
    for (DType t : {DType::bf16, DType::f16, DType::f32})
      for (Mask m : {Mask::none, Mask::causal_top_left, Mask::causal_bottom_right})
        out.push_back({s, t, m});
  return out;
}

// What gtest prints for a parameter (instead of its bytes).
void PrintTo(const Param& p, std::ostream* os) {
  *os << p.shape.name << " " << dtype_name(p.dtype) << " " << mask_name(p.mask);
}

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  std::string mask(mask_name(info.param.mask));
  for (char& c : mask)
    if (c == '-') c = '_';
  return std::string(info.param.shape.name) + "_" + std::string(dtype_name(info.param.dtype)) +
         "_" + mask;
}

class AwkwardShapes : public ::testing::TestWithParam<Param> {};

TEST_P(AwkwardShapes, ForwardAndBackwardPassTheRule) {
  FLASHREF_REQUIRE_GPU();
  const Param& p = GetParam();
  const Shape& s = p.shape;
  verify::VerifyCase c;
  c.problem = make_problem(s.B, s.H, s.H_kv, s.S_q, s.S_k, s.d, p.mask, p.dtype);
  if (s.scale != 0.0) c.problem.scale = s.scale;
  if (s.f32_grads) c.problem.grad_dtype = DType::f32;
  c.large = s.large;
  c.layout = s.layout;
  c.seed = 7;
  c.backward = true;
  EXPECT_TRUE(cuda_test::verified(c));
}

INSTANTIATE_TEST_SUITE_P(Cuda, AwkwardShapes, ::testing::ValuesIn(params()), param_name);

// Float32 inputs within 2^-12 of float32's largest value, in V, Q and K, whose scores still fit
// float32 and whose outputs are finite: the exact path must give them (on Hopper the 3xTF32
// forward, whose TF32 halves would otherwise round such a value to infinity; FMA kernels
// elsewhere). Forward only: the gradients of a score near 1e38 overflow float32 in the gold.
TEST(CudaFloat32Extremes, ValuesNearTheLargestFloatGiveFiniteOutputs_f32_forward) {
  FLASHREF_REQUIRE_GPU();
  constexpr float kNearMax = 3.4027e38f;  // above 0x7F7FF000, where TF32's rounding carries
  for (std::int64_t d : {64, 128}) {
    SCOPED_TRACE("d = " + std::to_string(d));
    const Problem problem = make_problem(1, 2, 2, 150, 170, d, Mask::causal_top_left, DType::f32);
    verify::ProblemData data = verify::make_problem_data(problem, {3, false, verify::Layout::bshd});
    data.v.set(0, 0, 20, 5, kNearMax);  // one value of V: a convex sum keeps O finite
    data.v.set(0, 1, 100, d - 1, -kNearMax);
    // One value of Q, with K's column of it divided by 8 so that the unscaled dot products
    // (3.4e38 x |K|, which every float32 kernel forms before the scale) stay inside float32:
    // the row's scores reach about 1e37.
    data.q.set(0, 1, 140, 3, kNearMax);
    for (std::int64_t j = 0; j < problem.S_k; ++j)
      data.k.set(0, 1, j, 3, data.k.get(0, 1, j, 3) / 8);
    // And one value of K, with Q's column of it divided by 16 (the 3xTF32 forward's K halves
    // are made by its producer warps, apart from Q's).
    data.k.set(0, 0, 50, 7, -kNearMax);
    for (std::int64_t i = 0; i < problem.S_q; ++i)
      data.q.set(0, 0, i, 7, data.q.get(0, 0, i, 7) / 16);
    const verify::RunOutputs out =
        verify::run_backend(*make_backend("cuda"), data, verify::RunOptions{});
    for (std::int64_t h = 0; h < 2; ++h)
      for (std::int64_t r = 0; r < problem.S_q; ++r)
        for (std::int64_t i = 0; i < d; ++i)
          ASSERT_TRUE(std::isfinite(out.o.get(0, h, r, i)))
              << "O[0," << h << "," << r << "," << i << "]";
    const verify::CheckResult r = verify::check_candidate(data, out.values, 64, 64);
    EXPECT_TRUE(r.passed()) << verify::format_check(problem, r);
  }
}

// 16-bit inputs whose row maxes reach |m'| = c max S of about 5e6 to 5e9 (c = scale log2(e)),
// each row's weight on one key: the sm90 forward folds the scale into the exponent, where the
// largest score's exponent is m''s rounding error, and past |m'| = 2^31 the row lost every key
// (L = -inf, O = 0; run 32g). Such rows are computed again unfolded after the main loop
// (kernels/sm90/fwd_rows_unfolded.cuh). S_q = 150 runs the short d = 64 kernel and d = 128's,
// which stores O by the TMA; S_q = 1,100 the d = 64 default, whose rows are computed again by
// a kernel of its own (its grid numbered over batch, head and row block: two of each here).
// Forward only, as above: the gradients of such scores are not what this checks.
TEST(CudaLargeScores, RowsPastTheFoldsRangeKeepTheirKeys_16bit_forward) {
  FLASHREF_REQUIRE_GPU();
  for (DType dtype : {DType::bf16, DType::f16})
    for (std::int64_t d : {64, 128})
      for (std::int64_t s_q : {150, 1100}) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + ", d = " + std::to_string(d) +
                     ", S_q = " + std::to_string(s_q));
        const Problem problem =
            make_problem(2, 2, 2, s_q, s_q + 20, d, Mask::causal_top_left, dtype);
        verify::ProblemData data =
            verify::make_problem_data(problem, {5, false, verify::Layout::bshd});
        // Row r of head h against key j <= r: eight columns of `big` in both, so S = 8 big^2 +
        // O(big), far above the row's other scores (at most about 3 big, from K's random
        // columns); f16's largest value bounds big at 6e4.
        const struct {
          std::int64_t b, h, r, j;
          float big;
        } rows[] = {{0, 0, 10, 3, 6e4f},
                    {1, 0, 77, 40, 2e4f},
                    {1, 1, 149, 149, 6e4f},
                    {0, 1, 120, 0, 2e3f},
                    {1, 1, s_q - 1, s_q / 2, 6e4f}};
        for (const auto& x : rows)
          for (std::int64_t i = 0; i < 8; ++i) {
            data.q.set(x.b, x.h, x.r, i, x.big);
            data.k.set(x.b, x.h, x.j, i, x.big);
          }
        const verify::RunOutputs out =
            verify::run_backend(*make_backend("cuda"), data, verify::RunOptions{});
        for (const auto& x : rows)
          EXPECT_TRUE(std::isfinite(out.lse(x.b, x.h, x.r)))
              << "L[" << x.b << "," << x.h << "," << x.r << "] = " << out.lse(x.b, x.h, x.r);
        const verify::CheckResult r = verify::check_candidate(data, out.values, 64, 64);
        EXPECT_TRUE(r.passed()) << verify::format_check(problem, r);
      }
}

// Rows whose attention is one key with a score near 0 (so L is near 0), while the first key
// tile the forward visits (the last: the walk runs from the last key tile down) holds a key
// 5 - 0.5 y below it, within the deferred rescale's 2^8 (d = 128's default,
// FwdTraitsLazyRescale): the kernel then adds L from a kept max near -5 and a log l near +5.
// The rule allows a lag of min(8 ln 2, m - min S) (docs/verification.md, "The conditional
// rescale", where the corpus kernel failed without it); every other score is -30. Exact in
// bf16 and f16. Forward only: L is what the deferral changes.
TEST(CudaPeakedRows, LNearZeroAfterADeferredRescalePassesTheRule_16bit_forward) {
  FLASHREF_REQUIRE_GPU();
  for (DType dtype : {DType::bf16, DType::f16})
    for (std::int64_t d : {64, 128})
      for (Mask mask : {Mask::none, Mask::causal_top_left}) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + ", d = " + std::to_string(d) + ", " +
                     std::string(mask_name(mask)));
        Problem problem = make_problem(1, 2, 1, 300, 300, d, mask, dtype);
        problem.scale = 0.25;
        verify::ProblemData data =
            verify::make_problem_data(problem, {9, false, verify::Layout::bshd});
        constexpr std::int64_t kDominant = 70, kFirstVisitedMax = 280;
        for (std::int64_t j = 0; j < problem.S_k; ++j) {
          for (std::int64_t c = 0; c < d; ++c) data.k.set(0, 0, j, c, 0.0f);
          data.k.set(0, 0, j, 0, j == kDominant ? 0.0f : j == kFirstVisitedMax ? -20.0f : -120.0f);
          data.k.set(0, 0, j, 1, j == kDominant ? 1.0f : j == kFirstVisitedMax ? -1.0f : 0.0f);
        }
        for (std::int64_t h = 0; h < problem.H; ++h)
          for (std::int64_t i = 0; i < problem.S_q; ++i) {
            for (std::int64_t c = 0; c < d; ++c) data.q.set(0, h, i, c, 0.0f);
            data.q.set(0, h, i, 0, 1.0f);
            data.q.set(0, h, i, 1, static_cast<float>((i * 37 + h * 11) % 64 - 32) / 32.0f);
          }
        const verify::RunOutputs out =
            verify::run_backend(*make_backend("cuda"), data, verify::RunOptions{});
        const verify::CheckResult r = verify::check_candidate(data, out.values, 64, 64);
        EXPECT_TRUE(r.passed()) << verify::format_check(problem, r);
      }
}

}  // namespace
}  // namespace flashref

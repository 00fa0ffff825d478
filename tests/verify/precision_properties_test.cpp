// The precision modes on random awkward problems (issue 9): a correct kernel written for a
// precision passes, with no finding, when judged in that precision: TF32 products with
// allow_tf32, 3xTF32 products with three_tf32, L stored in bf16 or f16 with lse_dtype; and
// `verify` with lse_dtype passes the
// cpu backend (its L rounded to that dtype, its backward run from it).
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "flashref/error.hpp"
#include "flashref/verify/check.hpp"
#include "flashref/verify/report.hpp"
#include "kernel_corpus_backward.hpp"
#include "property_support.hpp"

namespace flashref::verify {
namespace {

CaseBounds small_forward(std::vector<DType> dtypes) {
  CaseBounds b;
  b.max_seq = 90;
  b.max_d = 40;
  b.backward = false;
  b.dtypes = std::move(dtypes);
  return b;
}

std::string findings_text(const CheckResult& r) {
  std::string s;
  for (const TensorReport& t : r.tensors)
    s += std::string(tensor_name(t.tensor)) + " ratio " + std::to_string(t.rule.ratio) + "\n";
  for (const diagnosis::Finding& f : r.diagnosis.findings) s += diagnosis::to_json(f).dump() + "\n";
  return s;
}

RC_GTEST_PROP(PrecisionModes, CorrectTf32KernelPassesUnderAllowTf32, ()) {
  const VerifyCase c = *gen_case(small_forward({DType::f32}));
  testing::classify(c);
  const ProblemData data = make_problem_data(c.problem, input_options(c));
  corpus::Kernel k;
  k.tf32 = true;
  k.tile_k = *rc::gen::element<std::int64_t>(16, 32, 64);
  const CheckResult r =
      check_candidate(data, corpus::run_kernel(data, k), 64, 64, {.allow_tf32 = true});
  if (!r.passed() || !r.diagnosis.findings.empty()) RC_FAIL(describe(c) + "\n" + findings_text(r));
}

// The forward and backward of a correct float32 kernel whose products are made as `products`
// says (the scale folded into dS or applied after the loops) on a random problem of `bounds`:
// O, L, dQ, dK and dV judged under `precision` pass with no finding.
enum class Products : std::uint8_t { tf32, three_tf32, three_tf32_big_truncated };
void correct_f32_kernel_passes(Products products, const Precision& precision,
                               const CaseBounds& bounds) {
  const VerifyCase c = *gen_case(bounds);
  testing::classify(c);
  const ProblemData data = make_problem_data(c.problem, input_options(c));
  corpus::Kernel k;
  k.tf32 = products == Products::tf32;
  k.three_tf32 = products != Products::tf32;
  k.three_tf32_big_truncated = products == Products::three_tf32_big_truncated;
  k.tile_k = *rc::gen::element<std::int64_t>(16, 32, 64);
  corpus::BackwardKernel bk;
  bk.tf32 = k.tf32;
  bk.three_tf32 = k.three_tf32;
  bk.three_tf32_big_truncated = k.three_tf32_big_truncated;
  bk.tile_k = k.tile_k;
  bk.scale_in_ds = *rc::gen::arbitrary<bool>();
  TensorSet t = corpus::run_kernel(data, k);
  for (auto& [id, values] : corpus::run_backward(data, t, bk)) t[id] = std::move(values);
  const CheckResult r = check_candidate(data, t, 64, 64, precision);
  if (!r.passed() || !r.diagnosis.findings.empty())
    RC_FAIL(describe(c) + (bk.scale_in_ds ? " scale in dS" : " scale after") + "\n" +
            findings_text(r));
}

// Float32 problems of d up to 32, forward and backward.
CaseBounds small_f32_backward() {
  CaseBounds b = small_forward({DType::f32});
  b.max_seq = 64;
  b.max_d = 32;
  b.backward = true;
  return b;
}

// The backward too: a correct TF32 kernel, judged under allow_tf32.
RC_GTEST_PROP(PrecisionModes, CorrectTf32BackwardPassesUnderAllowTf32, ()) {
  correct_f32_kernel_passes(Products::tf32, {.allow_tf32 = true}, small_f32_backward());
}

// A kernel whose float32 products are 3xTF32 (each operand split into two TF32 values, the
// small x small term dropped), with either split in use (big rounded to nearest, as flashref's
// kernels and Triton's tf32x3 make it; big truncated, as CUTLASS's FastF32 and so PyTorch's
// memory-efficient kernel do), passes under --three-tf32 with no finding, forward and backward,
// at every d: one product can be the whole score (d = 1) and still sit inside the floor
// (docs/verification.md, "3xTF32 products").
RC_GTEST_PROP(PrecisionModes, Correct3xTf32KernelPassesUnderThreeTf32, ()) {
  const Products split =
      *rc::gen::element(Products::three_tf32, Products::three_tf32_big_truncated);
  correct_f32_kernel_passes(split, {.three_tf32 = true}, small_f32_backward());
}

// With big rounded to nearest (flashref's sm90 kernels leave small for the tensor core to
// truncate, the corpus rounds it: one bit is dropped either way, and the two err alike,
// dev/f32/product_error.py), 3xTF32 also passes
// the exact float32 rule where a score sums enough products for their errors to stay inside
// float32's noise floor: d >= 24 (docs/verification.md, "3xTF32 products"). Below it a 3xTF32
// kernel is judged with --three-tf32: a CI run falsified this property when its domain began at
// d = 1 (dev/f32/README.md), and a 10000-case sweep at d = 10 came to 0.97 of the limit.
RC_GTEST_PROP(PrecisionModes, Correct3xTf32KernelPassesTheExactRuleFromD24, ()) {
  CaseBounds b = small_f32_backward();
  for (std::int64_t d = 24; d <= 32; ++d) b.head_dims.push_back(d);
  correct_f32_kernel_passes(Products::three_tf32, {}, b);
}

// The corner the exact rule does not give 3xTF32: CI's counterexample (d = 1, large inputs,
// every score one product). The exact rule fails O, by no more than 3xTF32's own error
// explains, with a note that it passes as 3xTF32 (and no finding that would stop the
// diagnosis), and --three-tf32 passes it with no finding and no note.
TEST(PrecisionModes, TheExactRulesCounterexampleFor3xTf32PassesUnderThreeTf32) {
  VerifyCase c;
  c.problem.H = 4;
  c.problem.H_kv = 2;
  c.problem.S_q = c.problem.S_k = 38;
  c.problem.d = 1;
  c.problem.scale = 1.0;
  c.problem.mask = Mask::causal_top_left;
  c.problem.dtype = DType::f32;
  c.seed = 39947;
  c.layout = Layout::bhsd;
  c.large = true;
  const ProblemData data = make_problem_data(c.problem, input_options(c));
  corpus::Kernel k;
  k.three_tf32 = true;
  const TensorSet t = corpus::run_kernel(data, k);
  const CheckResult exact = check_candidate(data, t, 13, 1, {});
  ASSERT_EQ(exact.tensors.size(), 2u);
  EXPECT_EQ(exact.tensors[0].tensor, TensorId::O);
  // 1.034 where CI found it; another libm's exp moves it a little, not out of this band.
  EXPECT_GT(exact.tensors[0].rule.ratio, 0.9);
  EXPECT_LT(exact.tensors[0].rule.ratio, 1.1);
  if (!exact.passed()) {
    ASSERT_EQ(exact.precision_notes.size(), 1u);
    EXPECT_NE(exact.precision_notes[0].find("--three-tf32"), std::string::npos);
  }
  const CheckResult three = check_candidate(data, t, 13, 1, {.three_tf32 = true});
  EXPECT_TRUE(three.passed()) << findings_text(three);
  EXPECT_TRUE(three.diagnosis.findings.empty()) << findings_text(three);
  EXPECT_TRUE(three.precision_notes.empty());
  EXPECT_LT(three.tensors[0].rule.ratio, 0.5);
}

// --three-tf32 and --allow-tf32 name two precisions of the same products: asking for both is an
// error that names the option.
TEST(PrecisionModes, ThreeTf32AndAllowTf32TogetherAreRefused) {
  Problem p;
  p.S_q = p.S_k = 4;
  p.d = 8;
  const ProblemData data = make_problem_data(p, {});
  const TensorSet t = corpus::run_kernel(data, {});
  try {
    check_candidate(data, t, 64, 64, {.allow_tf32 = true, .three_tf32 = true});
    FAIL() << "no exception";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.field(), "--three-tf32");
  }
}

RC_GTEST_PROP(PrecisionModes, CorrectLowPrecisionLsePassesUnderLseDtype, ()) {
  const VerifyCase c = *gen_case(small_forward({DType::f32, DType::bf16, DType::f16}));
  testing::classify(c);
  const ProblemData data = make_problem_data(c.problem, input_options(c));
  corpus::Kernel k;
  k.lse_dtype = *rc::gen::element(DType::bf16, DType::f16);
  const CheckResult r =
      check_candidate(data, corpus::run_kernel(data, k), 64, 64, {.lse_dtype = k.lse_dtype});
  if (!r.passed() || !r.diagnosis.findings.empty())
    RC_FAIL(describe(c) + " L in " + std::string(dtype_name(k.lse_dtype)) + "\n" +
            findings_text(r));
}

RC_GTEST_PROP(PrecisionModes, CpuPassesVerifyWithLseDtype, ()) {
  CaseBounds b;
  b.max_seq = 64;
  b.max_d = 40;
  VerifyCase c = *gen_case(b);
  c.lse_dtype = *rc::gen::element(DType::bf16, DType::f16);
  testing::classify(c);
  const VerifyReport report = run_verification(c, {"cpu"});
  if (!report.passed()) RC_FAIL(format_table(report));
}

}  // namespace
}  // namespace flashref::verify

// The precision modes on random awkward problems (issue 9): a correct kernel written for a
// precision passes, with no finding, when judged in that precision: TF32 products with
// allow_tf32, L stored in bf16 or f16 with lse_dtype; and `verify` with lse_dtype passes the
// cpu backend (its L rounded to that dtype, its backward run from it).
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

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
// says (the scale folded into dS or applied after the loops) on a random problem: O, L, dQ,
// dK and dV judged under `precision` pass with no finding.
enum class Products : std::uint8_t { tf32, three_tf32 };
void correct_f32_kernel_passes(Products products, const Precision& precision) {
  CaseBounds b = small_forward({DType::f32});
  b.max_seq = 64;
  b.max_d = 32;
  const VerifyCase c = *gen_case(b);
  testing::classify(c);
  const ProblemData data = make_problem_data(c.problem, input_options(c));
  corpus::Kernel k;
  k.tf32 = products == Products::tf32;
  k.three_tf32 = products == Products::three_tf32;
  k.tile_k = *rc::gen::element<std::int64_t>(16, 32, 64);
  corpus::BackwardKernel bk;
  bk.tf32 = k.tf32;
  bk.three_tf32 = k.three_tf32;
  bk.tile_k = k.tile_k;
  bk.scale_in_ds = *rc::gen::arbitrary<bool>();
  TensorSet t = corpus::run_kernel(data, k);
  for (auto& [id, values] : corpus::run_backward(data, t, bk)) t[id] = std::move(values);
  const CheckResult r = check_candidate(data, t, 64, 64, precision);
  if (!r.passed() || !r.diagnosis.findings.empty())
    RC_FAIL(describe(c) + (bk.scale_in_ds ? " scale in dS" : " scale after") + "\n" +
            findings_text(r));
}

// The backward too: a correct TF32 kernel, judged under allow_tf32.
RC_GTEST_PROP(PrecisionModes, CorrectTf32BackwardPassesUnderAllowTf32, ()) {
  correct_f32_kernel_passes(Products::tf32, {.allow_tf32 = true});
}

// A float32 kernel whose products are 3xTF32 (each operand split into two TF32 values, the
// small x small term dropped: the exact path of PyTorch's memory-efficient kernel) passes the
// exact float32 rule with no finding, forward and backward, where plain TF32 fails it
// (kernel_corpus_test.cpp): the rule holds such a kernel to float32 and accepts it, so a
// tensor-core float32 path of ours may run that way (dev/f32/README.md).
RC_GTEST_PROP(PrecisionModes, Correct3xTf32KernelPassesTheExactRule, ()) {
  correct_f32_kernel_passes(Products::three_tf32, {});
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

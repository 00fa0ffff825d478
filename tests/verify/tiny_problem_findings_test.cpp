// Findings on the smallest problems, where the fuzz's shrinking ends. Found on the GPU by a
// Triton TF32 kernel shrunk to B=1 H=1 H_kv=1 S_q=1 S_k=1 d=64, causal, scale 0.125
// (python/tests/test_cuda.py): one query and one key, so P = 1, O = tf32(V) and L = the
// TF32-rounded score. tf32_matmul must name it, whether the kernel rounds its operands to
// TF32 or truncates them (tensor cores fed float32 as is: Triton's default), and
// softmax_epsilon, whose evidence is one offset shared by many rows while O is right, must not.
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "flashref/verify/check.hpp"
#include "flashref/verify/gold.hpp"
#include "kernel_corpus.hpp"

namespace {

using namespace flashref;
using namespace flashref::verify;
using corpus::Kernel;

std::set<std::string> codes(const std::vector<diagnosis::Finding>& findings) {
  std::set<std::string> s;
  for (const diagnosis::Finding& f : findings) s.insert(f.code);
  return s;
}

std::string report(const CheckResult& r) {
  std::string s;
  for (const TensorReport& t : r.tensors)
    s += std::string(tensor_name(t.tensor)) + " ratio " + std::to_string(t.rule.ratio) + "\n";
  for (const diagnosis::Finding& f : r.diagnosis.findings) s += diagnosis::to_json(f).dump() + "\n";
  for (const diagnosis::Lead& l : r.diagnosis.lead) s += "lead: " + l.summary + "\n";
  return s;
}

// The shrunk problem of the GPU run.
Problem one_query_one_key() {
  return make_problem(1, 1, 1, 1, 1, 64, Mask::causal_top_left, DType::f32);
}

Kernel tf32_kernel(bool truncates) {
  Kernel k;
  k.tf32 = true;
  k.tf32_truncates = truncates;
  return k;
}

constexpr std::uint64_t kSeeds = 8;

TEST(TinyProblemFindings, Tf32KernelOnOneKeyIsNamedTf32Matmul) {
  for (bool truncates : {false, true})
    for (std::uint64_t seed = 1; seed <= kSeeds; ++seed) {
      const ProblemData data = make_problem_data(one_query_one_key(), {seed, false, Layout::bshd});
      const CheckResult r =
          check_candidate(data, corpus::run_kernel(data, tf32_kernel(truncates)), 64, 64, {});
      const std::string where =
          (truncates ? "truncating, seed " : "rounding, seed ") + std::to_string(seed);
      ASSERT_FALSE(r.passed()) << where << "\n" << report(r);
      ASSERT_EQ(codes(r.diagnosis.findings), std::set<std::string>{"tf32_matmul"})
          << where << "\n" << report(r);
      const diagnosis::Finding& f = r.diagnosis.findings.front();
      EXPECT_EQ(f.tensors, (std::vector<TensorId>{TensorId::O, TensorId::L})) << where;
      EXPECT_EQ(f.detail.at("tf32_conversion"), truncates ? "truncate" : "round_to_nearest");
      EXPECT_TRUE(r.diagnosis.lead.empty()) << where << "\n" << report(r);
    }
}

// Under --allow-tf32 a kernel that truncates its operands passes: it is judged against TF32
// attention with truncated operands when it fails against rounded ones (docs/verification.md).
// On one key its O is off by up to a whole TF32 step, twice the rounded baseline's.
TEST(TinyProblemFindings, Tf32KernelPassesUnderAllowTf32EitherConversion) {
  for (bool truncates : {false, true})
    for (std::uint64_t seed = 1; seed <= kSeeds; ++seed) {
      const ProblemData data = make_problem_data(one_query_one_key(), {seed, false, Layout::bshd});
      const CheckResult r = check_candidate(data, corpus::run_kernel(data, tf32_kernel(truncates)),
                                            64, 64, {.allow_tf32 = true});
      EXPECT_TRUE(r.passed()) << (truncates ? "truncating, seed " : "rounding, seed ") << seed
                              << "\n"
                              << report(r);
      EXPECT_TRUE(r.diagnosis.findings.empty()) << report(r);
    }
}

// The same on a problem of many keys, where P is rounded too; and a real mistake in a
// truncating kernel still fails under --allow-tf32.
TEST(TinyProblemFindings, TruncatingTf32KernelOnManyKeys) {
  const Problem p = make_problem(1, 2, 1, 100, 100, 16, Mask::causal_top_left, DType::f32);
  const ProblemData data = make_problem_data(p, {7, false, Layout::bshd});
  const TensorSet candidate = corpus::run_kernel(data, tf32_kernel(true));
  const CheckResult exact = check_candidate(data, candidate, 64, 64, {});
  EXPECT_FALSE(exact.passed());
  EXPECT_EQ(codes(exact.diagnosis.findings), std::set<std::string>{"tf32_matmul"}) << report(exact);
  const CheckResult allowed = check_candidate(data, candidate, 64, 64, {.allow_tf32 = true});
  EXPECT_TRUE(allowed.passed()) << report(allowed);

  // Padded keys show where every key is visible: no mask.
  const ProblemData unmasked = make_problem_data(
      make_problem(1, 2, 1, 100, 100, 16, Mask::none, DType::f32), {7, false, Layout::bshd});
  Kernel padded = tf32_kernel(true);
  padded.pad_keys_unmasked = true;
  const CheckResult bug = check_candidate(unmasked, corpus::run_kernel(unmasked, padded), 64, 64,
                                          {.allow_tf32 = true});
  EXPECT_FALSE(bug.passed()) << report(bug);
}

// The same candidate through the diagnosis alone (as if tf32_matmul had not been tried): O
// fails, so a constant added to the scores (which leaves O exactly right) is no explanation,
// and one row is no evidence of an offset shared by every row.
TEST(TinyProblemFindings, Tf32KernelOnOneKeyIsNoSoftmaxEpsilon) {
  for (bool truncates : {false, true})
    for (std::uint64_t seed = 1; seed <= kSeeds; ++seed) {
      const ProblemData data = make_problem_data(one_query_one_key(), {seed, false, Layout::bshd});
      const TensorSet candidate = corpus::run_kernel(data, tf32_kernel(truncates));
      const CheckResult r = check_candidate(data, candidate, 64, 64, {});
      const std::string where =
          (truncates ? "truncating, seed " : "rounding, seed ") + std::to_string(seed);
      ASSERT_FALSE(r.passed()) << where;
      const diagnosis::Diagnosis d =
          diagnosis::diagnose(data, candidate, r.tensors, compute_gold(data, false), {});
      EXPECT_EQ(codes(d.findings).count("softmax_epsilon"), 0u) << where << "\n"
                                                               << diagnosis::to_json(d).dump();
    }
}

// A real epsilon added to the scores: one row is too few to tell it from any other error of
// L, several rows with O right are the evidence.
TEST(TinyProblemFindings, ScoreEpsilonNeedsSeveralRows) {
  Kernel k;
  k.score_eps = 1e-3f;
  const ProblemData one = make_problem_data(one_query_one_key(), {1, false, Layout::bshd});
  const CheckResult r1 = check_candidate(one, corpus::run_kernel(one, k), 64, 64, {});
  EXPECT_FALSE(r1.passed()) << report(r1);
  EXPECT_EQ(codes(r1.diagnosis.findings).count("softmax_epsilon"), 0u) << report(r1);

  const ProblemData eight = make_problem_data(
      make_problem(1, 1, 1, 8, 8, 64, Mask::causal_top_left, DType::f32), {1, false, Layout::bshd});
  const CheckResult r8 = check_candidate(eight, corpus::run_kernel(eight, k), 64, 64, {});
  EXPECT_FALSE(r8.passed()) << report(r8);
  ASSERT_EQ(codes(r8.diagnosis.findings), std::set<std::string>{"softmax_epsilon"}) << report(r8);
  const diagnosis::Finding& f = r8.diagnosis.findings.front();
  EXPECT_EQ(f.detail.at("added_to"), "scores");
  EXPECT_EQ(f.detail.at("rows"), 8);
  EXPECT_NE(f.explanation.find("(8 rows)"), std::string::npos) << f.explanation;
}

}  // namespace

// The corpus of real mistakes (issue 9): each mistake the course's students made, reproduced
// by the kernel of kernel_corpus.hpp on awkward shapes (S = 100, S_q != S_k, every mask where
// it shows), must get its code from check_candidate, and nothing else; a correct kernel in each
// precision mode (TF32 products with allow_tf32, L in bf16 or f16 with lse_dtype) must pass
// with no finding.
#include <algorithm>
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "flashref/verify/check.hpp"
#include "flashref/verify/sum_magnitude.hpp"
#include "kernel_corpus.hpp"

namespace {

using namespace flashref;
using namespace flashref::verify;
using corpus::Kernel;
using corpus::MaskedRows;

struct Case {
  std::string name;
  Problem problem;
};

// Awkward shapes: GQA, S not a multiple of any tile, S_q != S_k both ways.
std::vector<Case> shapes(Mask mask, DType dtype = DType::f32) {
  return {{"S100", make_problem(1, 2, 1, 100, 100, 16, mask, dtype)},
          {"Sq130_Sk100", make_problem(1, 2, 1, 130, 100, 16, mask, dtype)},
          {"Sq70_Sk100", make_problem(1, 2, 1, 70, 100, 24, mask, dtype)}};
}

constexpr Mask kMasks[] = {Mask::none, Mask::causal_top_left, Mask::causal_bottom_right};

CheckResult check(const ProblemData& data, const Kernel& k, const Precision& precision = {}) {
  return check_candidate(data, corpus::run_kernel(data, k), 64, 64, precision);
}

CheckResult check(const Problem& p, const Kernel& k, const Precision& precision = {}) {
  return check(make_problem_data(p, {7, false, Layout::bshd}), k, precision);
}

std::set<std::string> codes(const CheckResult& r) {
  std::set<std::string> s;
  for (const diagnosis::Finding& f : r.diagnosis.findings) s.insert(f.code);
  return s;
}

const diagnosis::Finding& finding(const CheckResult& r, const std::string& code) {
  for (const diagnosis::Finding& f : r.diagnosis.findings) {
    if (f.code == code) return f;
  }
  throw std::runtime_error("no finding " + code);
}

std::string report(const CheckResult& r) {
  std::string s;
  for (const TensorReport& t : r.tensors)
    s += std::string(tensor_name(t.tensor)) + " ratio " + std::to_string(t.rule.ratio) + "\n";
  for (const diagnosis::Finding& f : r.diagnosis.findings) s += diagnosis::to_json(f).dump() + "\n";
  for (const diagnosis::Lead& l : r.diagnosis.lead) s += "lead: " + l.summary + "\n";
  return s;
}

// Fails unless the check failed and named exactly `code`.
void expect_only(const CheckResult& r, const std::string& code, const std::string& where) {
  EXPECT_FALSE(r.passed()) << where << "\n" << report(r);
  EXPECT_EQ(codes(r), std::set<std::string>{code}) << where << "\n" << report(r);
}

void expect_clean_pass(const CheckResult& r, const std::string& where) {
  EXPECT_TRUE(r.passed()) << where << "\n" << report(r);
  EXPECT_TRUE(r.diagnosis.findings.empty()) << where << "\n" << report(r);
}

TEST(KernelCorpus, CorrectFloat32KernelPasses) {
  for (Mask mask : kMasks)
    for (const Case& c : shapes(mask)) expect_clean_pass(check(c.problem, {}), c.name);
}

TEST(KernelCorpus, Tf32KernelIsNamedAndPassesWithAllowTf32) {
  Kernel tf32;
  tf32.tf32 = true;
  for (Mask mask : kMasks)
    for (const Case& c : shapes(mask)) {
      const std::string where = c.name + " " + std::string(mask_name(mask));
      const CheckResult exact = check(c.problem, tf32);
      expect_only(exact, "tf32_matmul", where);
      if (!exact.passed()) {
        const diagnosis::Finding& f = finding(exact, "tf32_matmul");
        EXPECT_NE(f.explanation.find("--allow-tf32"), std::string::npos);
        EXPECT_NE(f.explanation.find("x the TF32 baseline's error"), std::string::npos);
        EXPECT_TRUE(f.detail.at("fit").contains("O")) << f.detail.dump();
      }
      expect_clean_pass(check(c.problem, tf32, {.allow_tf32 = true}), where + " --allow-tf32");
    }
}

TEST(KernelCorpus, LowPrecisionLseIsNamedAndPassesWithLseDtype) {
  for (DType dt : {DType::bf16, DType::f16}) {
    Kernel k;
    k.lse_dtype = dt;
    for (const Case& c : shapes(Mask::causal_top_left, dt)) {
      const std::string where = c.name + " L in " + std::string(dtype_name(dt));
      const CheckResult r = check(c.problem, k);
      expect_only(r, "lse_low_precision", where);
      if (!r.diagnosis.findings.empty()) {
        EXPECT_EQ(finding(r, "lse_low_precision").detail.at("lse_dtype_fits"),
                  std::string(dtype_name(dt)));
        EXPECT_NE(finding(r, "lse_low_precision").explanation.find("float32"), std::string::npos);
      }
      expect_clean_pass(check(c.problem, k, {.lse_dtype = dt}), where + " --lse-dtype");
    }
  }
}

TEST(KernelCorpus, Float32InputsWithBf16LseAndTf32GetBothFindings) {
  Kernel k;
  k.tf32 = true;
  k.lse_dtype = DType::bf16;
  const Problem p = make_problem(1, 2, 1, 100, 100, 16, Mask::none, DType::f32);
  const CheckResult r = check(p, k);
  EXPECT_FALSE(r.passed());
  EXPECT_EQ(codes(r), (std::set<std::string>{"lse_low_precision", "tf32_matmul"})) << report(r);
  expect_clean_pass(check(p, k, {.allow_tf32 = true, .lse_dtype = DType::bf16}), "both modes");
}

TEST(KernelCorpus, PaddedKeysUnmaskedIsNamedWithTheTileSize) {
  Kernel k;
  k.pad_keys_unmasked = true;
  for (std::int64_t tile_k : {16, 32, 64}) {
    k.tile_k = tile_k;
    // No mask: every query sees the padded keys. S_k = 100.
    for (const Case& c : shapes(Mask::none)) {
      const std::string where = c.name + " none B_k " + std::to_string(tile_k);
      const CheckResult r = check(c.problem, k);
      expect_only(r, "key_padding_unmasked", where);
      if (!r.diagnosis.findings.empty()) {
        // 32 and 64 pad 100 keys to 128 alike: the smaller tile size is reported.
        EXPECT_EQ(finding(r, "key_padding_unmasked").detail.at("tile_k_fits").get<int>(),
                  tile_k == 64 ? 32 : tile_k)
            << where;
      }
    }
    // Top-left causal: only queries q >= S_k see them, so only S_q > S_k shows it.
    const Problem shows = make_problem(1, 2, 1, 130, 100, 16, Mask::causal_top_left, DType::f32);
    expect_only(check(shows, k), "key_padding_unmasked", "top-left S_q > S_k");
    const Problem hidden = make_problem(1, 2, 1, 70, 100, 16, Mask::causal_top_left, DType::f32);
    expect_clean_pass(check(hidden, k), "top-left S_q < S_k: the padded keys are masked");
    // Bottom-right causal never shows it.
    for (const Case& c : shapes(Mask::causal_bottom_right))
      expect_clean_pass(check(c.problem, k), c.name + " bottom-right");
  }
}

TEST(KernelCorpus, PaddedKeysInATf32KernelAreNamedUnderAllowTf32) {
  Kernel k;
  k.tf32 = true;
  k.pad_keys_unmasked = true;
  const Problem p = make_problem(1, 2, 1, 100, 100, 16, Mask::none, DType::f32);
  expect_only(check(p, k, {.allow_tf32 = true}), "key_padding_unmasked", "TF32 + padding");
  // Without the flag it is not a TF32 kernel that passes: tf32_matmul must not be claimed.
  const CheckResult exact = check(p, k);
  EXPECT_FALSE(exact.passed());
  EXPECT_EQ(codes(exact).count("tf32_matmul"), 0u) << report(exact);
}

TEST(KernelCorpus, MaskedRowsNotZeroSaysWhatIsThere) {
  // Bottom-right causal with S_q > S_k: the first S_q - S_k rows see no key.
  const Problem p = make_problem(1, 2, 1, 130, 100, 16, Mask::causal_bottom_right, DType::f32);
  Kernel mean;
  mean.masked_rows = MaskedRows::mean_of_v;
  const CheckResult r = check(p, mean);
  expect_only(r, "masked_rows_not_zero", "mean of V");
  if (!r.diagnosis.findings.empty()) {
    const diagnosis::Finding& f = finding(r, "masked_rows_not_zero");
    EXPECT_NE(f.explanation.find("mean of V"), std::string::npos) << f.explanation;
    EXPECT_EQ(f.detail.at("o_rows").get<int>(), 2 * 30);
    EXPECT_EQ(f.detail.at("o_rows_mean_of_v").get<int>(), 2 * 30);
    EXPECT_EQ(f.detail.at("l_rows_finite").get<int>(), 2 * 30);
  }
  Kernel junk;
  junk.masked_rows = MaskedRows::junk;
  const CheckResult j = check(p, junk);
  expect_only(j, "masked_rows_not_zero", "junk");
  if (!j.diagnosis.findings.empty()) {
    EXPECT_NE(finding(j, "masked_rows_not_zero").explanation.find("junk"), std::string::npos);
    EXPECT_EQ(finding(j, "masked_rows_not_zero").detail.at("o_rows_mean_of_v").get<int>(), 0);
  }
}

TEST(KernelCorpus, TailGarbageAndUnwrittenTailsAreTold) {
  Kernel garbage;
  garbage.tail_garbage_tile = 64;
  Kernel unwritten = garbage;
  unwritten.tail_unwritten_tile = true;
  for (Mask mask : kMasks) {
    const Problem p = make_problem(1, 2, 1, 100, 100, 16, mask, DType::f32);
    const std::string where(mask_name(mask));
    const CheckResult g = check(p, garbage);
    expect_only(g, "tail_garbage", where);
    if (!g.diagnosis.findings.empty()) {
      EXPECT_EQ(finding(g, "tail_garbage").detail.at("rows_begin").get<int>(), 64);
    }
    expect_only(check(p, unwritten), "tail_rows", where);
  }
}

// Sums truncated toward zero, as a tensor core's float32 accumulator leaves them when a kernel
// adds every mma step of a long reduction into it (the 3xTF32 kernels' first version, run 25a):
// errors of float32's size that all shrink O, named rounded_toward_zero. Shapes long enough for
// the truncations to add up past the exact rule.
TEST(KernelCorpus, TruncatedSumsAreNamed) {
  for (Mask mask : kMasks)
    for (const Problem& p : {make_problem(1, 2, 1, 200, 300, 32, mask, DType::f32),
                             make_problem(1, 2, 2, 257, 130, 40, mask, DType::f32)}) {
      const std::string where = std::string(mask_name(mask)) + " S_q " + std::to_string(p.S_q);
      expect_clean_pass(check(p, {}), where + " correct kernel");
      Kernel k;
      k.truncated_sums = true;
      const CheckResult r = check(p, k);
      expect_only(r, "rounded_toward_zero", where);
      if (codes(r).count("rounded_toward_zero") != 0) {
        const diagnosis::Finding& f = finding(r, "rounded_toward_zero");
        EXPECT_NE(std::find(f.tensors.begin(), f.tensors.end(), TensorId::O), f.tensors.end())
            << where << "\n"
            << report(r);
        EXPECT_GT(f.detail.at("by_tensor").at("O").at("shrink_per_rms").get<double>(), 0.25);
      }
    }
}

// Q rows pointing away from every key: scores near -128, below float32's exp range.
ProblemData very_negative_rows(const Problem& p) {
  ProblemData data = make_problem_data(p, {3, false, Layout::bshd});
  for (std::int64_t h = 0; h < p.H_kv; ++h)
    for (std::int64_t j = 0; j < p.S_k; ++j)
      for (std::int64_t c = 0; c < p.d; ++c) data.k.set(0, h, j, c, data.k.get(0, h, j, c) + 4.0f);
  for (std::int64_t h = 0; h < p.H; ++h)
    for (std::int64_t i = 0; i < p.S_q; i += 7)
      for (std::int64_t c = 0; c < p.d; ++c) data.q.set(0, h, i, c, -8.0f);
  return data;
}

TEST(KernelCorpus, MaxInitZeroIsNamedWhereTheScoresAreVeryNegative) {
  for (Mask mask : {Mask::none, Mask::causal_bottom_right}) {
    const Problem p = make_problem(1, 2, 1, 100, 90, 16, mask, DType::f32);
    const ProblemData data = very_negative_rows(p);
    const std::string where(mask_name(mask));
    expect_clean_pass(check(data, {}), where + " correct kernel");
    Kernel k;
    k.max_init_zero = true;
    expect_only(check(data, k), "max_init_zero", where);
  }
  // On ordinary inputs the same kernel is right: nothing to find.
  Kernel k;
  k.max_init_zero = true;
  expect_clean_pass(check(make_problem(1, 2, 1, 100, 100, 16, Mask::none, DType::f32), k),
                    "ordinary inputs");
}

// Rows whose attention is one key, with score 0.25 y (y in [-1, 1) from the row's query, so L
// is near 0), in the third key tile of 32; the first tile's largest score is -5 - 0.25 y, a gap
// of 5 + 0.5 y below, within FlashAttention-4's conditional rescale (8 ln 2 = 5.55), which so
// leaves m there and adds L from m and log l near -5 and +5; every other score is -30. The
// inputs and the scores are exact in float32.
ProblemData peaked_rows(const Problem& p) {
  ProblemData data = make_problem_data(p, {5, false, Layout::bshd});
  constexpr std::int64_t kDominant = 70, kFirstTileMax = 5;
  constexpr float kGap = 5.0f;
  for (std::int64_t h = 0; h < p.H_kv; ++h)
    for (std::int64_t j = 0; j < p.S_k; ++j) {
      for (std::int64_t c = 0; c < p.d; ++c) data.k.set(0, h, j, c, 0.0f);
      data.k.set(0, h, j, 0, j == kDominant ? 0.0f : j == kFirstTileMax ? -4.0f * kGap : -120.0f);
      data.k.set(0, h, j, 1, j == kDominant ? 1.0f : j == kFirstTileMax ? -1.0f : 0.0f);
    }
  for (std::int64_t h = 0; h < p.H; ++h)
    for (std::int64_t i = 0; i < p.S_q; ++i) {
      for (std::int64_t c = 0; c < p.d; ++c) data.q.set(0, h, i, c, 0.0f);
      data.q.set(0, h, i, 0, 1.0f);
      data.q.set(0, h, i, 1, static_cast<float>((i * 37 + h * 11) % 64 - 32) / 32.0f);
    }
  return data;
}

// The conditional rescale is not a mistake: a kernel with it passes, on ordinary inputs and on
// rows whose L is near 0 while m and log l, which L adds, are each near 5 (docs/
// verification.md, "The conditional rescale"). There the kernel's L error sits above the limit
// without L's 2 tau of the cancellation term (it failed at 1.155 x the limit before the term)
// and under it with the term.
TEST(KernelCorpus, ConditionalRescaleIsNotAMistake) {
  Kernel lazy;
  lazy.lazy_rescale = static_cast<float>(kConditionalRescale);
  for (Mask mask : kMasks)
    for (const Case& c : shapes(mask)) expect_clean_pass(check(c.problem, lazy), c.name);
  const Problem p = make_problem(1, 2, 1, 100, 100, 16, Mask::none, DType::f32);
  const ProblemData data = peaked_rows(p);
  expect_clean_pass(check(data, {}), "peaked rows, the plain online softmax");
  const CheckResult r = check(data, lazy);
  expect_clean_pass(r, "peaked rows, the conditional rescale");
  // The rescale was deferred: the two kernels' L differ (by roundings only).
  const TensorSet plain_out = corpus::run_kernel(data, {}),
                  lazy_out = corpus::run_kernel(data, lazy);
  EXPECT_NE(plain_out.at(TensorId::L), lazy_out.at(TensorId::L));
  for (const TensorReport& t : r.tensors) {
    if (t.tensor != TensorId::L) continue;
    const double term = kSumEpsilon * 2.0 * kConditionalRescale;
    EXPECT_GT(t.rule.candidate_err, t.rule.limit - term) << report(r);
    EXPECT_LT(t.rule.candidate_err, t.rule.limit) << report(r);
  }
}

// An epsilon "for stability": the values students use (1e-10, 1e-8) are below float32's
// resolution next to a score of order 1 or l >= 1 and change nothing; larger ones are named
// with where they went and the epsilon that fits (docs/verification.md, "An epsilon in the
// softmax").
TEST(KernelCorpus, SoftmaxEpsilonIsNamedWhereItChangesTheOutputs) {
  for (Mask mask : {Mask::none, Mask::causal_top_left})
    for (const Case& c : shapes(mask)) {
      const std::string where = c.name + " " + std::string(mask_name(mask));
      for (float eps : {1e-10f, 1e-8f}) {
        Kernel scores, denominator;
        scores.score_eps = eps;
        denominator.denominator_eps = eps;
        expect_clean_pass(check(c.problem, scores), where + " scores + tiny eps");
        expect_clean_pass(check(c.problem, denominator), where + " l + tiny eps");
      }
      for (float eps : {1e-4f, 1e-3f}) {
        Kernel scores;
        scores.score_eps = eps;
        const CheckResult s = check(c.problem, scores);
        expect_only(s, "softmax_epsilon", where + " scores + eps");
        if (codes(s).count("softmax_epsilon") != 0) {
          const diagnosis::Finding& f = finding(s, "softmax_epsilon");
          // Only L shows it: softmax is shift-invariant.
          EXPECT_EQ(f.tensors, std::vector<TensorId>{TensorId::L}) << where;
          EXPECT_EQ(f.detail.at("added_to"), "scores") << where;
          EXPECT_NEAR(f.detail.at("epsilon_fits").get<double>(), eps, 1e-2 * eps) << where;
        }
        Kernel denominator;
        denominator.denominator_eps = eps;
        const CheckResult d = check(c.problem, denominator);
        expect_only(d, "softmax_epsilon", where + " l + eps");
        if (codes(d).count("softmax_epsilon") != 0) {
          const diagnosis::Finding& f = finding(d, "softmax_epsilon");
          EXPECT_EQ(f.tensors, (std::vector<TensorId>{TensorId::O, TensorId::L})) << where;
          EXPECT_EQ(f.detail.at("added_to"), "denominator") << where;
          EXPECT_NEAR(f.detail.at("epsilon_fits").get<double>(), eps, 5e-2 * eps) << where;
        }
      }
    }
}

TEST(KernelCorpus, NoFindingGivesALead) {
  const Problem p = make_problem(1, 2, 1, 100, 100, 16, Mask::causal_top_left, DType::f32);
  const ProblemData data = make_problem_data(p, {7, false, Layout::bshd});
  const TensorSet right = corpus::run_kernel(data, {});
  // A race: a few elements off.
  TensorSet race = right;
  race[TensorId::O](0, 1, 37, 5) += 0.5;
  race[TensorId::O](0, 0, 80, 2) -= 0.5;
  const CheckResult r = check_candidate(data, race, 64, 64);
  EXPECT_FALSE(r.passed());
  EXPECT_TRUE(r.diagnosis.findings.empty()) << report(r);
  ASSERT_EQ(r.diagnosis.lead.size(), 1u) << report(r);
  EXPECT_EQ(r.diagnosis.lead[0].tensor, TensorId::O);
  EXPECT_EQ(r.diagnosis.lead[0].detail.at("pattern"), "few");
  EXPECT_EQ(r.diagnosis.lead[0].detail.at("wrong_elements").get<int>(), 2);
  // A precision problem: every element off by about 1e-3 relative.
  TensorSet noisy = right;
  for (std::size_t n = 0; n < noisy[TensorId::O].size(); ++n)
    noisy[TensorId::O].flat(n) *= 1.0 + 1e-3 * corpus::junk(n) / 3.0 + 2e-3;
  const CheckResult u = check_candidate(data, noisy, 64, 64);
  ASSERT_EQ(u.diagnosis.lead.size(), 1u) << report(u);
  EXPECT_EQ(u.diagnosis.lead[0].detail.at("pattern"), "uniform") << report(u);
  // Rows of one tile: the lead names the tile.
  TensorSet tile = right;
  for (std::int64_t i = 16; i < 40; ++i)
    for (std::size_t c = 0; c < 16; ++c)
      tile[TensorId::O](0, 0, static_cast<std::size_t>(i), c) += 0.3;
  const CheckResult t = check_candidate(data, tile, 64, 64);
  ASSERT_EQ(t.diagnosis.lead.size(), 1u) << report(t);
  EXPECT_EQ(t.diagnosis.lead[0].detail.at("pattern"), "rows");
  EXPECT_EQ(t.diagnosis.lead[0].detail.at("first_wrong_row").get<int>(), 16);
  EXPECT_EQ(t.diagnosis.lead[0].detail.at("last_wrong_row").get<int>(), 39);
}

}  // namespace

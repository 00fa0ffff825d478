// The diagnosis of `flashref check`: every code is proven by planting exactly that bug (a cpu
// test fault, or a wrong variant computed here) and asserting that the diagnosis names it and
// nothing else; a correct candidate gets no findings.
#include <cmath>
#include <memory>
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "flashref/backend.hpp"
#include "flashref/cpu/backend.hpp"
#include "flashref/cpu/faults.hpp"
#include "flashref/error.hpp"
#include "flashref/reference/gold.hpp"
#include "flashref/verify/check.hpp"
#include "flashref/verify/runner.hpp"

namespace {

using namespace flashref;
using namespace flashref::verify;
using namespace flashref::verify::diagnosis;
using cpu::Fault;

struct Plant {
  Problem problem;
  std::uint32_t faults = 0;
  int tile_q = 32, tile_k = 32;
  bool backward = false;
  std::uint64_t seed = 1;
};

// Runs the cpu backend with the planted faults and checks its outputs as `flashref check`
// would; `judged` (default: the same problem) is the problem the check is told about.
CheckResult check_cpu(const Plant& plant, const Problem* judged = nullptr) {
  ProblemData data = make_problem_data(plant.problem, {plant.seed, false, Layout::bshd});
  RunOptions run;
  run.exec.tile_q = plant.tile_q;
  run.exec.tile_k = plant.tile_k;
  run.backward = plant.backward;
  const RunOutputs out = run_backend(*cpu::make_backend({.faults = plant.faults}), data, run);
  if (judged != nullptr) data.problem = *judged;
  return check_candidate(data, out.values, plant.tile_q, plant.tile_k);
}

std::set<std::string> codes(const CheckResult& r) {
  std::set<std::string> s;
  for (const Finding& f : r.diagnosis.findings) s.insert(f.code);
  return s;
}

const Finding& finding(const CheckResult& r, const std::string& code) {
  for (const Finding& f : r.diagnosis.findings) {
    if (f.code == code) return f;
  }
  throw std::runtime_error("no finding " + code);
}

std::set<TensorId> tensors(const Finding& f) {
  return {f.tensors.begin(), f.tensors.end()};
}

std::set<TensorId> failed(const CheckResult& r) {
  std::set<TensorId> s;
  for (const TensorReport& t : r.tensors) {
    if (!t.rule.pass) s.insert(t.tensor);
  }
  return s;
}

std::string describe_findings(const CheckResult& r) {
  std::string s;
  for (const Finding& f : r.diagnosis.findings) s += to_json(f).dump() + "\n";
  return s.empty() ? "(no findings)" : s;
}

// The problem most plants use: GQA, a partial last tile, causal unless stated.
Problem base_problem(Mask mask = Mask::causal_top_left, DType dtype = DType::f32) {
  return make_problem(2, 4, 2, 100, 100, 16, mask, dtype);
}

void expect_only(const CheckResult& r, const std::string& code, std::set<TensorId> explained) {
  EXPECT_EQ(codes(r), std::set<std::string>{code}) << describe_findings(r);
  if (codes(r).count(code) == 0) return;
  EXPECT_EQ(tensors(finding(r, code)), explained) << describe_findings(r);
  // Every failing tensor is explained, and only failing tensors are.
  EXPECT_EQ(failed(r), explained) << describe_findings(r);
}

TEST(Diagnosis, CorrectCandidatesGetNoFindings) {
  for (Mask mask : {Mask::none, Mask::causal_top_left, Mask::causal_bottom_right}) {
    for (DType dtype : {DType::f32, DType::bf16}) {
      Plant plant{make_problem(2, 4, 2, 90, 70, 16, mask, dtype), 0, 32, 16, true};
      const CheckResult r = check_cpu(plant);
      EXPECT_TRUE(r.passed()) << mask_name(mask) << " " << dtype_name(dtype);
      EXPECT_TRUE(r.diagnosis.findings.empty()) << describe_findings(r);
    }
  }
}

TEST(Diagnosis, NoScale) {
  Plant plant{base_problem(), static_cast<std::uint32_t>(Fault::no_scale), 32, 32, true};
  const CheckResult r = check_cpu(plant);
  expect_only(r, "no_scale", {TensorId::O, TensorId::L, TensorId::dQ, TensorId::dK, TensorId::dV});
  EXPECT_DOUBLE_EQ(finding(r, "no_scale").detail.at("scale_fits").get<double>(), 1.0);
}

TEST(Diagnosis, NoScaleInBfloat16) {
  Plant plant{base_problem(Mask::none, DType::bf16), static_cast<std::uint32_t>(Fault::no_scale)};
  expect_only(check_cpu(plant), "no_scale", {TensorId::O, TensorId::L});
}

TEST(Diagnosis, WrongScaleReportsTheScaleThatFits) {
  // The kernel used the default 1/sqrt(d) although the user asked for another scale.
  const Problem computed = base_problem(Mask::none);
  Problem judged = computed;
  judged.scale = 0.3;
  const CheckResult r = check_cpu({computed, 0}, &judged);
  expect_only(r, "no_scale", {TensorId::O, TensorId::L});
  EXPECT_DOUBLE_EQ(finding(r, "no_scale").detail.at("scale_fits").get<double>(),
                   1.0 / std::sqrt(16.0));
}

TEST(Diagnosis, LseBase2) {
  expect_only(check_cpu({base_problem(), static_cast<std::uint32_t>(Fault::lse_base2)}),
              "lse_base2", {TensorId::L});
}

TEST(Diagnosis, LseUnshifted) {
  expect_only(check_cpu({base_problem(), static_cast<std::uint32_t>(Fault::lse_unshifted)}),
              "lse_unshifted", {TensorId::L});
}

TEST(Diagnosis, MaskIgnored) {
  Plant plant{base_problem(), static_cast<std::uint32_t>(Fault::mask_ignored), 32, 32, true};
  expect_only(check_cpu(plant), "mask_ignored",
              {TensorId::O, TensorId::L, TensorId::dQ, TensorId::dK, TensorId::dV});
}

TEST(Diagnosis, MaskUnexpected) {
  // Planted by computing the wrong variant: a causal kernel checked as an unmasked one.
  const Problem computed = base_problem(Mask::causal_top_left);
  const Problem judged = base_problem(Mask::none);
  const CheckResult r = check_cpu({computed, 0}, &judged);
  expect_only(r, "mask_unexpected", {TensorId::O, TensorId::L});
  EXPECT_EQ(finding(r, "mask_unexpected").detail.at("mask_fits"), "causal");
}

TEST(Diagnosis, MaskAlignmentBothWays) {
  for (Mask mask : {Mask::causal_bottom_right, Mask::causal_top_left}) {
    Plant plant{make_problem(2, 4, 2, 90, 70, 16, mask),
                static_cast<std::uint32_t>(Fault::mask_alignment)};
    const CheckResult r = check_cpu(plant);
    expect_only(r, "mask_alignment", {TensorId::O, TensorId::L});
    EXPECT_NE(finding(r, "mask_alignment").detail.at("mask_fits"), std::string(mask_name(mask)));
  }
}

TEST(Diagnosis, Unnormalized) {
  expect_only(check_cpu({base_problem(), static_cast<std::uint32_t>(Fault::unnormalized)}),
              "unnormalized", {TensorId::O});
}

TEST(Diagnosis, NanInFullyMaskedRows) {
  // Bottom-right causal with S_q > S_k: the first 40 query rows see no key.
  Plant plant{make_problem(1, 2, 1, 90, 50, 16, Mask::causal_bottom_right),
              static_cast<std::uint32_t>(Fault::nan_masked_rows)};
  const CheckResult r = check_cpu(plant);
  expect_only(r, "nan_masked_rows", {TensorId::O});
  // Every (batch, head) row among the first S_q - S_k = 40 rows of each head.
  EXPECT_EQ(finding(r, "nan_masked_rows").detail.at("rows").get<int>(), 1 * 2 * (90 - 50));
}

TEST(Diagnosis, TailRowsNamesTheTileSize) {
  // S_q = 100 with B_q = 64: the last query tile holds rows 64..99, and only tile size 64
  // has that tail among 16, 32, 64, 128.
  Plant plant{base_problem(Mask::none), static_cast<std::uint32_t>(Fault::tail_rows), 64, 64};
  const CheckResult r = check_cpu(plant);
  expect_only(r, "tail_rows", {TensorId::O, TensorId::L});
  const Finding& f = finding(r, "tail_rows");
  EXPECT_EQ(f.detail.at("tile_sizes"), nlohmann::json::array({64}));
  EXPECT_EQ(f.detail.at("rows_begin").get<int>(), 64);
  EXPECT_EQ(f.detail.at("axis"), "query");
}

TEST(Diagnosis, DiagonalTilesNamesTheTileSize) {
  Plant plant{base_problem(), static_cast<std::uint32_t>(Fault::diagonal_tiles), 32, 32, true};
  const CheckResult r = check_cpu(plant);
  expect_only(r, "diagonal_tiles",
              {TensorId::O, TensorId::L, TensorId::dQ, TensorId::dK, TensorId::dV});
  EXPECT_EQ(finding(r, "diagonal_tiles").detail.at("tile_size").get<int>(), 32);
}

TEST(Diagnosis, DqScaleMissing) {
  Plant plant{base_problem(), static_cast<std::uint32_t>(Fault::dq_scale), 32, 32, true};
  const CheckResult r = check_cpu(plant);
  expect_only(r, "dq_scale", {TensorId::dQ});
  EXPECT_EQ(finding(r, "dq_scale").detail.at("mistake"), "missing");
}

TEST(Diagnosis, DkScaleAppliedTwice) {
  Plant plant{base_problem(), static_cast<std::uint32_t>(Fault::dk_scale), 32, 32, true};
  const CheckResult r = check_cpu(plant);
  expect_only(r, "dk_scale", {TensorId::dK});
  EXPECT_EQ(finding(r, "dk_scale").detail.at("mistake"), "applied twice");
}

TEST(Diagnosis, DVectorMissing) {
  Plant plant{base_problem(), static_cast<std::uint32_t>(Fault::d_vector), 32, 32, true};
  const CheckResult r = check_cpu(plant);
  expect_only(r, "d_vector", {TensorId::dQ, TensorId::dK});
  EXPECT_TRUE(finding(r, "d_vector").detail.at("D_used_is_zero").get<bool>());
}

TEST(Diagnosis, DVectorFromTheWrongO) {
  // Planted by computing the wrong variant: D = rowsum(dO * O) with O not divided by l.
  const Problem p = base_problem(Mask::none);
  ProblemData data = make_problem_data(p, {3, false, Layout::bshd});
  ForwardParams fwd;
  fwd.problem = p;
  fwd.q = data.q.view();
  fwd.k = data.k.view();
  fwd.v = data.v.view();
  const reference::GoldForward gold = reference::gold_forward(fwd);
  const auto u = [](std::int64_t x) { return static_cast<std::size_t>(x); };
  xt::xtensor<double, 3> D_wrong = xt::zeros<double>(gold.L.shape());
  for (std::int64_t b = 0; b < p.B; ++b)
    for (std::int64_t h = 0; h < p.H; ++h)
      for (std::int64_t s = 0; s < p.S_q; ++s)
        for (std::int64_t i = 0; i < p.d; ++i) {
          D_wrong(u(b), u(h), u(s)) +=
              data.dO.get(b, h, s, i) * gold.O(u(b), u(h), u(s), u(i)) * gold.l(u(b), u(h), u(s));
        }
  BackwardParams bwd;
  bwd.problem = p;
  bwd.q = fwd.q;
  bwd.k = fwd.k;
  bwd.v = fwd.v;
  bwd.dO = data.dO.view();
  const reference::GoldBackward wrong = reference::gold_backward_with_D(bwd, D_wrong);
  const CheckResult r = check_candidate(
      data, {{TensorId::dQ, wrong.dQ}, {TensorId::dK, wrong.dK}, {TensorId::dV, wrong.dV}}, 32, 32);
  expect_only(r, "d_vector", {TensorId::dQ, TensorId::dK});
  EXPECT_FALSE(finding(r, "d_vector").detail.at("D_used_is_zero").get<bool>());
}

TEST(Diagnosis, GqaReduction) {
  Plant plant{base_problem(), static_cast<std::uint32_t>(Fault::gqa_reduction), 32, 32, true};
  const CheckResult r = check_cpu(plant);
  expect_only(r, "gqa_reduction", {TensorId::dK, TensorId::dV});
  EXPECT_EQ(finding(r, "gqa_reduction").detail.at("mistake"), "first head only");
}

TEST(Diagnosis, EveryCpuFaultIsNamedByItsCode) {
  // The codes and the cpu faults are one vocabulary: each fault's name is a diagnosis code.
  for (Fault f : cpu::all_faults()) {
    const std::string name(cpu::fault_name(f));
    EXPECT_NE(std::find(std::begin(kDiagnosisCodes), std::end(kDiagnosisCodes), name),
              std::end(kDiagnosisCodes))
        << name;
  }
}

TEST(Diagnosis, UnexplainedErrorsGetNoAbsurdFinding) {
  // Noise spread over every element fits no mistake and no location pattern.
  const Problem p = base_problem();
  ProblemData data = make_problem_data(p, {5, false, Layout::bshd});
  RunOptions run;
  const RunOutputs out = run_backend(*make_backend("cpu"), data, run);
  xt::xarray<double> O = out.values.at(TensorId::O);
  for (std::size_t n = 0; n < O.size(); ++n) O.flat(n) += 1e-3 * std::sin(static_cast<double>(n));
  const CheckResult r =
      check_candidate(data, {{TensorId::O, O}, {TensorId::L, out.values.at(TensorId::L)}}, 32, 32);
  EXPECT_EQ(failed(r), std::set<TensorId>{TensorId::O});
  EXPECT_TRUE(r.diagnosis.findings.empty()) << describe_findings(r);
}

TEST(Diagnosis, LargeProblemsAreDiagnosedOnASlice) {
  Plant plant{make_problem(3, 2, 1, 512, 512, 64, Mask::none),
              static_cast<std::uint32_t>(Fault::no_scale), 64, 64};
  const CheckResult r = check_cpu(plant);
  expect_only(r, "no_scale", {TensorId::O, TensorId::L});
  EXPECT_NE(r.diagnosis.scope_note.find("batch 0"), std::string::npos);
}

TEST(Diagnosis, CandidateOfTheWrongShapeIsRefused) {
  const Problem p = base_problem();
  const ProblemData data = make_problem_data(p, {1, false, Layout::bshd});
  xt::xarray<double> O = xt::zeros<double>({2, 4, 99, 16});
  try {
    check_candidate(data, {{TensorId::O, O}}, 32, 32);
    ADD_FAILURE() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.field(), "candidate O");
    EXPECT_NE(std::string(e.what()).find("(2, 4, 100, 16)"), std::string::npos) << e.what();
  }
}

}  // namespace

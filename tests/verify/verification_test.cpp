// run_verification and check_candidate: the score-rounding noise reaches every check, and the
// gradients are judged against the baseline backward run from the candidate's O and L when
// both pass (from the baseline's own otherwise), and the reports say which.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "flashref/backend.hpp"
#include "flashref/cpu/backend.hpp"
#include "flashref/cpu/faults.hpp"
#include "flashref/verify/check.hpp"
#include "flashref/verify/report.hpp"
#include "flashref/verify/verification.hpp"

namespace flashref::verify {
namespace {

VerifyCase small_case(DType dtype, bool large) {
  VerifyCase c;
  c.problem = make_problem(1, 2, 1, 9, 7, 5, Mask::causal_bottom_right, dtype);
  c.seed = 3;
  c.tile_q = 4;
  c.tile_k = 3;
  c.layout = Layout::bhsd;
  c.large = large;
  return c;
}

RunOutputs run(const Backend& backend, const ProblemData& data) {
  RunOptions options;
  options.layout = Layout::bhsd;
  options.backward = true;
  return run_backend(backend, data, options);
}

// The reference backward through the Backend interface, from the given O and L: written here
// without run_backward_from, so the test does not check the library against itself.
RunOutputs reference_backward(const ProblemData& data, const HostTensor& o,
                              xt::xtensor<float, 3> lse) {
  const Problem& p = data.problem;
  RunOutputs out;
  out.dq = HostTensor(p.grad_dtype, Layout::bhsd, p.B, p.H, p.S_q, p.d);
  out.dk = HostTensor(p.grad_dtype, Layout::bhsd, p.B, p.H_kv, p.S_k, p.d);
  out.dv = HostTensor(p.grad_dtype, Layout::bhsd, p.B, p.H_kv, p.S_k, p.d);
  const HostTensor q = data.q.with_layout(Layout::bhsd), k = data.k.with_layout(Layout::bhsd),
                   v = data.v.with_layout(Layout::bhsd), dO = data.dO.with_layout(Layout::bhsd),
                   o_bhsd = o.with_layout(Layout::bhsd);
  BackwardParams bwd;
  bwd.problem = p;
  bwd.q = q.view();
  bwd.k = k.view();
  bwd.v = v.view();
  bwd.o = o_bhsd.view();
  bwd.dO = dO.view();
  bwd.lse = lse.data();
  bwd.dq = out.dq.view();
  bwd.dk = out.dk.view();
  bwd.dv = out.dv.view();
  make_backend("reference")->backward(bwd);
  out.values[TensorId::dQ] = out.dq.to_double();
  out.values[TensorId::dK] = out.dk.to_double();
  out.values[TensorId::dV] = out.dv.to_double();
  return out;
}

const TensorReport& report_of(const std::vector<TensorReport>& reports, TensorId id) {
  for (const TensorReport& t : reports) {
    if (t.tensor == id) return t;
  }
  throw std::runtime_error("no report for " + std::string(tensor_name(id)));
}

// The baseline errors of the three gradient checks against `baseline`'s gradients.
void expect_gradient_baseline(const std::vector<TensorReport>& reports, const TensorSet& gold,
                              const RunOutputs& baseline) {
  for (TensorId id : kBackwardTensors) {
    EXPECT_EQ(report_of(reports, id).baseline.max_abs,
              compute_stats(id, baseline.values.at(id), gold.at(id), 1).max_abs)
        << tensor_name(id);
  }
}

TEST(Verification, GradientsAreJudgedFromTheCandidatesOAndLWhenBothPass) {
  // float32 with large scores: the baseline's own L and the cpu's differ in the last bits,
  // and P = exp(S - L) carries that, so which L the baseline backward uses shows in dV.
  const VerifyCase c = small_case(DType::f32, /*large=*/true);
  const VerifyReport report = run_verification(c, {"cpu"});
  ASSERT_EQ(report.backends.size(), 1u);
  const BackendReport& b = report.backends[0];
  ASSERT_TRUE(b.error.empty()) << b.error;
  EXPECT_EQ(b.backward_inputs, BackwardInputs::candidate);
  EXPECT_TRUE(b.backward_inputs_reason.empty());

  const ProblemData data = make_problem_data(c.problem, input_options(c));
  const TensorSet gold = compute_gold(data, true);
  const RunOutputs cpu = run(*make_backend("cpu"), data);
  expect_gradient_baseline(b.tensors, gold, reference_backward(data, cpu.o, cpu.lse));
  const RunOutputs own = run(*make_backend("reference"), data);
  EXPECT_NE(
      report_of(b.tensors, TensorId::dV).baseline.max_abs,
      compute_stats(TensorId::dV, own.values.at(TensorId::dV), gold.at(TensorId::dV), 1).max_abs);

  const std::string table = format_table(report);
  EXPECT_NE(table.find("cpu: the baseline backward ran from cpu's O and L, which passed"),
            std::string::npos)
      << table;
  const nlohmann::json j = to_json(report);
  EXPECT_EQ(j["backends"][0]["baseline_backward"]["inputs"], "candidate");
  EXPECT_EQ(j["rule"]["noise_sigmas"], kNoiseSigmas);
}

TEST(Verification, AFailedOMeansTheBaselinesOwnOAndLAndTheReportSaysSo) {
  const VerifyCase c = small_case(DType::bf16, false);
  const auto faulty =
      cpu::make_backend({.faults = static_cast<std::uint32_t>(cpu::Fault::unnormalized)});
  const VerifyReport report = verify_backends(c, {faulty.get()});
  const BackendReport& b = report.backends[0];
  ASSERT_FALSE(report_of(b.tensors, TensorId::O).rule.pass);
  EXPECT_EQ(b.backward_inputs, BackwardInputs::baseline);
  EXPECT_NE(b.backward_inputs_reason.find("cpu's O"), std::string::npos)
      << b.backward_inputs_reason;

  const ProblemData data = make_problem_data(c.problem, input_options(c));
  expect_gradient_baseline(b.tensors, compute_gold(data, true),
                           run(*make_backend("reference"), data));
  const std::string table = format_table(report);
  EXPECT_NE(table.find("the baseline backward ran from its own O and L (cpu's O failed"),
            std::string::npos)
      << table;
  const nlohmann::json j = to_json(report);
  EXPECT_EQ(j["backends"][0]["baseline_backward"]["inputs"], "baseline");
  EXPECT_EQ(j["backends"][0]["baseline_backward"]["reason"], b.backward_inputs_reason);
}

TEST(Verification, EveryCheckCarriesItsTensorsScoreNoiseInTheFloor) {
  const VerifyCase c = small_case(DType::bf16, /*large=*/true);
  const VerifyReport report = run_verification(c, {"reference", "cpu"});
  const ProblemData data = make_problem_data(c.problem, input_options(c));
  // bf16: the noise part holds the rounding of P~ and dS as the products' operands too.
  const ScoreNoise noise =
      score_rounding_noise(data, true, product_operand_rounding(DType::bf16, c.allow_tf32));
  const SumMagnitudes sums = sum_magnitudes(data, true);
  const nlohmann::json j = to_json(report);
  for (std::size_t bi = 0; bi < report.backends.size(); ++bi) {
    const BackendReport& b = report.backends[bi];
    ASSERT_EQ(b.tensors.size(), 5u) << b.backend;
    for (std::size_t ti = 0; ti < b.tensors.size(); ++ti) {
      const TensorReport& t = b.tensors[ti];
      const RuleCheck& r = t.rule;
      const char* name = tensor_name(t.tensor).data();
      EXPECT_EQ(r.noise_sigma, noise.max_sigma(t.tensor)) << name;
      EXPECT_GT(r.noise_sigma, 0.0) << name;
      EXPECT_EQ(r.floor_noise, kNoiseSigmas * r.noise_sigma) << name;
      EXPECT_EQ(r.floor_rounding,
                rule_floor(output_dtype(t.tensor, c.problem), t.candidate.max_abs_gold))
          << name;
      EXPECT_EQ(r.sum_magnitude, sums.max_magnitude(t.tensor)) << name;
      EXPECT_GT(r.sum_magnitude, 0.0) << name;
      EXPECT_EQ(r.floor_cancellation, kSumEpsilon * r.sum_magnitude) << name;
      EXPECT_EQ(r.floor, r.floor_rounding + r.floor_noise + r.floor_cancellation) << name;
      EXPECT_EQ(r.limit, r.k * r.baseline_err + r.floor) << name;
      const nlohmann::json& jt = j["backends"][bi]["tensors"][ti];
      EXPECT_EQ(jt["floor_rounding"].get<double>(), r.floor_rounding) << name;
      EXPECT_EQ(jt["floor_noise"].get<double>(), r.floor_noise) << name;
      EXPECT_EQ(jt["noise_sigma"].get<double>(), r.noise_sigma) << name;
      EXPECT_EQ(jt["floor_cancellation"].get<double>(), r.floor_cancellation) << name;
      EXPECT_EQ(jt["floor"].get<double>(), r.floor) << name;
    }
  }
  const std::string table = format_table(report);
  EXPECT_NE(table.find("floor      = rounding + noise    + cancel"), std::string::npos) << table;
}

TEST(Verification, ForwardOnlyJudgesNoGradientsAndSaysNothingAboutTheirBaseline) {
  VerifyCase c = small_case(DType::f16, false);
  c.backward = false;
  const VerifyReport report = run_verification(c, {"cpu"});
  const BackendReport& b = report.backends[0];
  EXPECT_EQ(b.tensors.size(), 2u);
  EXPECT_EQ(b.backward_inputs, BackwardInputs::none);
  EXPECT_EQ(format_table(report).find("gradients' baseline"), std::string::npos);
  EXPECT_TRUE(to_json(report)["backends"][0]["baseline_backward"].is_null());
}

TensorSet candidate_of(const RunOutputs& out, bool with_forward) {
  TensorSet set = out.values;
  if (!with_forward) {
    set.erase(TensorId::O);
    set.erase(TensorId::L);
  }
  return set;
}

TEST(Check, GradientsAreJudgedFromTheGivenOAndLWhenBothPass) {
  const VerifyCase c = small_case(DType::f32, /*large=*/true);
  const ProblemData data = make_problem_data(c.problem, input_options(c));
  const TensorSet gold = compute_gold(data, true);
  const RunOutputs cpu = run(*make_backend("cpu"), data);

  const CheckResult given = check_candidate(data, candidate_of(cpu, true), 4, 3);
  EXPECT_TRUE(given.passed());
  EXPECT_EQ(given.backward_inputs, BackwardInputs::candidate);
  expect_gradient_baseline(given.tensors, gold, reference_backward(data, cpu.o, cpu.lse));

  const CheckResult alone = check_candidate(data, candidate_of(cpu, false), 4, 3);
  EXPECT_EQ(alone.backward_inputs, BackwardInputs::baseline);
  EXPECT_NE(alone.backward_inputs_reason.find("not both given"), std::string::npos);
  expect_gradient_baseline(alone.tensors, gold, run(*make_backend("reference"), data));

  const ScoreNoise noise = score_rounding_noise(data, true);
  for (const TensorReport& t : given.tensors) {
    EXPECT_EQ(t.rule.noise_sigma, noise.max_sigma(t.tensor)) << tensor_name(t.tensor);
  }
}

}  // namespace
}  // namespace flashref::verify

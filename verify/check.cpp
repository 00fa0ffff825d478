// check_candidate: the rule, then the precision findings, then the diagnosis, for tensors
// another kernel produced.
#include "flashref/verify/check.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>

#include "flashref/backend.hpp"
#include "flashref/error.hpp"
#include "flashref/reference/tf32.hpp"
#include "flashref/verify/nonfinite.hpp"
#include "flashref/verify/runner.hpp"

namespace flashref::verify {

bool CheckResult::passed() const {
  for (const TensorReport& t : tensors) {
    if (!t.rule.pass) return false;
  }
  return true;
}

namespace {

struct Judgement {
  std::vector<TensorReport> tensors;
  BackwardInputs backward_inputs = BackwardInputs::none;
  std::string backward_inputs_reason;
  TensorSet baseline_forward;  // the baseline's O and L
  TensorSet baseline;          // what each tensor was judged against (gradients: as chosen)
  bool passed() const {
    return std::all_of(tensors.begin(), tensors.end(),
                       [](const TensorReport& t) { return t.rule.pass; });
  }
  const TensorReport* find(TensorId id) const {
    for (const TensorReport& t : tensors) {
      if (t.tensor == id) return &t;
    }
    return nullptr;
  }
};

// Everything the judgement of one precision needs, computed once.
struct Inputs {
  const ProblemData& data;
  const TensorSet& candidate;
  const TensorSet& gold;
  const ScoreNoise& noise;       // float32 products
  const ScoreNoise* noise_tf32;  // TF32 products; computed when first needed
  const SumMagnitudes& sums;     // the cancellation floor's magnitudes
  std::int64_t tile_q, tile_k;
  bool backward;
};

Judgement judge_in(const Inputs& in, const Precision& precision) {
  const Problem& p = in.data.problem;
  const ScoreNoise& noise =
      precision.allow_tf32 && in.noise_tf32 != nullptr ? *in.noise_tf32 : in.noise;
  RunOptions run;
  run.backward = in.backward;
  run.exec.allow_tf32 = precision.allow_tf32;
  const std::unique_ptr<Backend> reference = make_backend("reference");
  const RunOutputs baseline = run_backend(*reference, in.data, run);

  Judgement j;
  j.baseline_forward[TensorId::O] = baseline.values.at(TensorId::O);
  j.baseline_forward[TensorId::L] = baseline.values.at(TensorId::L);
  j.tensors = judge(p, kForwardTensors, in.candidate, baseline.values, in.gold, noise, in.sums,
                    in.tile_q, in.tile_k, precision.lse_dtype);
  j.baseline = j.baseline_forward;
  if (in.backward) {
    // Gradients are judged given the O and L the candidate's backward received.
    const GradientBaseline choice = choose_gradient_baseline(j.tensors, "the candidate");
    j.backward_inputs = choice.inputs;
    j.backward_inputs_reason = choice.reason;
    std::optional<RunOutputs> given;
    if (choice.inputs == BackwardInputs::candidate) {
      // O and L as the backward would receive them: stored in their dtypes.
      const HostTensor o = HostTensor::from_canonical(in.candidate.at(TensorId::O), p.dtype);
      const xt::xtensor<float, 3> lse = xt::cast<float>(in.candidate.at(TensorId::L));
      given = run_backward_from(*reference, in.data, run, o, lse);
    }
    const TensorSet& against = given ? given->values : baseline.values;
    for (TensorReport& t : judge(p, kBackwardTensors, in.candidate, against, in.gold, noise,
                                 in.sums, in.tile_q, in.tile_k, precision.lse_dtype)) {
      j.baseline[t.tensor] = against.at(t.tensor);
      j.tensors.push_back(std::move(t));
    }
  }
  return j;
}

// The inputs with their low 13 mantissa bits dropped (rounded toward zero to TF32): what a
// tensor core reads from a float32 operand that was not converted first (PTX mma's .tf32
// operands ignore those bits), so what Triton's tl.dot does by default. The TF32 baseline run
// on them, whose own rounding to nearest then leaves Q, K, V and dO as they are, is TF32
// attention as such a kernel computes it.
HostTensor truncated_to_tf32(const HostTensor& t) {
  HostTensor out = t;
  for (std::int64_t b = 0; b < t.B(); ++b)
    for (std::int64_t h = 0; h < t.H(); ++h)
      for (std::int64_t s = 0; s < t.S(); ++s)
        for (std::int64_t c = 0; c < t.d(); ++c)
          out.set(b, h, s, c, reference::truncate_to_tf32(t.get(b, h, s, c)));
  return out;
}

ProblemData with_inputs_truncated_to_tf32(const ProblemData& data) {
  ProblemData out = data;
  for (HostTensor* t : {&out.q, &out.k, &out.v, &out.dO}) {
    if (!t->empty()) *t = truncated_to_tf32(*t);
  }
  return out;
}

// Every finite value of `values` is a number of `dtype` (what a tensor stored in it holds).
bool representable_in(const xt::xarray<double>& values, DType dtype) {
  for (double v : values) {
    if (!std::isfinite(v)) continue;
    const auto f = static_cast<float>(v);
    if (static_cast<double>(f) != v || round_to(dtype, f) != f) return false;
  }
  return true;
}

// ||c - r|| / ||c - g|| over the elements where all three are finite: how much of the
// candidate's distance from the gold is left when r is the answer it is compared with.
double residual_share(const xt::xarray<double>& c, const xt::xarray<double>& r,
                      const xt::xarray<double>& g) {
  double to_r = 0.0, to_g = 0.0;
  for (std::size_t n = 0; n < c.size(); ++n) {
    const double cn = c.flat(n), rn = r.flat(n), gn = g.flat(n);
    if (!std::isfinite(cn) || !std::isfinite(rn) || !std::isfinite(gn)) continue;
    to_r += (cn - rn) * (cn - rn);
    to_g += (cn - gn) * (cn - gn);
  }
  return to_g > 0.0 ? std::sqrt(to_r / to_g) : 0.0;
}

// A TF32 candidate's error is largely the rounding of the inputs Q, K, V to TF32, which every
// TF32 kernel does alike (round to nearest); the rounding of P~ differs between kernels (it is
// rounded before or after the division by l). So it sits closer to the TF32 baseline than to
// the gold: measured on the kernel corpus, ||c - tf32|| / ||c - gold|| is 0.6-0.7 for O and
// under 0.01 for L. Errors unrelated to TF32 but of its size sit at least as far from the TF32
// baseline as from the gold (share >= 1: the two errors add in quadrature) and are not claimed.
constexpr double kTf32MaxResidualShare = 0.85;

std::string fixed_text(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", x);
  return buf;
}

std::string percent_text(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f%%", 100.0 * x);
  return buf;
}

std::string ratio_text(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2g", x);
  return buf;
}

// lse_low_precision: L failed as float32 but every value is a bf16 (or f16) number and it
// passes with that dtype's floor. Returns the dtype that fits.
std::optional<DType> lse_dtype_that_fits(const Inputs& in, const Precision& precision,
                                         const Judgement& j, diagnosis::Finding& finding) {
  const TensorReport* l = j.find(TensorId::L);
  if (l == nullptr || l->rule.pass || precision.lse_dtype != DType::f32) return std::nullopt;
  const Problem& p = in.data.problem;
  const xt::xarray<double>& cand = in.candidate.at(TensorId::L);
  for (DType dt : {DType::bf16, DType::f16}) {
    if (!representable_in(cand, dt)) continue;
    const TensorReport r =
        judge(TensorId::L, p, cand, j.baseline_forward.at(TensorId::L), in.gold.at(TensorId::L),
              in.noise.max_sigma(TensorId::L), in.tile_q, dt, in.sums.max_magnitude(TensorId::L));
    if (!r.rule.pass) continue;
    const double step = rounding_step(dt, r.candidate.max_abs_gold);
    finding.code = "lse_low_precision";
    finding.tensors = {TensorId::L};
    finding.explanation =
        "L was stored in " + std::string(dtype_name(dt)) + ": every value is a " +
        std::string(dtype_name(dt)) + " number and the error is " +
        ratio_text(r.candidate.max_abs / step) + " rounding steps of " +
        std::string(dtype_name(dt)) + " at max|L| (ratio " + ratio_text(r.rule.ratio) +
        " under --lse-dtype " + std::string(dtype_name(dt)) +
        "); FlashAttention keeps L in float32 (store it as float32, or rerun with --lse-dtype " +
        std::string(dtype_name(dt)) + " if that is your contract)";
    finding.detail = {{"lse_dtype_fits", std::string(dtype_name(dt))},
                      {"rounding_steps", r.candidate.max_abs / step},
                      {"ratio_as_stored", r.rule.ratio}};
    return dt;
  }
  return std::nullopt;
}

// tf32_matmul: a float32 candidate judged without --allow-tf32 that passes against TF32
// attention (every failed tensor, in the precision found so far), its operands rounded to
// nearest (the --allow-tf32 baseline) or truncated (tensor cores fed float32 as is). Both are
// tried, as --allow-tf32 does: on a problem of one key O is V itself, and the two modes'
// errors are as far apart as either is from the gold.
bool tf32_fits(const Inputs& in, const Precision& precision, const std::vector<TensorReport>& exact,
               diagnosis::Finding& finding) {
  const Problem& p = in.data.problem;
  if (p.dtype != DType::f32 || precision.allow_tf32) return false;
  Precision tf32 = precision;
  tf32.allow_tf32 = true;
  tf32.three_tf32 = false;  // one precision of the products at a time
  const auto residual = [&](const Judgement& j, TensorId id) {
    return residual_share(in.candidate.at(id), j.baseline.at(id), in.gold.at(id));
  };
  const auto fits = [&](const Judgement& j) {
    if (!j.passed()) return false;
    for (const TensorReport& t : exact) {
      if (!t.rule.pass && residual(j, t.tensor) > kTf32MaxResidualShare) return false;
    }
    return true;
  };
  std::optional<Judgement> j = judge_in(in, tf32);
  bool truncated = false;
  if (!fits(*j)) {
    const ProblemData data = with_inputs_truncated_to_tf32(in.data);
    const Inputs with_truncated{data,    in.candidate, in.gold,   in.noise,   in.noise_tf32,
                                in.sums, in.tile_q,    in.tile_k, in.backward};
    j = judge_in(with_truncated, tf32);
    if (!fits(*j)) return false;
    truncated = true;
  }
  finding.code = "tf32_matmul";
  finding.detail = {{"precision_fits", "tf32"},
                    {"tf32_conversion", truncated ? "truncate" : "round_to_nearest"},
                    {"fit", nlohmann::json::object()}};
  std::string worst;
  double worst_ratio = -1.0, worst_share = 0.0;
  for (const TensorReport& t : exact) {
    if (t.rule.pass) continue;
    const TensorReport* alt = j->find(t.tensor);
    finding.tensors.push_back(t.tensor);
    const double of_baseline =
        alt->rule.baseline_err > 0.0 ? alt->rule.candidate_err / alt->rule.baseline_err : 0.0;
    const double share = residual(*j, t.tensor);
    finding.detail["fit"][std::string(tensor_name(t.tensor))] = {
        {"error_over_tf32_baseline_error", of_baseline},
        {"error_explained", 1.0 - share * share},
        {"distance_to_tf32_over_distance_to_gold", share},
        {"ratio_under_allow_tf32", alt->rule.ratio},
        {"ratio_float32", t.rule.ratio}};
    worst_share = std::max(worst_share, share);
    if (of_baseline > worst_ratio) {
      worst_ratio = of_baseline;
      worst = std::string(tensor_name(t.tensor));
    }
  }
  const std::string how =
      truncated ? "truncated to TF32 (their low 13 bits dropped, as tensor cores do with float32 "
                  "operands fed as is: Triton's default)"
                : "rounded to TF32";
  finding.explanation =
      "the products' inputs were " + how + ": the candidate agrees with TF32 attention to " +
      fixed_text(worst_ratio) + "x the TF32 baseline's error (" + worst +
      "); TF32 rounding explains at least " + percent_text(1.0 - worst_share * worst_share) +
      " of each tensor's squared error, and it passes under --allow-tf32; rerun with "
      "--allow-tf32" +
      std::string(precision.three_tf32 ? " (in place of --three-tf32)" : "") +
      " if TF32 was intended, else set the dot's input precision to IEEE (Triton: "
      "tl.dot(..., input_precision=\"ieee\"))";
  return true;
}

}  // namespace

CheckResult check_candidate(const ProblemData& data, const TensorSet& candidate,
                            std::int64_t tile_q, std::int64_t tile_k, const Precision& precision) {
  const Problem& p = data.problem;
  validate(p);
  validate(precision);
  const bool backward =
      candidate.has(TensorId::dQ) || candidate.has(TensorId::dK) || candidate.has(TensorId::dV);
  if (backward && data.dO.empty()) {
    throw InvalidArgument("--do", "checking dQ, dK or dV needs dO, the gradient of the output");
  }
  // Shapes first, so a wrong file fails before the gold is computed.
  require_canonical_shapes(candidate, p, "candidate");

  const TensorSet gold = compute_gold(data, backward);
  // With the 16-bit dtypes' rounding of P~ and dS as the products' operands, and under
  // --three-tf32 each float32 product's own error.
  const double product_sigma =
      precision.three_tf32 && p.dtype == DType::f32 ? kThreeTf32ProductSigma : 0.0;
  const ScoreNoise noise =
      score_rounding_noise(data, backward, product_operand_rounding(p.dtype, false), product_sigma);
  // TF32's extra noise term (float32 inputs only): when TF32 is asked for, or tried below.
  std::optional<ScoreNoise> noise_tf32;
  const auto tf32_noise = [&]() -> const ScoreNoise* {
    if (p.dtype != DType::f32) return nullptr;
    if (!noise_tf32) {
      noise_tf32 = score_rounding_noise(data, backward, product_operand_rounding(p.dtype, true));
    }
    return &*noise_tf32;
  };
  const SumMagnitudes sums = sum_magnitudes(data, backward);
  Inputs in{data, candidate, gold, noise, nullptr, sums, tile_q, tile_k, backward};
  if (precision.allow_tf32) in.noise_tf32 = tf32_noise();
  Judgement j = judge_in(in, precision);
  if (!j.passed() && precision.allow_tf32 && p.dtype == DType::f32) {
    // TF32 has two conversions in practice (see truncated_to_tf32): a candidate that fails
    // against operands rounded to nearest is judged against truncated ones, by the same rule.
    const ProblemData truncated = with_inputs_truncated_to_tf32(data);
    const Inputs with_truncated{truncated, candidate, gold,   noise,   in.noise_tf32,
                                sums,      tile_q,    tile_k, backward};
    Judgement t = judge_in(with_truncated, precision);
    if (t.passed()) j = std::move(t);
  }

  CheckResult result;
  result.precision = precision;
  result.backward_inputs = j.backward_inputs;
  result.backward_inputs_reason = j.backward_inputs_reason;
  result.tensors = j.tensors;
  result.input_notes = input_notes(data, sums.max_abs_score);
  if (j.passed()) return result;

  // The precision findings: the candidate is right for another precision than the one asked.
  // The tensors they explain are left out of the diagnosis.
  std::vector<TensorReport> unexplained = j.tensors;
  const auto mark_explained = [&](const std::vector<TensorId>& ids) {
    for (TensorReport& t : unexplained) {
      if (std::find(ids.begin(), ids.end(), t.tensor) != ids.end()) t.rule.pass = true;
    }
  };
  Precision fitted = precision;
  diagnosis::Finding lse;
  if (const std::optional<DType> dt = lse_dtype_that_fits(in, precision, j, lse)) {
    fitted.lse_dtype = *dt;
    mark_explained(lse.tensors);
    result.diagnosis.findings.push_back(std::move(lse));
  }
  const auto any_failed = [&] {
    return std::any_of(unexplained.begin(), unexplained.end(),
                       [](const TensorReport& t) { return !t.rule.pass; });
  };
  diagnosis::Finding tf32;
  if (any_failed() && !precision.allow_tf32) in.noise_tf32 = tf32_noise();
  if (any_failed() && tf32_fits(in, fitted, unexplained, tf32)) {
    mark_explained(tf32.tensors);
    result.diagnosis.findings.push_back(std::move(tf32));
  }
  // 3xTF32 products: a note, not a finding, and the diagnosis still runs. Their floor is wider
  // than float32's, so a mistake that small passes it too, and unlike TF32's rounding the
  // products' errors depend on the split, so no baseline shows the candidate's own. The floor
  // grows at most 17.5 times (docs/verification.md, "3xTF32 products"): a tensor past 18 times
  // its limit cannot pass, and the judgement is not tried.
  const auto could_pass_as_3xtf32 = [&] {
    return std::all_of(unexplained.begin(), unexplained.end(),
                       [](const TensorReport& t) { return t.rule.pass || t.rule.ratio <= 18.0; });
  };
  if (any_failed() && p.dtype == DType::f32 && !precision.allow_tf32 && !precision.three_tf32 &&
      could_pass_as_3xtf32()) {
    in.noise_tf32 = nullptr;
    noise_tf32.reset();  // one set of sigmas held at a time
    const ScoreNoise noise3 = score_rounding_noise(
        data, backward, product_operand_rounding(p.dtype, false), kThreeTf32ProductSigma);
    const Inputs in3{data, candidate, gold, noise3, nullptr, sums, tile_q, tile_k, backward};
    Precision three = fitted;
    three.three_tf32 = true;
    const Judgement j3 = judge_in(in3, three);
    if (j3.passed()) {
      double worst = 0.0;
      for (const TensorReport& t : j3.tensors) worst = std::max(worst, t.rule.ratio);
      result.precision_notes.push_back(
          "it passes with its products judged as 3xTF32 (--three-tf32; worst ratio " +
          fixed_text(worst) +
          "): if they are 3xTF32 (CUTLASS's FastF32, PyTorch's memory-efficient kernel, Triton's "
          "tf32x3), judge it so; if they are float32, its error is its own");
    }
  }
  if (any_failed()) {
    diagnosis::Diagnosis d = diagnosis::diagnose(data, candidate, unexplained, gold, precision);
    for (diagnosis::Finding& f : d.findings) result.diagnosis.findings.push_back(std::move(f));
    result.diagnosis.lead = std::move(d.lead);
    result.diagnosis.scope_note = std::move(d.scope_note);
  }
  return result;
}

}  // namespace flashref::verify

#include "flashref/verify/rule.hpp"

#include <sstream>

#include "flashref/verify/sum_magnitude.hpp"

namespace flashref::verify {

std::string rule_text() {
  return "pass iff max_abs_err <= k * baseline_err + floor, errors vs the gold (double); "
         "baseline = the reference backend in the candidate's precision, its backward run from "
         "the candidate's O and L when both pass; k = 2 for O, L and 3 for dQ, dK, dV; "
         "floor = 2 * rounding step of the output dtype at max|gold| (L: f32) + 3 * max sigma "
         "of the float32 rounding noise of the scores (and of dP - D for dQ, dK) and of the "
         "16-bit or TF32 operands P~ (O) and dS (dQ, dK) (with --three-tf32, of every "
         "product's own error) + 2^-23 * max "
         "over elements of the sum of the magnitudes of the terms each output adds up; any NaN/inf "
         "the gold lacks, or a gold -inf not matched, fails";
}

double rule_k(TensorId t) {
  return t == TensorId::O || t == TensorId::L ? 2.0 : 3.0;
}

double rule_floor(DType output_dtype, double max_abs_gold) {
  return 2.0 * rounding_step(output_dtype, max_abs_gold);
}

double rule_noise_floor(double max_sigma) {
  return kNoiseSigmas * max_sigma;
}

namespace {

std::string nonfinite_summary(const ErrorStats& s) {
  std::ostringstream o;
  const char* sep = "";
  auto item = [&](std::int64_t n, const char* what) {
    if (n == 0) return;
    o << sep << n << " " << what;
    sep = ", ";
  };
  item(s.nan, "NaN");
  item(s.pos_inf, "+inf");
  item(s.neg_inf, "-inf");
  if (s.nan + s.pos_inf + s.neg_inf > 0) o << " where the gold differs";
  if (s.missed_gold_nonfinite > 0) {
    o << sep << s.missed_gold_nonfinite
      << " finite where the gold is -inf/inf (a fully masked row must give L = -inf)";
  }
  return o.str();
}

}  // namespace

RuleCheck apply_rule(TensorId tensor, DType output_dtype, const ErrorStats& candidate,
                     const ErrorStats& baseline, double noise_sigma, double sum_magnitude) {
  RuleCheck r;
  r.tensor = tensor;
  r.k = rule_k(tensor);
  r.floor_rounding = rule_floor(output_dtype, candidate.max_abs_gold);
  r.noise_sigma = noise_sigma;
  r.floor_noise = rule_noise_floor(noise_sigma);
  r.sum_magnitude = sum_magnitude;
  r.floor_cancellation = cancellation_floor(sum_magnitude);
  r.floor = r.floor_rounding + r.floor_noise + r.floor_cancellation;
  r.baseline_err = baseline.max_abs;
  r.candidate_err = candidate.max_abs;
  r.limit = r.k * r.baseline_err + r.floor;
  r.ratio = r.candidate_err / r.limit;
  std::ostringstream why;
  if (candidate.nonfinite_mismatches() > 0) {
    why << nonfinite_summary(candidate);
  } else if (baseline.nonfinite_mismatches() > 0) {
    why << "the baseline itself has " << nonfinite_summary(baseline)
        << ": the limit cannot be trusted";
  } else if (!(r.candidate_err <= r.limit)) {
    why << "max abs err " << r.candidate_err << " > limit " << r.limit << " (" << r.k << " * "
        << r.baseline_err << " + " << r.floor_rounding << " rounding + " << r.floor_noise
        << " noise + " << r.floor_cancellation << " cancellation)";
  }
  r.reason = why.str();
  r.pass = r.reason.empty();
  return r;
}

}  // namespace flashref::verify

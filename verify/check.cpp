// check_candidate: the rule, then the diagnosis, for tensors another kernel produced.
#include "flashref/verify/check.hpp"

#include <memory>
#include <optional>

#include "flashref/backend.hpp"
#include "flashref/error.hpp"
#include "flashref/verify/runner.hpp"

namespace flashref::verify {

bool CheckResult::passed() const {
  for (const TensorReport& t : tensors) {
    if (!t.rule.pass) return false;
  }
  return true;
}

CheckResult check_candidate(const ProblemData& data, const TensorSet& candidate,
                            std::int64_t tile_q, std::int64_t tile_k) {
  const Problem& p = data.problem;
  validate(p);
  const bool backward =
      candidate.has(TensorId::dQ) || candidate.has(TensorId::dK) || candidate.has(TensorId::dV);
  if (backward && data.dO.empty()) {
    throw InvalidArgument("--do", "checking dQ, dK or dV needs dO, the gradient of the output");
  }
  // Shapes first, so a wrong file fails before the gold is computed.
  require_canonical_shapes(candidate, p, "candidate");

  const TensorSet gold = compute_gold(data, backward);
  const ScoreNoise noise = score_rounding_noise(data, backward);
  RunOptions run;
  run.backward = backward;
  const std::unique_ptr<Backend> reference = make_backend("reference");
  const RunOutputs baseline = run_backend(*reference, data, run);

  CheckResult result;
  result.tensors =
      judge(p, kForwardTensors, candidate, baseline.values, gold, noise, tile_q, tile_k);
  if (backward) {
    // Gradients are judged given the O and L the candidate's backward received.
    const GradientBaseline choice = choose_gradient_baseline(result.tensors, "the candidate");
    result.backward_inputs = choice.inputs;
    result.backward_inputs_reason = choice.reason;
    std::optional<RunOutputs> given;
    if (choice.inputs == BackwardInputs::candidate) {
      // O and L as the backward would receive them: stored in their dtypes.
      const HostTensor o = HostTensor::from_canonical(candidate.at(TensorId::O), p.dtype);
      const xt::xtensor<float, 3> lse = xt::cast<float>(candidate.at(TensorId::L));
      given = run_backward_from(*reference, data, run, o, lse);
    }
    for (TensorReport& t :
         judge(p, kBackwardTensors, candidate, given ? given->values : baseline.values, gold, noise,
               tile_q, tile_k)) {
      result.tensors.push_back(std::move(t));
    }
  }
  result.diagnosis = diagnosis::diagnose(data, candidate, result.tensors, gold);
  return result;
}

}  // namespace flashref::verify

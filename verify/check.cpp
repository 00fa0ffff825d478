// check_candidate: the rule, then the diagnosis, for tensors another kernel produced.
#include <memory>
#include <optional>

#include "flashref/backend.hpp"
#include "flashref/error.hpp"
#include "flashref/verify/diagnosis/diagnose.hpp"
#include "flashref/verify/runner.hpp"

namespace flashref::verify {

bool CheckResult::passed() const {
  for (const TensorReport& t : tensors) {
    if (!t.rule.pass) return false;
  }
  return true;
}

namespace {

const xt::xtensor<double, 4>& pick(const GoldOutputs& g, TensorId id) {
  return id == TensorId::O ? g.O : id == TensorId::dQ ? g.dQ : id == TensorId::dK ? g.dK : g.dV;
}
const xt::xtensor<double, 4>& pick(const RunOutputs& r, TensorId id) {
  return id == TensorId::O ? r.O : id == TensorId::dQ ? r.dQ : id == TensorId::dK ? r.dK : r.dV;
}

// The candidate's O as the backward would receive it: stored in the problem's dtype.
HostTensor stored_o(const Problem& p, const xt::xarray<double>& O) {
  HostTensor o(p.dtype, Layout::bhsd, p.B, p.H, p.S_q, p.d);
  for (std::int64_t b = 0; b < p.B; ++b)
    for (std::int64_t h = 0; h < p.H; ++h)
      for (std::int64_t s = 0; s < p.S_q; ++s)
        for (std::int64_t i = 0; i < p.d; ++i) {
          o.set(b, h, s, i, static_cast<float>(O(b, h, s, i)));
        }
  return o;
}

}  // namespace

CheckResult check_candidate(const ProblemData& data, const CandidateSet& candidate,
                            std::int64_t tile_q, std::int64_t tile_k) {
  const Problem& p = data.problem;
  validate(p);
  const bool backward = candidate.count(TensorId::dQ) + candidate.count(TensorId::dK) +
                            candidate.count(TensorId::dV) >
                        0;
  if (backward && data.dO.empty()) {
    throw InvalidArgument("--do", "checking dQ, dK or dV needs dO, the gradient of the output");
  }
  // Shapes first, so a wrong file fails before the gold is computed.
  std::vector<CandidateTensor> tensors;
  for (const auto& [id, values] : candidate) tensors.push_back({id, values});
  diagnose(data, tensors, GoldOutputs{});  // checks shapes; nothing has failed yet

  const GoldOutputs gold = compute_gold(data, backward);
  const ScoreNoise noise = score_rounding_noise(data, backward);
  RunOptions run;
  run.backward = backward;
  const std::unique_ptr<Backend> reference = make_backend("reference");
  const RunOutputs baseline = run_backend(*reference, data, run);

  CheckResult result;
  auto judge = [&](CandidateTensor& c, const RunOutputs& base) {
    TensorReport r;
    r.tensor = c.id;
    const SeqAxis axis = seq_axis(c.id);
    const std::int64_t tile = axis == SeqAxis::query ? tile_q : tile_k;
    if (c.id == TensorId::L) {
      const xt::xtensor<double, 3> values = c.values;
      r.candidate = compute_stats(values, gold.L, tile);
      r.baseline = compute_stats(base.L, gold.L, tile);
    } else {
      const xt::xtensor<double, 4> values = c.values;
      r.candidate = compute_stats(values, pick(gold, c.id), axis, tile);
      r.baseline = compute_stats(pick(base, c.id), pick(gold, c.id), axis, tile);
    }
    r.rule =
        apply_rule(c.id, output_dtype(c.id, p), r.candidate, r.baseline, noise.max_sigma(c.id));
    c.failed = !r.rule.pass;
    c.limit = r.rule.limit;
    c.baseline_rel_l2 = r.baseline.rel_l2;
    result.tensors.push_back(std::move(r));
  };
  // `tensors` is in TensorId order: O and L are judged before the gradients.
  std::optional<RunOutputs> given;
  for (CandidateTensor& c : tensors) {
    const bool gradient = c.id != TensorId::O && c.id != TensorId::L;
    if (gradient && result.backward_inputs == BackwardInputs::none) {
      const std::string failed = failed_forward_tensors(result.tensors);
      if (candidate.count(TensorId::O) == 0 || candidate.count(TensorId::L) == 0) {
        result.backward_inputs = BackwardInputs::baseline;
        result.backward_inputs_reason = "the candidate's O and L were not both given";
      } else if (!failed.empty()) {
        result.backward_inputs = BackwardInputs::baseline;
        result.backward_inputs_reason = "the candidate's " + failed + " failed";
      } else {
        // Gradients are judged given the O and L the candidate's backward received.
        result.backward_inputs = BackwardInputs::candidate;
        const xt::xtensor<float, 3> lse = xt::cast<float>(candidate.at(TensorId::L));
        given =
            run_backward_from(*reference, data, run, stored_o(p, candidate.at(TensorId::O)), lse);
      }
    }
    judge(c, given ? *given : baseline);
  }
  result.diagnosis = diagnose(data, tensors, gold);
  return result;
}

}  // namespace flashref::verify

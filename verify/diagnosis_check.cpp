// check_candidate: the rule, then the diagnosis, for tensors another kernel produced.
#include <memory>

#include "flashref/backend.hpp"
#include "flashref/error.hpp"
#include "flashref/verify/diagnosis.hpp"
#include "flashref/verify/runner.hpp"

namespace flashref::verify {

bool CheckResult::passed() const {
  for (const TensorReport& t : tensors) {
    if (!t.rule.pass) return false;
  }
  return true;
}

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
  RunOptions run;
  run.backward = backward;
  const RunOutputs baseline = run_backend(*make_backend("reference"), data, run);

  CheckResult result;
  for (CandidateTensor& c : tensors) {
    TensorReport r;
    r.tensor = c.id;
    const SeqAxis axis = seq_axis(c.id);
    const std::int64_t tile = axis == SeqAxis::query ? tile_q : tile_k;
    if (c.id == TensorId::L) {
      const xt::xtensor<double, 3> values = c.values;
      r.candidate = compute_stats(values, gold.L, tile);
      r.baseline = compute_stats(baseline.L, gold.L, tile);
    } else {
      const xt::xtensor<double, 4> values = c.values;
      const auto pick = [&](const GoldOutputs& g) -> const xt::xtensor<double, 4>& {
        return c.id == TensorId::O    ? g.O
               : c.id == TensorId::dQ ? g.dQ
               : c.id == TensorId::dK ? g.dK
                                      : g.dV;
      };
      const xt::xtensor<double, 4>& base = c.id == TensorId::O    ? baseline.O
                                           : c.id == TensorId::dQ ? baseline.dQ
                                           : c.id == TensorId::dK ? baseline.dK
                                                                  : baseline.dV;
      r.candidate = compute_stats(values, pick(gold), axis, tile);
      r.baseline = compute_stats(base, pick(gold), axis, tile);
    }
    r.rule = apply_rule(c.id, output_dtype(c.id, p), r.candidate, r.baseline);
    c.failed = !r.rule.pass;
    c.limit = r.rule.limit;
    c.baseline_rel_l2 = r.baseline.rel_l2;
    result.tensors.push_back(std::move(r));
  }
  result.diagnosis = diagnose(data, tensors, gold);
  return result;
}

}  // namespace flashref::verify

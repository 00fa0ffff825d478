#include "flashref/verify/verification.hpp"

#include <exception>
#include <memory>
#include <optional>

#include "flashref/error.hpp"

namespace flashref::verify {

bool BackendReport::passed() const {
  if (!available || !error.empty()) return false;
  for (const TensorReport& t : tensors) {
    if (!t.rule.pass) return false;
  }
  return true;
}

bool VerifyReport::passed() const {
  for (const BackendReport& b : backends) {
    if (b.available && !b.passed()) return false;
  }
  return true;
}

bool VerifyReport::any_available() const {
  for (const BackendReport& b : backends) {
    if (b.available) return true;
  }
  return false;
}

std::string_view backward_inputs_name(BackwardInputs b) {
  switch (b) {
    case BackwardInputs::none:
      return "none";
    case BackwardInputs::candidate:
      return "candidate";
    case BackwardInputs::baseline:
      return "baseline";
  }
  return "none";
}

namespace {

TensorReport judge_one(TensorId id, const Problem& p, const ScoreNoise& noise,
                       const ErrorStats& candidate, const ErrorStats& baseline) {
  TensorReport r;
  r.tensor = id;
  r.candidate = candidate;
  r.baseline = baseline;
  r.rule = apply_rule(id, output_dtype(id, p), candidate, baseline, noise.max_sigma(id));
  return r;
}

void require_tiles(const VerifyCase& c) {
  if (c.tile_q < 0 || c.tile_k < 0) {
    throw InvalidArgument("--tile",
                          "tile sizes must be >= 1 (or 0 for the backend's default), got " +
                              std::to_string(c.tile_q) + "," + std::to_string(c.tile_k));
  }
  if (c.threads < 0) {
    throw InvalidArgument("--threads", "must be >= 0, got " + std::to_string(c.threads));
  }
}

}  // namespace

std::vector<TensorReport> judge_forward(const Problem& p, const GoldOutputs& gold,
                                        const ScoreNoise& noise, const RunOutputs& baseline,
                                        const RunOutputs& candidate, std::int64_t tile_q) {
  std::vector<TensorReport> out;
  out.push_back(judge_one(TensorId::O, p, noise,
                          compute_stats(candidate.O, gold.O, SeqAxis::query, tile_q),
                          compute_stats(baseline.O, gold.O, SeqAxis::query, tile_q)));
  out.push_back(judge_one(TensorId::L, p, noise, compute_stats(candidate.L, gold.L, tile_q),
                          compute_stats(baseline.L, gold.L, tile_q)));
  return out;
}

std::vector<TensorReport> judge_backward(const Problem& p, const GoldOutputs& gold,
                                         const ScoreNoise& noise, const RunOutputs& baseline,
                                         const RunOutputs& candidate, std::int64_t tile_q,
                                         std::int64_t tile_k) {
  std::vector<TensorReport> out;
  if (!(gold.has_backward && baseline.has_backward && candidate.has_backward)) return out;
  out.push_back(judge_one(TensorId::dQ, p, noise,
                          compute_stats(candidate.dQ, gold.dQ, SeqAxis::query, tile_q),
                          compute_stats(baseline.dQ, gold.dQ, SeqAxis::query, tile_q)));
  out.push_back(judge_one(TensorId::dK, p, noise,
                          compute_stats(candidate.dK, gold.dK, SeqAxis::key, tile_k),
                          compute_stats(baseline.dK, gold.dK, SeqAxis::key, tile_k)));
  out.push_back(judge_one(TensorId::dV, p, noise,
                          compute_stats(candidate.dV, gold.dV, SeqAxis::key, tile_k),
                          compute_stats(baseline.dV, gold.dV, SeqAxis::key, tile_k)));
  return out;
}

std::string failed_forward_tensors(const std::vector<TensorReport>& reports) {
  std::string failed;
  for (const TensorReport& t : reports) {
    if ((t.tensor == TensorId::O || t.tensor == TensorId::L) && !t.rule.pass) {
      failed += (failed.empty() ? "" : " and ") + std::string(tensor_name(t.tensor));
    }
  }
  return failed;
}

VerifyReport run_verification(const VerifyCase& c, const std::vector<std::string>& backends) {
  validate(c.problem);
  require_tiles(c);
  std::vector<std::unique_ptr<Backend>> made;
  std::vector<const Backend*> candidates;
  for (const std::string& name : backends) {
    made.push_back(make_backend(name));  // InvalidArgument for an unknown name
    candidates.push_back(made.back().get());
  }
  return verify_backends(c, candidates);
}

VerifyReport verify_backends(const VerifyCase& c, const std::vector<const Backend*>& candidates) {
  validate(c.problem);
  require_tiles(c);
  VerifyReport report;
  report.verify_case = c;
  for (const Backend* candidate : candidates) {
    BackendReport b;
    b.backend = candidate->name();
    const Support s = candidate->supports(c.problem);
    b.available = s.ok;
    b.unavailable_reason = s.reason;
    report.backends.push_back(std::move(b));
  }
  if (!report.any_available()) return report;

  const ProblemData data = make_problem_data(c.problem, input_options(c));
  const GoldOutputs gold = compute_gold(data, c.backward);
  const ScoreNoise noise = score_rounding_noise(data, c.backward);
  RunOptions run;
  run.exec = exec_options(c);
  run.layout = c.layout;
  run.backward = c.backward;
  // The baseline is the reference backend in the candidate's precision.
  const std::unique_ptr<Backend> reference = make_backend("reference");
  const RunOutputs baseline = run_backend(*reference, data, run);

  const std::int64_t tile_q = report_tile_q(c), tile_k = report_tile_k(c);
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    BackendReport& b = report.backends[i];
    if (!b.available) continue;
    try {
      std::optional<RunOutputs> own;
      if (b.backend != "reference") own = run_backend(*candidates[i], data, run);
      const RunOutputs& candidate = own ? *own : baseline;
      b.tensors = judge_forward(c.problem, gold, noise, baseline, candidate, tile_q);
      if (c.backward) {
        // Gradients are judged given the O and L the candidate's backward received, when they
        // passed: the baseline backward runs from them. The reference candidate's O and L are
        // the baseline's, so its own backward already did.
        const std::string failed = failed_forward_tensors(b.tensors);
        std::optional<RunOutputs> given;
        if (failed.empty()) {
          b.backward_inputs = BackwardInputs::candidate;
          if (own) given = run_backward_from(*reference, data, run, own->o, own->lse);
        } else {
          b.backward_inputs = BackwardInputs::baseline;
          b.backward_inputs_reason = b.backend + "'s " + failed + " failed";
        }
        for (TensorReport& t : judge_backward(c.problem, gold, noise, given ? *given : baseline,
                                              candidate, tile_q, tile_k)) {
          b.tensors.push_back(std::move(t));
        }
      }
    } catch (const std::exception& e) {
      b.error = e.what();
    }
  }
  return report;
}

}  // namespace flashref::verify

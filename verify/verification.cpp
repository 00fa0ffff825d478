#include "flashref/verify/verification.hpp"

#include <algorithm>
#include <exception>
#include <memory>
#include <optional>

#include "flashref/error.hpp"
#include "flashref/ring/ring_backend.hpp"
#include "flashref/verify/nonfinite.hpp"

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

// "O", "L", "O and L": the forward tensors among `reports` that failed; empty when none did.
std::string failed_forward_tensors(const std::vector<TensorReport>& reports) {
  std::string failed;
  for (const TensorReport& t : reports) {
    if ((t.tensor == TensorId::O || t.tensor == TensorId::L) && !t.rule.pass) {
      failed += (failed.empty() ? "" : " and ") + std::string(tensor_name(t.tensor));
    }
  }
  return failed;
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
  if (c.ranks < 0 || c.ranks > kMaxRanks) {
    throw InvalidArgument("--ranks", "must be from 1 to " + std::to_string(kMaxRanks) +
                                         " (or 0: no ring), got " + std::to_string(c.ranks));
  }
}

}  // namespace

TensorReport judge(TensorId id, const Problem& p, const xt::xarray<double>& candidate,
                   const xt::xarray<double>& baseline, const xt::xarray<double>& gold,
                   double noise_sigma, std::int64_t tile, DType lse_dtype,
                   double sum_magnitude) {
  TensorReport r;
  r.tensor = id;
  r.candidate = compute_stats(id, candidate, gold, tile);
  r.baseline = compute_stats(id, baseline, gold, tile);
  r.rule = apply_rule(id, output_dtype(id, p, lse_dtype), r.candidate, r.baseline, noise_sigma,
                      sum_magnitude);
  return r;
}

std::vector<TensorReport> judge(const Problem& p, std::span<const TensorId> ids,
                                const TensorSet& candidate, const TensorSet& baseline,
                                const TensorSet& gold, const ScoreNoise& noise,
                                const SumMagnitudes& sums, std::int64_t tile_q,
                                std::int64_t tile_k, DType lse_dtype) {
  std::vector<TensorReport> out;
  for (TensorId id : ids) {
    if (!candidate.has(id)) continue;
    const std::int64_t tile = seq_axis(id) == SeqAxis::query ? tile_q : tile_k;
    out.push_back(judge(id, p, candidate.at(id), baseline.at(id), gold.at(id), noise.max_sigma(id),
                        tile, lse_dtype, sums.max_magnitude(id)));
  }
  return out;
}

GradientBaseline choose_gradient_baseline(const std::vector<TensorReport>& forward,
                                          const std::string& candidate) {
  const auto judged = [&](TensorId id) {
    return std::any_of(forward.begin(), forward.end(),
                       [id](const TensorReport& t) { return t.tensor == id; });
  };
  GradientBaseline choice;
  if (!judged(TensorId::O) || !judged(TensorId::L)) {
    choice.inputs = BackwardInputs::baseline;
    choice.reason = candidate + "'s O and L were not both given";
    return choice;
  }
  const std::string failed = failed_forward_tensors(forward);
  if (!failed.empty()) {
    choice.inputs = BackwardInputs::baseline;
    choice.reason = candidate + "'s " + failed + " failed";
    return choice;
  }
  choice.inputs = BackwardInputs::candidate;
  return choice;
}

VerifyReport run_verification(const VerifyCase& c, const std::vector<std::string>& backends) {
  validate(c.problem);
  require_tiles(c);
  std::vector<std::unique_ptr<Backend>> made;
  std::vector<const Backend*> candidates;
  for (const std::string& name : backends) {
    made.push_back(make_backend(name));  // InvalidArgument for an unknown name
    // With ranks, the backend runs as the ranks of an in-process ring (host backends only).
    if (c.ranks > 0) made.back() = ring::make_ring_backend(std::move(made.back()), c.ranks);
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
  const TensorSet gold = compute_gold(data, c.backward);
  const ScoreNoise noise = score_rounding_noise(
      data, c.backward, product_operand_rounding(c.problem.dtype, c.allow_tf32));
  const SumMagnitudes sums = sum_magnitudes(data, c.backward);
  report.input_notes = input_notes(data, sums.max_abs_score);
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
      if (c.lse_dtype != DType::f32) {
        // The backend's L as a kernel storing it in lse_dtype would hold it, and its backward
        // run from that L.
        RunOptions forward_only = run;
        forward_only.backward = false;
        RunOutputs f = run_backend(*candidates[i], data, forward_only);
        for (float& x : f.lse) x = round_to(c.lse_dtype, x);
        f.values[TensorId::L] = xt::cast<double>(f.lse);
        own = c.backward ? run_backward_from(*candidates[i], data, run, f.o, f.lse) : std::move(f);
      } else if (b.backend != "reference") {
        own = run_backend(*candidates[i], data, run);
      }
      const RunOutputs& candidate = own ? *own : baseline;
      b.tensors = judge(c.problem, kForwardTensors, candidate.values, baseline.values, gold, noise,
                        sums, tile_q, tile_k, c.lse_dtype);
      if (c.backward) {
        // Gradients are judged given the O and L the candidate's backward received, when they
        // passed: the baseline backward runs from them. The reference candidate's O and L are
        // the baseline's, so its own backward already did.
        const GradientBaseline choice = choose_gradient_baseline(b.tensors, b.backend);
        b.backward_inputs = choice.inputs;
        b.backward_inputs_reason = choice.reason;
        std::optional<RunOutputs> given;
        if (choice.inputs == BackwardInputs::candidate && own) {
          given = run_backward_from(*reference, data, run, own->o, own->lse);
        }
        for (TensorReport& t : judge(c.problem, kBackwardTensors, candidate.values,
                                     given ? given->values : baseline.values, gold, noise, sums, tile_q,
                                     tile_k, c.lse_dtype)) {
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

#include "fuzz_session.hpp"

#include <memory>
#include <sstream>

#include "flashref/backend.hpp"
#include "flashref/cpu/backend.hpp"
#include "flashref/ring/ring_backend.hpp"

namespace flashref::cli {

std::string failure_summary(const verify::VerifyReport& report) {
  std::ostringstream o;
  for (const verify::BackendReport& b : report.backends) {
    if (!b.error.empty()) o << b.backend << " threw: " << b.error << "\n";
    for (const verify::TensorReport& t : b.tensors) {
      if (!t.rule.pass) o << verify::tensor_name(t.tensor) << ": " << t.rule.reason << "\n";
    }
  }
  return o.str();
}

FuzzResult run_fuzz(const FuzzSettings& s,
                    const std::function<void(const FuzzProgress&)>& on_progress) {
  // With planted faults, the cpu backend made with them (the command line allows them only
  // for cpu); otherwise the registry's backend of that name (an unknown name throws).
  std::unique_ptr<Backend> backend = s.planted_faults != 0
                                         ? cpu::make_backend({.faults = s.planted_faults})
                                         : make_backend(s.backend);
  // --ranks: the same backend as the ranks of an in-process ring (docs/ring.md).
  if (s.ranks > 0) backend = ring::make_ring_backend(std::move(backend), s.ranks);
  FuzzResult result;
  const auto judge = [&](verify::VerifyCase& c) -> verify::CaseOutcome {
    c.allow_tf32 = s.precision.allow_tf32;
    c.deterministic = s.deterministic;
    c.lse_dtype = s.precision.lse_dtype;
    c.ranks = s.ranks;  // so the reproduce command runs the ring again
    const Support support = backend->supports(c.problem);
    if (!support.ok) return {verify::CaseOutcome::Kind::unsupported, support.reason};
    verify::VerifyReport report = verify::verify_backends(c, {backend.get()});
    if (report.passed()) return {};
    // The driver's last failing call is the minimal case: keep its report.
    verify::CaseOutcome outcome{verify::CaseOutcome::Kind::fail, failure_summary(report)};
    result.minimal_report = std::move(report);
    return outcome;
  };
  const verify::FuzzLimits limits{s.cases, s.seconds, s.seed, s.interrupted};
  verify::FuzzDriverResult r =
      verify::run_fuzz_cases(limits, s.bounds, judge, "backend '" + s.backend + "'", on_progress);
  result.progress = r.progress;
  result.passed = r.passed;
  result.minimal = std::move(r.minimal);
  result.failure = std::move(r.failure);
  result.gave_up = std::move(r.gave_up);
  result.interrupted = r.interrupted;
  return result;
}

}  // namespace flashref::cli

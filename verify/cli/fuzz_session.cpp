#include "fuzz_session.hpp"

#include <chrono>
#include <memory>
#include <sstream>
#include <unordered_map>

#include <rapidcheck.h>
#include <rapidcheck/detail/TestListener.h>

#include "flashref/backend.hpp"
#include "flashref/cpu/backend.hpp"
#include "flashref/ring/ring_backend.hpp"

namespace flashref::cli {
namespace {

using Clock = std::chrono::steady_clock;

// Time-limited runs go in batches of this many cases, each a RapidCheck run of its own (with
// its own seed derived from --seed), so the clock is looked at between batches.
constexpr int kBatchCases = 25;

// SplitMix64: one well-mixed seed per batch from the user's seed.
std::uint64_t batch_seed(std::uint64_t seed, std::uint64_t batch) {
  std::uint64_t x = seed + 0x9e3779b97f4a7c15ull * (batch + 1);
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

class ProgressListener : public rc::detail::TestListener {
 public:
  ProgressListener(FuzzProgress& progress, Clock::time_point start,
                   const std::function<void(const FuzzProgress&)>& report)
      : progress_(progress), start_(start), report_(report) {}

  void onTestCaseFinished(const rc::detail::CaseDescription&) override { tick(); }
  void onShrinkTried(const rc::detail::CaseDescription&, bool accepted) override {
    progress_.shrinking = true;
    ++progress_.shrink_tries;
    if (accepted) ++progress_.shrink_steps;
    tick();
  }
  void onTestFinished(const rc::detail::TestMetadata&, const rc::detail::TestResult&) override {}

 private:
  void tick() {
    progress_.elapsed_s = std::chrono::duration<double>(Clock::now() - start_).count();
    if (report_) report_(progress_);
  }
  FuzzProgress& progress_;
  Clock::time_point start_;
  const std::function<void(const FuzzProgress&)>& report_;
};

}  // namespace

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
  const Clock::time_point start = Clock::now();
  const auto out_of_time = [&] {
    return s.seconds > 0.0 &&
           std::chrono::duration<double>(Clock::now() - start).count() >= s.seconds;
  };
  FuzzResult result;
  FuzzProgress& progress = result.progress;
  const rc::Gen<verify::VerifyCase> cases = verify::gen_case(s.bounds);
  const auto interrupted = [&] {
    if (!result.interrupted && s.interrupted && s.interrupted()) result.interrupted = true;
    return result.interrupted;
  };
  bool failed = false;  // once a case failed, shrinking runs to the end whatever the clock says
  std::string last_unsupported;

  const auto property = [&] {
    verify::VerifyCase c = *cases;
    c.allow_tf32 = s.precision.allow_tf32;
    c.lse_dtype = s.precision.lse_dtype;
    c.ranks = s.ranks;  // so the reproduce command runs the ring again
    // Interrupted: every remaining case (and shrink candidate) passes at once, so RapidCheck
    // ends quickly and a failure keeps the smallest case shrunk so far.
    if (interrupted()) return;
    if (!failed && (out_of_time() || (s.cases > 0 && progress.cases >= s.cases))) return;
    const Support support = backend->supports(c.problem);
    if (!support.ok) {
      ++progress.unsupported;
      last_unsupported = support.reason;
      RC_DISCARD("unsupported: " + support.reason);
    }
    if (!failed) ++progress.cases;
    verify::VerifyReport report = verify::verify_backends(c, {backend.get()});
    if (!report.passed()) {
      if (!failed) progress.failures = 1;
      failed = true;
      // Shrinking accepts every failing candidate it tries, so the last failure seen is the
      // minimal one RapidCheck reports.
      result.minimal = c;
      result.failure = failure_summary(report);
      result.minimal_report = std::move(report);
      RC_FAIL(result.failure);
    }
  };

  ProgressListener listener(progress, start, on_progress);
  rc::detail::TestMetadata metadata;
  metadata.id = metadata.description = "flashref fuzz " + s.backend;
  for (std::uint64_t batch = 0;; ++batch) {
    rc::detail::TestParams params;
    params.seed = s.seconds > 0.0 ? batch_seed(s.seed, batch) : s.seed;
    params.maxSuccess = s.seconds > 0.0 ? kBatchCases : static_cast<int>(s.cases);
    params.maxSize = 100;
    // An explicit (empty) reproduce map: the shorter overloads read RapidCheck's global
    // configuration, which prints "Using configuration" and obeys RC_PARAMS instead of us.
    const std::unordered_map<std::string, rc::detail::Reproduce> no_reproduce;
    const rc::detail::TestResult r = rc::detail::checkProperty(
        rc::detail::toProperty(property), metadata, params, listener, no_reproduce);
    if (r.is<rc::detail::GaveUpResult>()) {
      // RapidCheck's own description is the discard's source location; say what happened.
      result.gave_up = "backend '" + s.backend + "' could not run " +
                       std::to_string(progress.unsupported) + " of the " +
                       std::to_string(progress.unsupported + progress.cases) +
                       " problems drawn (the last: " + last_unsupported + ")";
      break;
    }
    if (r.is<rc::detail::Error>()) {
      result.gave_up = r.get<rc::detail::Error>().description;
      break;
    }
    if (failed || interrupted() || s.seconds <= 0.0 || out_of_time()) break;
    if (s.cases > 0 && progress.cases >= s.cases) break;
  }
  result.passed = !failed && result.gave_up.empty() && !result.interrupted;
  progress.elapsed_s = std::chrono::duration<double>(Clock::now() - start).count();
  return result;
}

}  // namespace flashref::cli

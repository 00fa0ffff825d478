#include "flashref/verify/fuzz_driver.hpp"

#include <chrono>
#include <unordered_map>

#include <rapidcheck.h>
#include <rapidcheck/detail/TestListener.h>

namespace flashref::verify {
namespace {

using Clock = std::chrono::steady_clock;

// Time-limited runs go in batches of this many cases, each a RapidCheck run of its own (with
// its own seed derived from the user's seed), so the clock is looked at between batches.
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

FuzzDriverResult run_fuzz_cases(const FuzzLimits& s, const CaseBounds& bounds,
                                const std::function<CaseOutcome(VerifyCase&)>& judge,
                                const std::string& who,
                                const std::function<void(const FuzzProgress&)>& on_progress) {
  const Clock::time_point start = Clock::now();
  const auto out_of_time = [&] {
    return s.seconds > 0.0 &&
           std::chrono::duration<double>(Clock::now() - start).count() >= s.seconds;
  };
  FuzzDriverResult result;
  FuzzProgress& progress = result.progress;
  const rc::Gen<VerifyCase> cases = gen_case(bounds);
  const auto interrupted = [&] {
    if (!result.interrupted && s.interrupted && s.interrupted()) result.interrupted = true;
    return result.interrupted;
  };
  bool failed = false;  // once a case failed, shrinking runs to the end whatever the clock says
  std::string last_unsupported;

  const auto property = [&] {
    VerifyCase c = *cases;
    // Interrupted: every remaining case (and shrink candidate) passes at once, so RapidCheck
    // ends quickly and a failure keeps the smallest case shrunk so far.
    if (interrupted()) return;
    if (!failed && (out_of_time() || (s.cases > 0 && progress.cases >= s.cases))) return;
    CaseOutcome outcome = judge(c);
    if (outcome.kind == CaseOutcome::Kind::unsupported) {
      ++progress.unsupported;
      last_unsupported = outcome.reason;
      RC_DISCARD("unsupported: " + outcome.reason);
    }
    if (!failed) ++progress.cases;
    if (outcome.kind == CaseOutcome::Kind::fail) {
      if (!failed) progress.failures = 1;
      failed = true;
      // Shrinking accepts every failing candidate it tries, so the last failure seen is the
      // minimal one RapidCheck reports.
      result.minimal = c;
      result.failure = outcome.reason;
      RC_FAIL(outcome.reason);
    }
  };

  ProgressListener listener(progress, start, on_progress);
  rc::detail::TestMetadata metadata;
  metadata.id = metadata.description = "flashref fuzz " + who;
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
      result.gave_up = who + " could not run " + std::to_string(progress.unsupported) +
                       " of the " + std::to_string(progress.unsupported + progress.cases) +
                       " problems drawn (the last: " + last_unsupported + ")";
      break;
    }
    if (r.is<rc::detail::Error>()) {
      result.gave_up = r.get<rc::detail::Error>().description;
      break;
    }
    if (r.is<rc::detail::FailureResult>() && !failed) {
      // The judge threw instead of returning an outcome: never a pass.
      result.gave_up = "the judge threw: " + r.get<rc::detail::FailureResult>().description;
      break;
    }
    if (failed || interrupted() || s.seconds <= 0.0 || out_of_time()) break;
    if (s.cases > 0 && progress.cases >= s.cases) break;
  }
  result.passed = !failed && result.gave_up.empty() && !result.interrupted;
  progress.elapsed_s = std::chrono::duration<double>(Clock::now() - start).count();
  return result;
}

}  // namespace flashref::verify

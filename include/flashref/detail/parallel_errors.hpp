// Exceptions and OpenMP regions. An exception must never leave an OpenMP parallel region: GCC
// wraps every region in a must-not-throw block, so an escaping exception (a std::bad_alloc of a
// per-thread scratch matrix, say) calls std::terminate with no message naming it ("terminate
// called without an active exception"). Every parallel region of reference/ and cpu/ runs its
// work through one ParallelErrors object, declared before the region:
//
//   detail::ParallelErrors errors;
//   #pragma omp parallel
//   {
//     xt::xtensor<double, 2> S;                    // empty: allocates nothing
//     errors.run([&] { S = xt::xtensor<double, 2>(shape); });  // may throw: caught, kept
//   #pragma omp for                                // every thread still reaches it
//     for (n = ...) errors.run([&] { body(S, n); });  // skipped once one piece failed
//   }
//   errors.rethrow();  // after the region: the first exception, as it was thrown
//
// Every thread must still reach every worksharing construct (an `omp for` that one thread skips
// deadlocks the others at its barrier), so run() catches around pieces of work, never around a
// construct. Once one piece has thrown, later pieces are skipped: the region ends quickly and
// its outputs are unspecified, as for any function that throws.
#pragma once

#include <atomic>
#include <exception>
#include <mutex>

namespace flashref::detail {

class ParallelErrors {
 public:
  // Runs `work` unless a piece has already failed; keeps the first exception. Never throws.
  template <class Work>
  void run(Work&& work) noexcept {
    if (failed()) return;
    try {
      work();
    } catch (...) {
      const std::lock_guard<std::mutex> lock(mutex_);
      if (!first_) first_ = std::current_exception();
      failed_.store(true, std::memory_order_release);
    }
  }

  bool failed() const noexcept { return failed_.load(std::memory_order_acquire); }

  // After the region: throws the first exception caught, if any.
  void rethrow() const {
    if (failed()) std::rethrow_exception(first_);
  }

 private:
  std::atomic<bool> failed_{false};
  std::mutex mutex_;
  std::exception_ptr first_;
};

}  // namespace flashref::detail

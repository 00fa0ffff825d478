// The "cpu" backend: validation, then Algorithm 1 (forward.cpp) or Algorithm 2 (backward*.cpp).
#include "flashref/cpu/backend.hpp"

#include <omp.h>

#include <algorithm>
#include <sstream>

#include "algorithms.hpp"
#include "flashref/cpu/faults.hpp"
#include "flashref/error.hpp"
#include "flashref/limits.hpp"

namespace flashref::cpu {
namespace {

std::uint32_t known_faults() {
  std::uint32_t all = 0;
  for (Fault f : all_faults()) all |= static_cast<std::uint32_t>(f);
  return all;
}

void validate_options(const Options& options) {
  const std::uint32_t unknown = options.faults & ~known_faults();
  if (unknown != 0) {
    std::ostringstream o;
    o << "unknown fault bits 0x" << std::hex << unknown << " (see flashref/cpu/faults.hpp)";
    throw InvalidArgument("options.faults", o.str());
  }
}

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(const Options& options) : options_(options) {}

  std::string name() const override { return "cpu"; }

  Support supports(const Problem& problem) const override {
    try {
      validate(problem);
    } catch (const InvalidArgument& e) {
      return {false, e.what()};
    }
    return {};
  }

  void forward(const ForwardParams& params) const override {
    validate(params);
    detail::run_forward(params, options_);
  }

  void backward(const BackwardParams& params) const override {
    validate(params);
    detail::run_backward(params, options_);
  }

 private:
  Options options_;
};

}  // namespace

std::unique_ptr<Backend> make_backend(const Options& options) {
  validate_options(options);
  return std::make_unique<CpuBackend>(options);
}

namespace detail {

int thread_count(const ExecutionOptions& options, std::int64_t tasks) {
  const int wanted = options.num_threads > 0 ? options.num_threads : omp_get_max_threads();
  return static_cast<int>(
      std::clamp<std::int64_t>(tasks, 1, std::clamp(wanted, 1, kMaxThreads)));
}

}  // namespace detail
}  // namespace flashref::cpu

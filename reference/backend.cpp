// The "reference" backend: the baseline (baseline.hpp) behind the Backend interface.
#include "flashref/reference/backend.hpp"

#include "baseline.hpp"
#include "flashref/error.hpp"

namespace flashref::reference {
namespace {

class ReferenceBackend final : public Backend {
 public:
  std::string name() const override { return "reference"; }
  // Naive attention has no limits of its own: whatever validate() accepts, it runs.
  Support supports(const Problem& p) const override {
    try {
      validate(p);
    } catch (const InvalidArgument& e) {
      return {false, e.what()};
    }
    return {};
  }
  void forward(const ForwardParams& p) const override { baseline_forward(p); }
  void backward(const BackwardParams& p) const override { baseline_backward(p); }
};

}  // namespace

std::unique_ptr<Backend> make_backend() {
  return std::make_unique<ReferenceBackend>();
}

}  // namespace flashref::reference

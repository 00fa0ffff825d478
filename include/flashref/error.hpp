// The one exception type for bad input. Its message always names the offending field and the
// values that made it wrong, so a user can fix the call without reading our code.
#pragma once

#include <stdexcept>
#include <string>

namespace flashref {

class InvalidArgument : public std::invalid_argument {
 public:
  // `field` is the name a user knows the value by ("params.q", "problem.H_kv", "--shape").
  InvalidArgument(std::string field, const std::string& what)
      : std::invalid_argument(field + ": " + what), field_(std::move(field)) {}
  const std::string& field() const { return field_; }

 private:
  std::string field_;
};

// A backend that cannot run a problem (for example the CUDA backend on a machine without a GPU,
// or a head dim it has no kernel for). Distinct from bad input: the input may be fine.
class Unsupported : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace flashref

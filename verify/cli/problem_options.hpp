// The problem options that several subcommands share (--shape, --heads-kv, --mask, --dtype,
// --grad-dtype, --scale, --tile, --layout, --threads, --backends), parsed into flashref types
// with errors that name the option the user typed.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#include "flashref/problem.hpp"
#include "flashref/verify/host_tensor.hpp"
#include "option_parsers.hpp"  // split_commas

namespace flashref::cli {

struct ProblemDefaults {
  std::string shape;          // "B,H,S_q,S_k,d"
  std::int64_t heads_kv = 0;  // used only when --shape is not given (then H_kv = H)
  std::string mask;
  std::string dtype;
};

class ProblemOptions {
 public:
  // Adds the options to `app`, with `defaults` shown in --help.
  void add_to(CLI::App& app, const ProblemDefaults& defaults);

  // The problem; throws InvalidArgument naming the option ("--shape", "--heads-kv", ...).
  Problem problem() const;
  std::pair<int, int> tiles() const;  // (B_q, B_k), 0 = the backend's default
  verify::Layout layout() const;
  int threads() const;  // --threads, checked: 0 (OpenMP's default) to kMaxThreads
  // The first problem option given on the command line (--shape, --heads-kv, --mask, --dtype,
  // --grad-dtype, --scale), or "" when none was: a named sweep conflicts with them.
  std::string given_problem_option() const;
  // --backends as given, or `fallback` when absent; each name checked against the build.
  std::vector<std::string> backends(const std::vector<std::string>& fallback) const;
  bool backends_given() const { return backends_opt_ != nullptr && backends_opt_->count() > 0; }

 private:
  ProblemDefaults defaults_;
  std::string shape_, mask_, dtype_, grad_dtype_, tile_, layout_ = "bshd", backends_;
  std::int64_t heads_kv_ = 0;
  double scale_ = 0.0;
  int threads_ = 0;
  CLI::Option* shape_opt_ = nullptr;
  CLI::Option* heads_kv_opt_ = nullptr;
  CLI::Option* scale_opt_ = nullptr;
  CLI::Option* mask_opt_ = nullptr;
  CLI::Option* dtype_opt_ = nullptr;
  CLI::Option* grad_dtype_opt_ = nullptr;
  CLI::Option* backends_opt_ = nullptr;
};

}  // namespace flashref::cli

// --ranks, shared by `flashref verify` and `flashref bench`: run host backends as the ranks of
// ring attention over the in-process transport (flashref/ring/ring_backend.hpp).
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "problem_options.hpp"

namespace flashref::cli {

CLI::Option* add_ranks_option(CLI::App& app, int& ranks);
// The given rank count, checked: InvalidArgument("--ranks", ...) unless 1..kMaxRanks.
int checked_ranks(int ranks);
// The backends a ring runs: the named ones, each of which must be a host backend
// (InvalidArgument("--ranks", ...) names one that is not), or by default every host backend of
// the build.
std::vector<std::string> ring_backends(const ProblemOptions& problem);

}  // namespace flashref::cli

// --ranks, shared by `flashref verify` and `flashref bench`: run backends as the ranks of
// ring attention over the in-process transport (flashref/ring/ring_backend.hpp).
#pragma once

#include <CLI/CLI.hpp>

namespace flashref::cli {

CLI::Option* add_ranks_option(CLI::App& app, int& ranks);
// The given rank count, checked: InvalidArgument("--ranks", ...) unless 1..kMaxRanks.
int checked_ranks(int ranks);

}  // namespace flashref::cli

// How subcommands plug into `flashref`: each cmd_*.cpp defines one add_* function that adds
// its subcommand (options, help) to the app and returns the action main() runs when that
// subcommand was given. main.cpp lists them.
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

namespace flashref::cli {

// Exit codes of every subcommand.
inline constexpr int kExitPass = 0;   // everything checked passed (or nothing to check)
inline constexpr int kExitFail = 1;   // a check failed
inline constexpr int kExitUsage = 2;  // bad usage or input, or a backend that cannot run

struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;
};

Command add_verify_command(CLI::App& app);
Command add_bench_command(CLI::App& app);
Command add_run_command(CLI::App& app);    // cmd_run.cpp
Command add_check_command(CLI::App& app);  // cmd_check.cpp
Command add_fuzz_command(CLI::App& app);   // cmd_fuzz.cpp
Command add_trace_command(CLI::App& app);  // cmd_trace.cpp

}  // namespace flashref::cli

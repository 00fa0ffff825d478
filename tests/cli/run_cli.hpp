// Runs the built `flashref` binary (its path comes from the build: FLASHREF_CLI) and captures
// its exit code, stdout and stderr.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace flashref::testing {

struct CliResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

inline std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// `args` is appended to the binary's path as written (a shell command line).
inline CliResult run_cli(const std::string& args) {
  static int counter = 0;
  const std::string base = ::testing::TempDir() + "flashref_cli_" + std::to_string(getpid()) + "_" +
                           std::to_string(counter++);
  const std::string command =
      std::string(FLASHREF_CLI) + " " + args + " >" + base + ".out 2>" + base + ".err";
  const int status = std::system(command.c_str());
  CliResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = slurp(base + ".out");
  r.err = slurp(base + ".err");
  std::remove((base + ".out").c_str());
  std::remove((base + ".err").c_str());
  return r;
}

inline bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

}  // namespace flashref::testing

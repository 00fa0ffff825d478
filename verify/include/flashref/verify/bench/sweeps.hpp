// Named benchmark sweeps: `flashref bench --sweep NAME` runs every point of one. To add a
// sweep, append an entry to the table in verify/sweeps.cpp.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "flashref/problem.hpp"

namespace flashref::verify {

struct SweepPoint {
  Problem problem;
  bool backward = true;  // also time backward and forward+backward
  std::string label;     // shown instead of the problem description, e.g. "S=4096 d=64"
};

struct Sweep {
  std::string name;
  std::string description;
  std::vector<std::string> backends;  // run when --backends is not given (empty: all)
  std::function<std::vector<SweepPoint>()> points;
};

const std::vector<Sweep>& sweeps();
// Throws InvalidArgument("--sweep", ...) listing the known names.
const Sweep& find_sweep(std::string_view name);

}  // namespace flashref::verify

#include "ring_options.hpp"

#include "flashref/backend.hpp"
#include "flashref/error.hpp"
#include "flashref/verify/verify_case.hpp"

namespace flashref::cli {

CLI::Option* add_ranks_option(CLI::App& app, int& ranks) {
  return app.add_option(
      "--ranks", ranks,
      "run each host backend as R ranks of ring attention over the in-process transport "
      "(zigzag shards; K/V blocks passed around the ring, partial results merged by logsumexp; "
      "dK/dV sent home), 1 to " +
          std::to_string(verify::kMaxRanks));
}

int checked_ranks(int ranks) {
  if (ranks < 1 || ranks > verify::kMaxRanks) {
    throw InvalidArgument("--ranks", "must be from 1 to " + std::to_string(verify::kMaxRanks) +
                                         ", got " + std::to_string(ranks));
  }
  return ranks;
}

std::vector<std::string> ring_backends(const ProblemOptions& problem) {
  std::vector<std::string> host;
  for (const std::string& name : problem.backends(backend_names())) {
    if (make_backend(name)->memory_space() == MemorySpace::host) {
      host.push_back(name);
    } else if (problem.backends_given()) {
      throw InvalidArgument("--ranks",
                            "the in-process ring runs host backends (reference, cpu); '" + name +
                                "' takes device pointers");
    }
  }
  return host;
}

}  // namespace flashref::cli

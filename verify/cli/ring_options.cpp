#include "ring_options.hpp"

#include "flashref/error.hpp"
#include "flashref/verify/verify_case.hpp"

namespace flashref::cli {

CLI::Option* add_ranks_option(CLI::App& app, int& ranks) {
  return app.add_option(
      "--ranks", ranks,
      "run each backend as R ranks of ring attention over the in-process transport "
      "(zigzag shards; K/V blocks passed around the ring, partial results merged by logsumexp; "
      "dK/dV sent home; with a device backend the ranks are threads on one GPU and their buffers "
      "stay on it), 1 to " +
          std::to_string(verify::kMaxRanks));
}

int checked_ranks(int ranks) {
  if (ranks < 1 || ranks > verify::kMaxRanks) {
    throw InvalidArgument("--ranks", "must be from 1 to " + std::to_string(verify::kMaxRanks) +
                                         ", got " + std::to_string(ranks));
  }
  return ranks;
}

}  // namespace flashref::cli

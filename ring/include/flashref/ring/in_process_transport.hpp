// The in-process transport: R ranks as threads of one process, each message copied into a
// first-in first-out channel per (sender, receiver). Tests, `flashref verify --ranks R` and
// `flashref bench --ranks R` use it where there is no second GPU.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "flashref/ring/transport.hpp"

namespace flashref::ring {

// The shared state of R in-process ranks; rank(r) is the transport rank r's thread uses.
class InProcessHub {
 public:
  explicit InProcessHub(int ranks);  // throws InvalidArgument("ranks", ...) unless ranks >= 1
  ~InProcessHub();
  InProcessHub(const InProcessHub&) = delete;
  InProcessHub& operator=(const InProcessHub&) = delete;

  int size() const { return ranks_; }
  Transport& rank(int r);
  // Wakes every rank waiting in wait() with an error: called when one rank failed.
  void abort();

 private:
  friend class InProcessTransport;
  void post(int from, int to, const void* data, std::size_t bytes);
  void take(int from, int to, void* data, std::size_t bytes);

  int ranks_;
  std::mutex mutex_;
  std::condition_variable arrived_;
  bool aborted_ = false;
  std::vector<std::deque<std::vector<std::byte>>> channels_;  // [from * R + to]
  std::vector<std::unique_ptr<Transport>> transports_;
};

}  // namespace flashref::ring

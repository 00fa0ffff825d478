// The in-process transport: R ranks as threads of one process, each message copied into a
// first-in first-out channel per (sender, receiver). Tests, `flashref verify --ranks R` and
// `flashref bench --ranks R` use it where there is no second GPU. The ranks' buffers are host
// memory (host_messages()) or the memory of one GPU (device_messages(): the ranks are threads
// on that GPU, each message a device-to-device copy).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "flashref/ring/transport.hpp"

namespace flashref::ring {

// Where a message waits between its send and its receive, and how its bytes are copied: in the
// memory the ranks' buffers live in.
class MessageStore {
 public:
  virtual ~MessageStore() = default;
  // A copy of `bytes` bytes at `data`, complete when this returns.
  virtual std::shared_ptr<void> keep(const void* data, std::size_t bytes) const = 0;
  // dst = the kept copy's bytes, complete when this returns.
  virtual void deliver(void* dst, const void* kept, std::size_t bytes) const = 0;
};
// Host memory (std::memcpy).
std::shared_ptr<const MessageStore> host_messages();
// The current CUDA device's memory (cudaMemcpyAsync device to device, then a wait for it).
// Throws Unsupported when this build has no CUDA.
std::shared_ptr<const MessageStore> device_messages();

// The shared state of R in-process ranks; rank(r) is the transport rank r's thread uses.
class InProcessHub {
 public:
  // Throws InvalidArgument("ranks", ...) unless ranks >= 1, ("messages", ...) when null.
  explicit InProcessHub(int ranks, std::shared_ptr<const MessageStore> messages = host_messages());
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

  struct Message {
    std::shared_ptr<void> bytes;
    std::size_t size = 0;
  };
  int ranks_;
  std::shared_ptr<const MessageStore> messages_;
  std::mutex mutex_;
  std::condition_variable arrived_;
  bool aborted_ = false;
  std::vector<std::deque<Message>> channels_;  // [from * R + to]
  std::vector<std::unique_ptr<Transport>> transports_;
};

}  // namespace flashref::ring

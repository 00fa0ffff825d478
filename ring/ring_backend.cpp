#include "flashref/ring/ring_backend.hpp"

#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "flashref/error.hpp"
#include "flashref/ring/in_process_transport.hpp"
#include "rank_memory.hpp"

namespace flashref::ring {
namespace {

// Runs `rank_body(transport)` on R threads over one in-process hub. The first rank to fail
// aborts the hub, so no other rank waits for a message that will never come; its exception is
// the one rethrown once every thread has joined.
template <class Body>
void run_ranks(const Backend& inner, int ranks, std::shared_ptr<const MessageStore> messages,
               const Body& rank_body) {
  const std::function<void()> setup = detail::thread_setup_for(inner);
  InProcessHub hub(ranks, std::move(messages));
  std::mutex mutex;
  std::exception_ptr first;
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(ranks));
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      try {
        setup();
        rank_body(hub.rank(r));
      } catch (...) {
        {
          std::lock_guard<std::mutex> lock(mutex);
          if (!first) first = std::current_exception();
        }
        hub.abort();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  if (first) std::rethrow_exception(first);
}

class RingBackend final : public Backend {
 public:
  RingBackend(std::shared_ptr<const Backend> inner, int ranks)
      : inner_(std::move(inner)), ranks_(ranks) {}

  std::string name() const override { return ring_backend_name(ranks_, inner_->name()); }
  // The ranks' buffers live where the inner backend's do, so the whole problem's tensors do too.
  MemorySpace memory_space() const override { return inner_->memory_space(); }
  const DeviceRuntime* device_runtime() const override { return inner_->device_runtime(); }

  Support supports(const Problem& p) const override {
    if (p.placement.placed()) {
      return {false, "the ring splits a whole problem; this one is a placed block"};
    }
    Support s = inner_->supports(p);
    if (!s.ok) s.reason = inner_->name() + ": " + s.reason;
    return s;
  }

  // Each rank runs its blocks on the inner backend, whose choice depends on the head dim, the
  // dtype and the options, not on the block.
  std::string plan(const Problem& p, const ExecutionOptions& options) const override {
    const std::string inner = inner_->plan(p, options);
    return inner.empty() ? "" : "each rank on " + inner_->name() + ": " + inner;
  }

  void forward(const ForwardParams& params) const override {
    validate(params);
    require(params.problem);
    run_ranks(*inner_, ranks_, messages(),
              [&](Transport& t) { ring_forward_rank(*inner_, t, params); });
  }

  void backward(const BackwardParams& params) const override {
    validate(params);
    require(params.problem);
    run_ranks(*inner_, ranks_, messages(),
              [&](Transport& t) { ring_backward_rank(*inner_, t, params); });
  }

 private:
  void require(const Problem& p) const {
    if (p.placement.placed()) {
      throw InvalidArgument("problem.placement",
                            "the ring splits a whole problem into placed blocks; give it the "
                            "whole problem (placement all zero)");
    }
    const Support s = supports(p);
    if (!s.ok) throw Unsupported(name() + ": " + s.reason);
  }

  std::shared_ptr<const MessageStore> messages() const {
    return inner_->memory_space() == MemorySpace::device ? device_messages() : host_messages();
  }

  std::shared_ptr<const Backend> inner_;
  int ranks_;
};

}  // namespace

std::string ring_backend_name(int ranks, const std::string& inner) {
  return "ring" + std::to_string(ranks) + "(" + inner + ")";
}

std::unique_ptr<Backend> make_ring_backend(std::shared_ptr<const Backend> inner, int ranks) {
  if (!inner) throw InvalidArgument("inner", "backend is null");
  if (ranks < 1) throw InvalidArgument("ranks", "must be >= 1, got " + std::to_string(ranks));
  if (inner->memory_space() == MemorySpace::device && inner->device_runtime() == nullptr) {
    throw InvalidArgument("inner",
                          inner->name() + " takes device memory but has no device runtime");
  }
  return std::make_unique<RingBackend>(std::move(inner), ranks);
}

}  // namespace flashref::ring

#include "flashref/ring/in_process_transport.hpp"

#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

#include "flashref/error.hpp"

namespace flashref::ring {

class InProcessTransport final : public Transport {
 public:
  InProcessTransport(InProcessHub& hub, int rank) : hub_(hub), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return hub_.size(); }
  // The send is copied into the channel at once (a thread has no copy engine to overlap);
  // the receive completes in wait().
  void start_exchange(const void* send, std::size_t send_bytes, int to, void* recv,
                      std::size_t recv_bytes, int from) override {
    if (pending_) throw std::logic_error("ring transport: start_exchange before wait()");
    hub_.post(rank_, to, send, send_bytes);
    pending_ = true;
    recv_ = recv;
    recv_bytes_ = recv_bytes;
    from_ = from;
  }
  void wait() override {
    if (!pending_) return;
    pending_ = false;
    hub_.take(from_, rank_, recv_, recv_bytes_);
  }

 private:
  InProcessHub& hub_;
  int rank_;
  bool pending_ = false;
  void* recv_ = nullptr;
  std::size_t recv_bytes_ = 0;
  int from_ = 0;
};

namespace {

class HostMessages final : public MessageStore {
 public:
  std::shared_ptr<void> keep(const void* data, std::size_t bytes) const override {
    std::shared_ptr<std::byte[]> copy(new std::byte[bytes > 0 ? bytes : 1]);
    if (bytes > 0) std::memcpy(copy.get(), data, bytes);
    return copy;
  }
  void deliver(void* dst, const void* kept, std::size_t bytes) const override {
    if (bytes > 0) std::memcpy(dst, kept, bytes);
  }
};

}  // namespace

std::shared_ptr<const MessageStore> host_messages() {
  static const auto store = std::make_shared<const HostMessages>();
  return store;
}

InProcessHub::InProcessHub(int ranks, std::shared_ptr<const MessageStore> messages)
    : ranks_(ranks), messages_(std::move(messages)) {
  if (ranks < 1) throw InvalidArgument("ranks", "must be >= 1, got " + std::to_string(ranks));
  if (!messages_) throw InvalidArgument("messages", "message store is null");
  channels_.resize(static_cast<std::size_t>(ranks) * static_cast<std::size_t>(ranks));
  for (int r = 0; r < ranks; ++r)
    transports_.push_back(std::make_unique<InProcessTransport>(*this, r));
}

InProcessHub::~InProcessHub() = default;

Transport& InProcessHub::rank(int r) {
  if (r < 0 || r >= ranks_) {
    throw InvalidArgument(
        "rank", "must be in 0.." + std::to_string(ranks_ - 1) + ", got " + std::to_string(r));
  }
  return *transports_[static_cast<std::size_t>(r)];
}

void InProcessHub::abort() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    aborted_ = true;
  }
  arrived_.notify_all();
}

void InProcessHub::post(int from, int to, const void* data, std::size_t bytes) {
  Message message{messages_->keep(data, bytes), bytes};
  {
    std::lock_guard<std::mutex> lock(mutex_);
    channels_[static_cast<std::size_t>(from * ranks_ + to)].push_back(std::move(message));
  }
  arrived_.notify_all();
}

void InProcessHub::take(int from, int to, void* data, std::size_t bytes) {
  std::unique_lock<std::mutex> lock(mutex_);
  auto& channel = channels_[static_cast<std::size_t>(from * ranks_ + to)];
  arrived_.wait(lock, [&] { return aborted_ || !channel.empty(); });
  if (aborted_) throw std::runtime_error("ring transport: another rank failed");
  Message message = std::move(channel.front());
  channel.pop_front();
  lock.unlock();  // the copy out needs no lock: the message is this rank's now
  if (message.size != bytes) {
    throw std::runtime_error("ring transport: rank " + std::to_string(to) + " expected " +
                             std::to_string(bytes) + " bytes from rank " + std::to_string(from) +
                             ", got " + std::to_string(message.size));
  }
  messages_->deliver(data, message.bytes.get(), bytes);
}

}  // namespace flashref::ring

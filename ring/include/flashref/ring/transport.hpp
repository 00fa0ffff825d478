// How the ranks of a ring exchange blocks. The ring algorithm (ring_backend.hpp) talks only to
// this interface, so the same schedule runs on CPU threads (in_process_transport.hpp), on one
// GPU with device copies, or over NCCL with one process per GPU (nccl_transport.hpp).
#pragma once

#include <cstddef>

namespace flashref::ring {

class Transport {
 public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;  // 0 .. size() - 1
  virtual int size() const = 0;  // the rank count R
  // Starts sending `send_bytes` bytes at `send` to rank `to` and receiving `recv_bytes` bytes
  // from rank `from` into `recv`. It returns at once, so the caller computes while the bytes
  // travel; neither buffer may be touched until wait(). Messages between two ranks arrive in
  // the order they were sent. Sizes are agreed in advance: a receive whose size differs from
  // the matching send throws std::runtime_error naming both sizes.
  virtual void start_exchange(const void* send, std::size_t send_bytes, int to, void* recv,
                              std::size_t recv_bytes, int from) = 0;
  // Completes the exchange started last: the receive buffer then holds the bytes. Throws
  // std::runtime_error when another rank failed (the transport was aborted), so a failure on
  // one rank never leaves the others waiting.
  virtual void wait() = 0;
};

}  // namespace flashref::ring

// The NCCL transport: one process per GPU, the ring's exchanges as ncclSend/ncclRecv pairs on
// a communication stream of its own, so they overlap the kernels of the compute stream.
// Built when CMake finds NCCL (FLASHREF_NCCL, docs/cuda.md says how it is found and linked).
//
// Ordering with the compute stream is the caller's, by events and never by host waits:
//   after(compute)   the communication stream waits for what `compute` has enqueued so far
//                    (a buffer the kernels just wrote may then be sent);
//   start_exchange   enqueues the send and the receive on the communication stream;
//   wait_on(compute) the compute stream waits for the exchange (kernels that read the
//                    received block come after it), the host does not block;
//   wait()           the host blocks until the exchange is done (Transport's contract).
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <array>
#include <chrono>
#include <string>

#include "flashref/ring/transport.hpp"

namespace flashref::ring {

// ncclUniqueId as bytes: rank 0 makes it, every rank must be given the same one.
using NcclId = std::array<char, NCCL_UNIQUE_ID_BYTES>;
NcclId make_nccl_id();
// A bootstrap through a shared file: rank 0 makes the id and writes it to `path` (written
// beside it, then renamed, so no rank reads half of it); the others wait for the file, up to
// `timeout`. Throws std::runtime_error naming the path on failure or timeout.
NcclId share_nccl_id_through_file(int rank, const std::string& path, std::chrono::seconds timeout);

class NcclTransport final : public Transport {
 public:
  // Joins the communicator of `size` ranks as `rank`, on the current CUDA device, and creates
  // the communication stream. Throws std::runtime_error with NCCL's or CUDA's message.
  NcclTransport(int rank, int size, const NcclId& id);
  ~NcclTransport() override;
  NcclTransport(const NcclTransport&) = delete;
  NcclTransport& operator=(const NcclTransport&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  // Device pointers. Sizes must agree with the matching send (NCCL cannot check them).
  void start_exchange(const void* send, std::size_t send_bytes, int to, void* recv,
                      std::size_t recv_bytes, int from) override;
  void wait() override;

  cudaStream_t stream() const { return stream_; }
  void after(cudaStream_t compute);
  void wait_on(cudaStream_t compute);

 private:
  int rank_, size_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t done_ = nullptr, ready_ = nullptr;
};

}  // namespace flashref::ring

#include "nccl_transport.hpp"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <thread>

namespace flashref::ring {
namespace {

void check(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) {
    throw std::runtime_error(std::string("NCCL: ") + what + " failed: " + ncclGetErrorString(r));
  }
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    throw std::runtime_error(std::string("CUDA: ") + what + " failed: " + cudaGetErrorString(e));
  }
}

}  // namespace

NcclId make_nccl_id() {
  ncclUniqueId id;
  check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  NcclId bytes;
  std::copy(id.internal, id.internal + NCCL_UNIQUE_ID_BYTES, bytes.begin());
  return bytes;
}

NcclId share_nccl_id_through_file(int rank, const std::string& path, std::chrono::seconds timeout) {
  NcclId id{};
  if (rank == 0) {
    id = make_nccl_id();
    const std::string tmp = path + ".tmp";
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      out.write(id.data(), static_cast<std::streamsize>(id.size()));
      if (!out) throw std::runtime_error("cannot write the NCCL id to " + tmp);
    }
    std::filesystem::rename(tmp, path);
    return id;
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!std::filesystem::exists(path)) {
    if (std::chrono::steady_clock::now() > deadline) {
      throw std::runtime_error("rank " + std::to_string(rank) + ": no NCCL id appeared at " + path +
                               " within " + std::to_string(timeout.count()) + " s");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::ifstream in(path, std::ios::binary);
  in.read(id.data(), static_cast<std::streamsize>(id.size()));
  if (in.gcount() != static_cast<std::streamsize>(id.size())) {
    throw std::runtime_error("the NCCL id at " + path + " is truncated");
  }
  return id;
}

NcclTransport::NcclTransport(int rank, int size, const NcclId& id) : rank_(rank), size_(size) {
  ncclUniqueId unique;
  std::copy(id.begin(), id.end(), unique.internal);
  check(ncclCommInitRank(&comm_, size, unique, rank), "ncclCommInitRank");
  // Non-blocking with respect to the default stream: the exchange never waits for unrelated
  // work, and orders itself with the compute stream only through after() and wait_on().
  check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  check(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), "cudaEventCreate");
  check(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming), "cudaEventCreate");
}

NcclTransport::~NcclTransport() {
  // Errors here cannot be reported: the communicator is torn down as far as it goes.
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);
  if (comm_ != nullptr) ncclCommDestroy(comm_);
  if (done_ != nullptr) cudaEventDestroy(done_);
  if (ready_ != nullptr) cudaEventDestroy(ready_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

void NcclTransport::start_exchange(const void* send, std::size_t send_bytes, int to, void* recv,
                                   std::size_t recv_bytes, int from) {
  // One group: NCCL pairs this rank's send with the next rank's receive without deadlock.
  check(ncclGroupStart(), "ncclGroupStart");
  check(ncclSend(send, send_bytes, ncclUint8, to, comm_, stream_), "ncclSend");
  check(ncclRecv(recv, recv_bytes, ncclUint8, from, comm_, stream_), "ncclRecv");
  check(ncclGroupEnd(), "ncclGroupEnd");
  check(cudaEventRecord(done_, stream_), "cudaEventRecord");
}

void NcclTransport::wait() {
  check(cudaEventSynchronize(done_), "cudaEventSynchronize");
}

void NcclTransport::after(cudaStream_t compute) {
  check(cudaEventRecord(ready_, compute), "cudaEventRecord");
  check(cudaStreamWaitEvent(stream_, ready_, 0), "cudaStreamWaitEvent");
}

void NcclTransport::wait_on(cudaStream_t compute) {
  check(cudaStreamWaitEvent(compute, done_, 0), "cudaStreamWaitEvent");
}

}  // namespace flashref::ring

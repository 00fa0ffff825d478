// The NCCL transport on real GPUs, one process per GPU (scripts/device-run's ring2 step):
// passes a block around the ring R times and checks that each step brings the block of the
// expected owner, bit for bit, then times large exchanges (one way, GB/s). Exit 0 when every
// check holds, 1 when one fails, 2 on bad usage.
//
//   nccl_ring_probe --rank r --ranks R --id-file PATH [--mib N] [--iters K]
//
// Rank r uses GPU r modulo the device count. Rank 0 writes NCCL's id to PATH; run every rank
// at once (for example `for r in 0 1; do nccl_ring_probe --rank $r --ranks 2 --id-file /tmp/id &
// done`).
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "nccl_transport.hpp"

namespace {

struct Args {
  int rank = -1, ranks = 0, mib = 256, iters = 20;
  std::string id_file;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (i + 1 >= argc) throw std::invalid_argument(k + ": needs a value");
    const char* v = argv[++i];
    if (k == "--rank")
      a.rank = std::atoi(v);
    else if (k == "--ranks")
      a.ranks = std::atoi(v);
    else if (k == "--id-file")
      a.id_file = v;
    else if (k == "--mib")
      a.mib = std::atoi(v);
    else if (k == "--iters")
      a.iters = std::atoi(v);
    else
      throw std::invalid_argument("unknown option " + k);
  }
  if (a.ranks < 1) throw std::invalid_argument("--ranks: must be >= 1");
  if (a.rank < 0 || a.rank >= a.ranks) throw std::invalid_argument("--rank: must be in 0..ranks-1");
  if (a.id_file.empty()) throw std::invalid_argument("--id-file: required");
  if (a.mib < 1 || a.iters < 1) throw std::invalid_argument("--mib, --iters: must be >= 1");
  return a;
}

void cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  try {
    a = parse(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nccl_ring_probe: %s\n", e.what());
    return 2;
  }
  try {
    int devices = 0;
    cuda(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
    cuda(cudaSetDevice(a.rank % devices), "cudaSetDevice");
    const auto id =
        flashref::ring::share_nccl_id_through_file(a.rank, a.id_file, std::chrono::seconds(120));
    flashref::ring::NcclTransport t(a.rank, a.ranks, id);
    const std::size_t bytes = static_cast<std::size_t>(a.mib) << 20;
    void *cur = nullptr, *next = nullptr;
    cuda(cudaMalloc(&cur, bytes), "cudaMalloc");
    cuda(cudaMalloc(&next, bytes), "cudaMalloc");
    const int R = a.ranks, r = a.rank, to = (r + 1) % R, from = (r - 1 + R) % R;
    // Each block is filled with its owner's byte; step s must bring the block of r - s - 1.
    cuda(cudaMemset(cur, r + 1, bytes), "cudaMemset");
    int failures = 0;
    std::vector<unsigned char> head(4096), tail(4096);
    for (int step = 0; step < R; ++step) {
      t.start_exchange(cur, bytes, to, next, bytes, from);
      t.wait();
      std::swap(cur, next);
      const int owner = ((r - step - 1) % R + R) % R;
      cuda(cudaMemcpy(head.data(), cur, head.size(), cudaMemcpyDeviceToHost), "cudaMemcpy");
      cuda(cudaMemcpy(tail.data(), static_cast<char*>(cur) + bytes - tail.size(), tail.size(),
                      cudaMemcpyDeviceToHost),
           "cudaMemcpy");
      for (std::size_t i = 0; i < head.size(); ++i) {
        if (head[i] != owner + 1 || tail[i] != owner + 1) {
          std::printf("rank %d step %d: expected the block of rank %d, found byte %d\n", r, step,
                      owner, head[i] != owner + 1 ? head[i] : tail[i]);
          ++failures;
          break;
        }
      }
    }
    // Bandwidth: `iters` exchanges of the whole buffer, timed on the communication stream.
    cudaEvent_t start, stop;
    cuda(cudaEventCreate(&start), "cudaEventCreate");
    cuda(cudaEventCreate(&stop), "cudaEventCreate");
    cuda(cudaEventRecord(start, t.stream()), "cudaEventRecord");
    for (int i = 0; i < a.iters; ++i) t.start_exchange(cur, bytes, to, next, bytes, from);
    cuda(cudaEventRecord(stop, t.stream()), "cudaEventRecord");
    cuda(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0;
    cuda(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    const double gbps = static_cast<double>(bytes) * a.iters / (ms * 1e-3) / 1e9;
    std::printf(
        "{\"rank\": %d, \"ranks\": %d, \"mib\": %d, \"iters\": %d, \"ms\": %.3f, "
        "\"gb_per_s_one_way\": %.1f, \"ring_checks_failed\": %d}\n",
        r, R, a.mib, a.iters, ms, gbps, failures);
    cudaFree(cur);
    cudaFree(next);
    return failures == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nccl_ring_probe: rank %d: %s\n", a.rank, e.what());
    return 1;
  }
}

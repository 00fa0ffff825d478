// Ring attention (context parallelism) as a Backend: the problem's sequence is zigzag-sharded
// over R ranks (zigzag.hpp), each rank attends its queries to the key/value blocks that travel
// around the ring, calling the inner backend's partial attention (a placed Problem,
// problem.hpp) on each pair of chunks, and merges the partial O and L by their logsumexp
// (merge.hpp). The backward sends the key/value blocks around again with their dK and dV
// accumulators, which arrive home after R hops; D is computed on each rank from its own O
// and dO. docs/ring.md derives and draws it.
//
// This backend runs the R ranks as threads of this process over the in-process transport, so
// that `flashref verify --ranks R` judges the ring like any backend. The inner backend may be a
// host one (reference, cpu) or a device one (cuda). The ranks' buffers live where the inner
// backend's pointers do: in host memory, or on the device (the ranks are then threads on one
// GPU, their messages device-to-device copies, and every gather, merge and sum a kernel of
// ring/cuda), with no copy between the two. The result is deterministic for a fixed R: every
// sum runs in ring order.
#pragma once

#include <memory>

#include "flashref/backend.hpp"
#include "flashref/ring/transport.hpp"

namespace flashref::ring {

// `inner` must not be null, and ranks >= 1 (InvalidArgument otherwise). Named
// "ring<R>(<inner>)", e.g. "ring4(cpu)". Its memory_space() and device_runtime() are the inner
// backend's: calls on it take pointers to the whole problem's tensors in that memory (device
// pointers of the caller's current device for cuda, which every rank's thread then uses).
// Inner calls get num_threads / R OpenMP threads each (at least 1) and the caller's stream.
std::unique_ptr<Backend> make_ring_backend(std::shared_ptr<const Backend> inner, int ranks);
// The name such a backend has: "ring<ranks>(<inner>)".
std::string ring_backend_name(int ranks, const std::string& inner);

// One rank's part, for callers that run ranks themselves (one process per GPU over NCCL, or
// threads of their own): `global` holds the whole problem's tensors, of which this rank reads
// its shards and writes its rows of O and L (forward) or dQ, dK, dV (backward). Its pointers,
// and the transport's buffers, are in inner.memory_space(): host memory, or device memory of
// the current device (the NCCL transport's case), where the rank's buffers are allocated
// through inner.device_runtime() and its work runs on global.options.stream. Returns when its
// outputs are written (on the device: its stream synchronized). Every rank of the transport
// must call it with the same problem. Validates nothing: the caller has.
void ring_forward_rank(const Backend& inner, Transport& transport, const ForwardParams& global);
void ring_backward_rank(const Backend& inner, Transport& transport, const BackwardParams& global);

}  // namespace flashref::ring

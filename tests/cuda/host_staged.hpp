// A device backend run on host tensors: each call copies its inputs to the device, runs the
// device backend there and copies its outputs back. cuda_ring_test's split-keys property
// attends host buffers (the split-keys backend of tests/ring slices them on the host) with the
// cuda backend's partial attention this way. The ring itself keeps a rank's buffers on the
// device (ring/rank_memory.hpp) and no longer needs it. A harness for correctness, not a fast
// path: every call pays its copies, and calls are serialized.
#pragma once

#include <memory>

#include "flashref/backend.hpp"

namespace flashref::cuda_test {

// `device_backend` must take device memory (InvalidArgument("device_backend", ...)
// otherwise). The result has its name and its supports(), and takes host pointers.
std::unique_ptr<Backend> host_staged(std::shared_ptr<const Backend> device_backend);

}  // namespace flashref::cuda_test

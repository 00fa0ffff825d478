// A device backend run on host tensors: each call copies its inputs to the device, runs the
// device backend there and copies its outputs back. The in-process ring works on host buffers
// (its transport copies host memory); this is how it runs the cuda backend's partial attention
// on one GPU, so that `flashref verify --ranks R --backends cuda` judges the ring with the
// kernels that a multi-GPU ring would run. It is a harness for correctness, not a fast path:
// every call pays its copies, and calls are serialized (the ranks' threads share one device).
#pragma once

#include <memory>

#include "flashref/backend.hpp"

namespace flashref::ring {

// `device_backend` must take device memory (InvalidArgument("device_backend", ...)
// otherwise). The result has its name and its supports(), and takes host pointers.
std::unique_ptr<Backend> host_staged(std::shared_ptr<const Backend> device_backend);

}  // namespace flashref::ring

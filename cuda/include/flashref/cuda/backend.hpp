// The "cuda" backend: FlashAttention-2 kernels on tensor cores. Takes device pointers.
#pragma once

#include <memory>

#include "flashref/backend.hpp"

namespace flashref::cuda {

std::unique_ptr<Backend> make_backend();

}  // namespace flashref::cuda

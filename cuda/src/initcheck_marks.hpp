// Telling compute-sanitizer's initcheck what the kernels wrote by means it cannot see.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace flashref::cuda {

// Marks [ptr, ptr + bytes) initialized, in `stream`'s order, for initcheck, which does not count
// the TMA's stores (tensor or plain bulk copies) as writes (runs 34g and 35a). A claim, not a
// proof: whoever calls it names the check that tests it. Without a tool attached, NVTX's call
// returns at once.
void mark_initialized_for_initcheck(const void* ptr, std::size_t bytes, cudaStream_t stream);

}  // namespace flashref::cuda

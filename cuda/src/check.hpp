// CUDA error checking: every runtime call and every launch goes through check_cuda, and the
// error names what failed (the kernel, with its template arguments, or the call).
#pragma once

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace flashref::cuda {

class CudaError : public std::runtime_error {
 public:
  CudaError(cudaError_t code, const std::string& what)
      : std::runtime_error("cuda: " + what + ": " + cudaGetErrorName(code) + " (" +
                           cudaGetErrorString(code) + ")"),
        code_(code) {}
  cudaError_t code() const { return code_; }

 private:
  cudaError_t code_;
};

inline void check_cuda(cudaError_t code, const std::string& what) {
  if (code != cudaSuccess) throw CudaError(code, what);
}

}  // namespace flashref::cuda

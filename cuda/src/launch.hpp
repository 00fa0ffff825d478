// The entry points host code (backend.cpp) calls to run the kernels; defined in nvcc-compiled
// files. `stream` is a cudaStream_t (nullptr: the default stream). Errors throw CudaError
// naming the kernel.
#pragma once

#include "flashref/dtype.hpp"
#include "kernels/args.hpp"

namespace flashref::cuda {

// O and L from Q, K, V. `tf32`: float32 inputs run on TF32 tensor cores (d <= kMaxTf32HeadDim
// of dispatch.hpp; the caller checks), otherwise on the exact float32 kernels.
void launch_forward(const kernels::AttnArgs& args, DType dtype, bool tf32, void* stream);
// dQ, dK, dV; args.lse2 and args.dsum must point to (B * H, S_q_pad) float workspaces.
void launch_backward(const kernels::AttnArgs& args, DType dtype, bool tf32, void* stream);
// Rows of the backward workspace: S_q rounded up to the kernels' tile.
int workspace_rows(int S_q);

}  // namespace flashref::cuda

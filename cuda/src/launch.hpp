// The entry points host code (backend.cpp) calls to run the kernels; defined in nvcc-compiled
// files. `stream` is a cudaStream_t (nullptr: the default stream). Errors throw CudaError
// naming the kernel.
#pragma once

#include "family.hpp"
#include "flashref/dtype.hpp"
#include "kernels/common/args.hpp"

namespace flashref::cuda {

// O and L from Q, K, V, on the kernels of `family` (choose_family, family.hpp; the caller has
// checked family_supports).
void launch_forward(const kernels::AttnArgs& args, Family family, DType dtype, void* stream);
// dQ, dK, dV; args.lse2 and args.dsum must point to (B * H, S_q_pad) float workspaces.
void launch_backward(const kernels::AttnArgs& args, Family family, DType dtype, void* stream);
// Rows of the backward workspace: S_q rounded up to the kernels' tile.
int workspace_rows(int S_q);

}  // namespace flashref::cuda

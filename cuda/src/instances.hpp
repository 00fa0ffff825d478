// One kernel instance: the forward and backward launchers of a family for one dtype and
// compiled head dim. Each is defined in a generated inst/<family>_<dtype>_d<d>.cu, declared by
// the generated flashref_cuda_instances.hpp below, and found by dispatch.cu; none is written
// by hand (cuda/cmake/flashref_cuda_instances.cmake).
#pragma once

#include <cuda_runtime.h>

#include "family.hpp"
#include "flashref/dtype.hpp"
#include "kernels/common/args.hpp"

namespace flashref::cuda {

// O and L from Q, K, V (Alg. 1).
template <Family kFamily, DType kDtype, int kD>
void run_forward(const kernels::AttnArgs& args, cudaStream_t stream);
// dQ, dK, dV (Alg. 2), after the preprocess: the dQ pass on `stream`, the dK/dV pass on `side`.
template <Family kFamily, DType kDtype, int kD>
void run_backward(const kernels::AttnArgs& args, cudaStream_t stream, cudaStream_t side);

}  // namespace flashref::cuda

#include "flashref_cuda_instances.hpp"

// Instantiations of the tensor-core kernels for bf16, head dim 128 (one file per pair so the
// build compiles them in parallel).
#include "launch_templates.cuh"

namespace flashref::cuda {
template void run_fwd_mma<__nv_bfloat16, 128>(const kernels::AttnArgs&, cudaStream_t);
template void run_bwd_mma<__nv_bfloat16, 128>(const kernels::AttnArgs&, cudaStream_t, cudaStream_t);
}  // namespace flashref::cuda

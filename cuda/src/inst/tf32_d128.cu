// Instantiations of the TF32 tensor-core kernels (float32 with allow_tf32), head dim 128.
#include "launch_templates.cuh"

namespace flashref::cuda {
template void run_fwd_tf32<128>(const kernels::AttnArgs&, cudaStream_t);
template void run_bwd_tf32<128>(const kernels::AttnArgs&, cudaStream_t, cudaStream_t);
}  // namespace flashref::cuda

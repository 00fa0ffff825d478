// Instantiations of the exact float32 kernels, head dims 32 and 64.
#include "launch_templates.cuh"

namespace flashref::cuda {
template void run_fwd_f32<32>(const kernels::AttnArgs&, cudaStream_t);
template void run_bwd_f32<32>(const kernels::AttnArgs&, cudaStream_t, cudaStream_t);
template void run_fwd_f32<64>(const kernels::AttnArgs&, cudaStream_t);
template void run_bwd_f32<64>(const kernels::AttnArgs&, cudaStream_t, cudaStream_t);
}  // namespace flashref::cuda

// Instantiations of the exact float32 kernels, head dims 128 and 256.
#include "launch_templates.cuh"

namespace flashref::cuda {
template void run_fwd_f32<128>(const kernels::AttnArgs&, cudaStream_t);
template void run_bwd_f32<128>(const kernels::AttnArgs&, cudaStream_t, cudaStream_t);
template void run_fwd_f32<256>(const kernels::AttnArgs&, cudaStream_t);
template void run_bwd_f32<256>(const kernels::AttnArgs&, cudaStream_t, cudaStream_t);
}  // namespace flashref::cuda

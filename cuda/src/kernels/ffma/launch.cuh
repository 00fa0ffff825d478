// Launchers of the ffma family (the exact float32 kernels, no tensor cores): the choice between
// large and small tiles, and the FLASHREF_CUDA_TUNE variants. ffma::forward / ffma::backward
// are what the generated instantiation files (inst/ffma_*.cu) call.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>

#include "family.hpp"
#include "flashref/dtype.hpp"
#include "kernels/common/launch.cuh"
#include "kernels/ffma/configs.hpp"

namespace flashref::cuda::ffma {

// The float32 forward takes its small tiles when the grid of 64-row tiles would hold fewer
// than 4 blocks per SM (kernels/ffma/configs.hpp says why); the backward keeps the large
// ones, which measured faster inside forward+backward (docs/perf-notes.md, run 3).
// FLASHREF_CUDA_TUNE f32=1 / f32=2 forces large / small tiles on both (the backward's small
// tiles are a tuning variant).
inline bool small_tiles(long long rows, long long heads, long long batch, bool backward) {
  if (tune().f32 == 1) return false;
  if (tune().f32 == 2) return true;
  return !backward && (rows + 63) / 64 * heads * batch < 4LL * sm_count();
}

template <typename T>
void launch_fwd(const kernels::AttnArgs& args, cudaStream_t stream, int kD) {
  launch_per_query_tile<T>(kernels::fwd_f32_kernel<T>, T::kSmemBytes, args, stream, "fwd_f32",
                           "f32", kD);
}

// O and L (Alg. 1).
template <Family kFamily, DType kDtype, int kD>
void forward(const kernels::AttnArgs& args, cudaStream_t stream) {
  static_assert(kFamily == Family::ffma, "the ffma folder runs the ffma family only");
  static_assert(kDtype == DType::f32, "the ffma family runs float32 only");
  if (small_tiles(args.S_q, args.H, args.B, false))
    launch_fwd<typename kernels::F32Config<kD>::FwdSmall>(args, stream, kD);
  else
    launch_fwd<typename kernels::F32Config<kD>::Fwd>(args, stream, kD);
}

template <typename Dq, typename Dkv>
void launch_bwd(const kernels::AttnArgs& args, cudaStream_t stream, cudaStream_t side, int kD) {
  launch_per_query_tile<Dq>(kernels::bwd_dq_f32_kernel<Dq>, Dq::kDqSmemBytes, args, stream,
                            Dq::kPairedLanes ? "bwd_dq_f32" : "bwd_dq_f32_plain", "f32", kD);
  launch_per_key_tile<Dkv>(kernels::bwd_dkdv_f32_kernel<Dkv>, Dkv::kDkvSmemBytes, args, side,
                           Dkv::kPairedLanes ? "bwd_dkdv_f32" : "bwd_dkdv_f32_plain", "f32", kD);
}

// The dQ pass alone, on `stream`, and the dK/dV pass alone: the sm90_3xtf32 family's backward
// runs either beside its own other pass on wgmma (kernels/sm90/bwd_*_3xtf32.cuh).
template <int kD>
void backward_dq(const kernels::AttnArgs& args, cudaStream_t stream) {
  using Dq = typename kernels::F32Config<kD>::Dq;
  launch_per_query_tile<Dq>(kernels::bwd_dq_f32_kernel<Dq>, Dq::kDqSmemBytes, args, stream,
                            "bwd_dq_f32", "f32", kD);
}
template <int kD>
void backward_dkdv(const kernels::AttnArgs& args, cudaStream_t stream) {
  using Dkv = typename kernels::F32Config<kD>::Dkv;
  launch_per_key_tile<Dkv>(kernels::bwd_dkdv_f32_kernel<Dkv>, Dkv::kDkvSmemBytes, args, stream,
                           "bwd_dkdv_f32", "f32", kD);
}

// FLASHREF_CUDA_TUNE f32bwd=1 runs the plain kernels on the same tiles (Traits::Plain).
template <typename Dq, typename Dkv>
void launch_bwd_version(const kernels::AttnArgs& args, cudaStream_t stream, cudaStream_t side,
                        int kD) {
  if (tune().f32bwd == 1)
    launch_bwd<typename Dq::Plain, typename Dkv::Plain>(args, stream, side, kD);
  else
    launch_bwd<Dq, Dkv>(args, stream, side, kD);
}

// dQ, dK, dV (Alg. 2): the dQ pass on `stream`, the dK/dV pass on `side` (dispatch.cu forks and
// joins it).
template <Family kFamily, DType kDtype, int kD>
void backward(const kernels::AttnArgs& args, cudaStream_t stream, cudaStream_t side) {
  static_assert(kFamily == Family::ffma, "the ffma folder runs the ffma family only");
  static_assert(kDtype == DType::f32, "the ffma family runs float32 only");
  using C = kernels::F32Config<kD>;
  if constexpr (kTuningVariants) {
    if (small_tiles(std::max(args.S_q, args.S_k), args.H, args.B, true))
      launch_bwd_version<typename C::DqSmall, typename C::DkvSmall>(args, stream, side, kD);
    else
      launch_bwd_version<typename C::Dq, typename C::Dkv>(args, stream, side, kD);
  } else {
    (void)tune();  // a variant asked for and not compiled is an error (common/launch.cuh)
    launch_bwd<typename C::Dq, typename C::Dkv>(args, stream, side, kD);
  }
}

}  // namespace flashref::cuda::ffma

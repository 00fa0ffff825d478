// Launchers of the sm80 family (mma.sync: bf16/f16 with Sm80Fp16Ops, float32 with allow_tf32
// with Sm80Tf32Ops): grid sizes, labels and the FLASHREF_CUDA_TUNE variants, for one operand
// policy and compiled head dim. sm80::forward / sm80::backward are what the generated
// instantiation files (inst/sm80_*.cu, cuda/cmake/flashref_cuda_instances.cmake) call.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <string>
#include <type_traits>

#include "flashref/dtype.hpp"
#include "kernels/common/launch.cuh"
#include "kernels/sm80/configs.hpp"

namespace flashref::cuda::sm80 {

// The operand policy for an input dtype: bf16 and f16 on m16n8k16, float32 on TF32.
template <DType kDtype>
using OpsFor = std::conditional_t<
    kDtype == DType::bf16, kernels::Sm80Fp16Ops<__nv_bfloat16>,
    std::conditional_t<kDtype == DType::f16, kernels::Sm80Fp16Ops<__half>, kernels::Sm80Tf32Ops>>;

// Error-message names: "fwd_mma" / "fwd_tf32", and the element "bf16", "f16" or "f32".
template <typename Ops>
std::string name(const char* kind) {
  return std::string(kind) + (Ops::kRoundsTiles ? "_tf32" : "_mma");
}
template <typename Ops>
const char* element() {
  return element_name<typename Ops::Element>();
}

template <typename Ops, int kD, int kVariant>
void run_fwd_variant(const kernels::AttnArgs& args, cudaStream_t stream) {
  using T = typename kernels::FwdMmaConfig<Ops, kD, kVariant>::Traits;
  launch_per_query_tile<T>(kernels::fwd_mma_kernel<T>, T::kSmemBytes, args, stream,
                           name<Ops>("fwd").c_str(), element<Ops>(), kD);
}

template <typename Ops, int kD, int kVariant>
void run_bwd_dq_variant(const kernels::AttnArgs& args, cudaStream_t stream) {
  using Dq = typename kernels::BwdDqMmaConfig<Ops, kD, kVariant>::Traits;
  launch_per_query_tile<Dq>(kernels::bwd_dq_mma_kernel<Dq>, Dq::kSmemBytes, args, stream,
                            name<Ops>("bwd_dq").c_str(), element<Ops>(), kD);
}

template <typename Ops, typename Dkv>
void launch_bwd_dkdv(const kernels::AttnArgs& args, cudaStream_t stream, int kD) {
  const char* kind = Dkv::kDoDK && Dkv::kDoDV ? "bwd_dkdv" : Dkv::kDoDV ? "bwd_dv" : "bwd_dk";
  launch_per_key_tile<Dkv>(kernels::bwd_dkdv_mma_kernel<Dkv>, Dkv::kSmemBytes, args, stream,
                           name<Ops>(kind).c_str(), element<Ops>(), kD);
}

template <typename Ops, int kD, int kVariant>
void run_bwd_dkdv_variant(const kernels::AttnArgs& args, cudaStream_t stream) {
  using C = kernels::BwdDkvMmaConfig<Ops, kD, kVariant>;
  launch_bwd_dkdv<Ops, typename C::Traits>(args, stream, kD);
  if constexpr (!std::is_void_v<typename C::Second>)
    launch_bwd_dkdv<Ops, typename C::Second>(args, stream, kD);
}

// O and L (Alg. 1).
template <DType kDtype, int kD>
void forward(const kernels::AttnArgs& args, cudaStream_t stream) {
  using Ops = OpsFor<kDtype>;
  if constexpr (kTuningVariants && kD == 64 && !Ops::kRoundsTiles) {
    switch (tune().fwd) {
      case 1:
        return run_fwd_variant<Ops, kD, 1>(args, stream);
      case 2:
        return run_fwd_variant<Ops, kD, 2>(args, stream);
      case 3:
        return run_fwd_variant<Ops, kD, 3>(args, stream);
      default:
        break;
    }
  } else {
    (void)tune();  // a variant asked for and not compiled is an error (common/launch.cuh)
  }
  run_fwd_variant<Ops, kD, 0>(args, stream);
}

// dQ, dK, dV (Alg. 2). The dQ pass and the dK/dV pass are independent (both read only Q, K,
// V, dO and the workspace): the dQ pass runs on `stream`, the dK/dV pass on `side`, which the
// caller forks from and joins back to `stream` (dispatch.cu), so the tail of one grid overlaps
// the other.
template <DType kDtype, int kD>
void backward(const kernels::AttnArgs& args, cudaStream_t stream, cudaStream_t side) {
  using Ops = OpsFor<kDtype>;
  if constexpr (kTuningVariants && kD == 64 && !Ops::kRoundsTiles) {
    if (tune().dq == 1)
      run_bwd_dq_variant<Ops, kD, 1>(args, stream);
    else
      run_bwd_dq_variant<Ops, kD, 0>(args, stream);
    switch (tune().dkdv) {
      case 1:
        return run_bwd_dkdv_variant<Ops, kD, 1>(args, side);
      case 2:
        return run_bwd_dkdv_variant<Ops, kD, 2>(args, side);
      default:
        return run_bwd_dkdv_variant<Ops, kD, 0>(args, side);
    }
  } else {
    (void)tune();
    run_bwd_dq_variant<Ops, kD, 0>(args, stream);
    run_bwd_dkdv_variant<Ops, kD, 0>(args, side);
  }
}

}  // namespace flashref::cuda::sm80

// Launchers of the sm80 families (mma.sync: bf16/f16 with Sm80Fp16Ops, float32 with allow_tf32
// with Sm80Tf32Ops, exact float32 with Sm80Tf32x3Ops): grid sizes, labels and the
// FLASHREF_CUDA_TUNE variants, for one operand policy and compiled head dim. sm80::forward /
// sm80::backward are what the generated instantiation files (inst/sm80_*.cu,
// cuda/cmake/flashref_cuda_instances.cmake) call.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <string>
#include <type_traits>

#include "family.hpp"
#include "flashref/dtype.hpp"
#include "kernels/common/launch.cuh"
#include "kernels/sm80/configs.hpp"

namespace flashref::cuda::sm80 {

// The operand policy of a family and input dtype: bf16 and f16 on m16n8k16; float32 on TF32
// (sm80_tf32, allow_tf32) or as 3xTF32 (sm80_3xtf32, exact).
template <Family kFamily, DType kDtype>
using OpsFor = std::conditional_t<
    kDtype == DType::bf16, kernels::Sm80Fp16Ops<__nv_bfloat16>,
    std::conditional_t<kDtype == DType::f16, kernels::Sm80Fp16Ops<__half>,
                       std::conditional_t<kFamily == Family::sm80_3xtf32, kernels::Sm80Tf32x3Ops,
                                          kernels::Sm80Tf32Ops>>>;

// Whether the policy takes bf16/f16 (the only ones with tuning variants, at d = 64).
template <typename Ops>
inline constexpr bool kFp16Ops = !std::is_same_v<typename Ops::Element, float>;

// Error-message names: "fwd_mma" / "fwd_tf32" / "fwd_3xtf32", and the element "bf16", "f16" or
// "f32".
template <typename Ops>
std::string name(const char* kind) {
  return std::string(kind) + "_" + Ops::kLabel;
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
template <Family kFamily, DType kDtype, int kD>
void forward(const kernels::AttnArgs& args, cudaStream_t stream) {
  using Ops = OpsFor<kFamily, kDtype>;
  if constexpr (kTuningVariants && kD == 64 && kFp16Ops<Ops>) {
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
  } else if constexpr (kTuningVariants && kD == 128 && kFamily == Family::sm80_3xtf32) {
    if (tune().fwd == 1) return run_fwd_variant<Ops, kD, 1>(args, stream);
  } else {
    (void)tune();  // a variant asked for and not compiled is an error (common/launch.cuh)
  }
  run_fwd_variant<Ops, kD, 0>(args, stream);
}

// dQ, dK, dV (Alg. 2). The dQ pass and the dK/dV pass are independent (both read only Q, K,
// V, dO and the workspace): the dQ pass runs on `stream`, the dK/dV pass on `side`, which the
// caller forks from and joins back to `stream` (dispatch.cu), so the tail of one grid overlaps
// the other.
template <Family kFamily, DType kDtype, int kD>
void backward(const kernels::AttnArgs& args, cudaStream_t stream, cudaStream_t side) {
  using Ops = OpsFor<kFamily, kDtype>;
  if constexpr (kTuningVariants && kD == 64 && kFp16Ops<Ops>) {
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
  } else if constexpr (kTuningVariants && kD == 128 && kFamily == Family::sm80_3xtf32) {
    run_bwd_dq_variant<Ops, kD, 0>(args, stream);
    if (tune().dkdv == 1) return run_bwd_dkdv_variant<Ops, kD, 1>(args, side);
    run_bwd_dkdv_variant<Ops, kD, 0>(args, side);
  } else {
    (void)tune();
    run_bwd_dq_variant<Ops, kD, 0>(args, stream);
    run_bwd_dkdv_variant<Ops, kD, 0>(args, side);
  }
}

}  // namespace flashref::cuda::sm80

// Kernel families of the cuda backend, and the one place a family is chosen: from the device's
// compute capability, the dtype and ExecutionOptions::allow_tf32. A family is a folder of
// kernels under kernels/ that compiles only for the archs that can run it
// (cuda/cmake/flashref_cuda_instances.cmake); docs/cuda.md describes each.
#pragma once

#include <string>

#include "flashref/backend.hpp"
#include "flashref/dtype.hpp"
#include "flashref/problem.hpp"

namespace flashref::cuda {

enum class Family {
  sm80,         // mma.sync m16n8k16, bf16 / f16 inputs (kernels/sm80, Sm80Fp16Ops); sm_80 and newer
  sm80_tf32,    // mma.sync m16n8k8 on TF32, float32 inputs with allow_tf32 (kernels/sm80,
                // Sm80Tf32Ops); sm_80 and newer
  sm80_3xtf32,  // mma.sync m16n8k8, exact float32 as three TF32 products per product
                // (kernels/sm80, Sm80Tf32x3Ops); sm_80 and newer, d <= kMaxTf32HeadDim;
                // chosen only by FLASHREF_CUDA_FAMILY=3xtf32
  ffma,         // exact float32 on the FMA units (kernels/ffma); sm_80 and newer, every d
  sm90,         // wgmma, TMA and warp specialization (kernels/sm90), bf16 / f16 at compiled head
                // dims 64 and 128, and 256 (the forward; the backward is sm80's); sm_90a only
  sm90_3xtf32,  // exact float32 on sm_90a: the forward as three TF32 wgmma per product
                // (kernels/sm90/fwd_3xtf32.cuh), the backward the ffma family's; compiled head
                // dims 64 and 128
};

const char* family_name(Family f);

// The largest head dim the TF32 and 3xTF32 kernels are compiled for (32, 64, 128;
// kernels/sm80/configs.hpp says why 256 is not).
inline constexpr int kMaxTf32HeadDim = 128;

// FLASHREF_CUDA_FAMILY: what a user may force, to compare families on one card. Unset, empty
// or "auto": the choice below; "sm80": bf16/f16 on the mma.sync kernels on a Hopper GPU;
// "3xtf32": exact float32 as 3xTF32 on mma.sync (sm80_3xtf32) at d <= kMaxTf32HeadDim; "ffma":
// exact float32 on the FMA units (not on sm90_3xtf32). Any other value is an InvalidArgument
// naming the variable.
enum class FamilyOverride { none, sm80, three_tf32, ffma };
FamilyOverride family_override_from(const char* value);

// `arch` is the device's compute capability as major * 10 + minor (80, 86, 90, ...). Every
// device the backend accepts (sm_80 or newer) has a family for every dtype: bf16/f16 run on
// sm90 on Hopper (arch 90) at every head dim up to 256 (compiled 64, 128 and 256, the last a
// forward with sm80's backward), otherwise on sm80; float32 on sm80_tf32 with
// allow_tf32, and exact on sm90_3xtf32 on Hopper at d in 33..128, elsewhere on ffma (the mma.sync
// 3xTF32 kernels measured slower on the H200 in all but one pass: docs/cuda.md).
Family choose_family(int arch, DType dtype, long long d, bool allow_tf32, FamilyOverride o);
// FLASHREF_CUDA_FAMILY's override, read once per process.
FamilyOverride family_override_from_env();
// The same with FLASHREF_CUDA_FAMILY's override.
Family choose_family(int arch, DType dtype, long long d, bool allow_tf32);

// Why choose_family(arch, dtype, d, allow_tf32, o) picks the family it picks, in one line that
// starts with the family's name ("sm80: mma.sync m16n8k16; compute capability 8.6: the wgmma
// kernels are sm_90a code, which runs on 9.0 only"): what a user whose problem did not run on
// the Hopper kernels, or ran on them padded, needs to know. The cuda backend's plan().
std::string family_choice(int arch, DType dtype, long long d, bool allow_tf32, FamilyOverride o);

// Whether this build compiled the sm90 family (CMAKE_CUDA_ARCHITECTURES has 90a).
bool sm90_built();

// Whether family `f` runs problem `p`, and if not why (the reason names the limit and what to
// do instead).
Support family_supports(Family f, const Problem& p);

}  // namespace flashref::cuda

#include "family.hpp"

#include <cstdlib>
#include <string>

#include "dispatch.hpp"
#include "flashref/error.hpp"

namespace flashref::cuda {

const char* family_name(Family f) {
  switch (f) {
    case Family::sm80:
      return "sm80";
    case Family::sm80_tf32:
      return "sm80_tf32";
    case Family::sm80_3xtf32:
      return "sm80_3xtf32";
    case Family::ffma:
      return "ffma";
    case Family::sm90:
      return "sm90";
    case Family::sm90_3xtf32:
      return "sm90_3xtf32";
  }
  return "?";
}

FamilyOverride family_override_from(const char* value) {
  const std::string v = value == nullptr ? "" : value;
  if (v.empty() || v == "auto") return FamilyOverride::none;
  if (v == "sm80") return FamilyOverride::sm80;
  if (v == "3xtf32") return FamilyOverride::three_tf32;
  if (v == "ffma") return FamilyOverride::ffma;
  if (v == "sm90") return FamilyOverride::sm90;
  throw InvalidArgument("FLASHREF_CUDA_FAMILY",
                        "\"" + v +
                            "\" is not a family choice: use auto (the default), sm80 (bf16/f16 on "
                            "the mma.sync kernels, not sm90), 3xtf32 (exact float32 as 3xTF32 "
                            "on the mma.sync kernels), ffma (exact float32 on the FMA units, "
                            "not as 3xTF32 on wgmma) or sm90 (bf16/f16 on the wgmma kernels at "
                            "every d up to 256: d <= 32 padded to 64, the backward above 128 "
                            "on mma.sync)");
}

bool sm90_built() {
#ifdef FLASHREF_CUDA_FOLDER_SM90
  return true;
#else
  return false;
#endif
}

Family choose_family(int arch, DType dtype, long long d, bool allow_tf32, FamilyOverride o) {
  // sm90 and sm90_3xtf32 are compiled for head dims 64 and 128: d in 33..128 runs there (padded
  // up), the rest on sm80 or ffma (docs/cuda.md). The sm90 override takes bf16/f16 at d <= 32 to
  // sm90 too, padded to 64, and d in 129..256 to its d = 256 forward (the backward there is
  // sm80's). sm_90a code runs on compute capability 9.0 only. A build without 90a in
  // CMAKE_CUDA_ARCHITECTURES has no sm90 kernels (flashref_cuda_instances).
  const bool hopper_arch = sm90_built() && arch == 90;
  const bool hopper = hopper_arch && d > 32 && d <= 128;
  if (dtype == DType::f32) {
    if (allow_tf32) return Family::sm80_tf32;
    if (o == FamilyOverride::three_tf32 && d <= kMaxTf32HeadDim) return Family::sm80_3xtf32;
    return hopper && o != FamilyOverride::ffma ? Family::sm90_3xtf32 : Family::ffma;
  }
  const bool hopper_16bit = o == FamilyOverride::sm90 ? hopper_arch && d <= 256 : hopper;
  if (hopper_16bit && d % 8 == 0 && o != FamilyOverride::sm80) return Family::sm90;
  return Family::sm80;
}

namespace {

// Why the wgmma family of `dtype` (sm90; sm90_3xtf32 for float32) does not run head dim d on this
// arch and build under override o, or "" when it does.
std::string why_not_hopper(int arch, DType dtype, long long d, FamilyOverride o) {
  if (!sm90_built()) {
    return "this build has no sm_90a kernels (CMAKE_CUDA_ARCHITECTURES lacks 90a)";
  }
  if (arch != 90) {
    return "compute capability " + std::to_string(arch / 10) + "." + std::to_string(arch % 10) +
           ": the wgmma kernels are sm_90a code, which runs on 9.0 only";
  }
  if (dtype != DType::f32 && o == FamilyOverride::sm90) {
    return d > 256 ? "the wgmma kernels take head dims up to 256, d = " + std::to_string(d) : "";
  }
  if (d > 128) {
    return "the wgmma kernels are compiled for head dims 64 and 128 (d in 33..128; bf16/f16 at "
           "d <= 256 under FLASHREF_CUDA_FAMILY=sm90, the forward on wgmma), d = " +
           std::to_string(d) + " is not";
  }
  if (d <= 32) {
    return "the wgmma kernels are compiled for head dims 64 and 128 (d in 33..128; bf16/f16 at "
           "d <= 32 too under FLASHREF_CUDA_FAMILY=sm90, padded to 64), d = " +
           std::to_string(d) + " is not";
  }
  return "";
}

}  // namespace

std::string family_choice(int arch, DType dtype, long long d, bool allow_tf32, FamilyOverride o) {
  const Family f = choose_family(arch, dtype, d, allow_tf32, o);
  const std::string name = family_name(f);
  const std::string not_hopper = why_not_hopper(arch, dtype, d, o);
  const int compiled = family_head_dim(f, d);
  const std::string padded =
      d == compiled ? ""
                    : " (d = " + std::to_string(d) + " padded to " + std::to_string(compiled) + ")";
  switch (f) {
    case Family::sm90:
      if (d > 128)
        return name + ": the forward on wgmma, TMA and warp specialization, the backward on " +
               "mma.sync, compute capability 9.0" + padded + ", as FLASHREF_CUDA_FAMILY=sm90 asks";
      return name + ": wgmma, TMA and warp specialization, compute capability 9.0" + padded +
             (o == FamilyOverride::sm90 && d <= 32 ? ", as FLASHREF_CUDA_FAMILY=sm90 asks" : "");
    case Family::sm90_3xtf32:
      return name + ": exact float32 as three TF32 wgmma a product, compute capability 9.0" +
             padded;
    case Family::sm80_tf32:
      return name + ": float32 with allow_tf32 runs on the TF32 mma.sync kernels on every arch";
    case Family::sm80_3xtf32:
      return name + ": exact float32 as 3xTF32 on mma.sync, as FLASHREF_CUDA_FAMILY=3xtf32 asks";
    case Family::ffma:
      return name + ": exact float32 on the FMA units; " +
             (o == FamilyOverride::ffma ? std::string("FLASHREF_CUDA_FAMILY=ffma asks for it")
                                        : not_hopper);
    case Family::sm80:
      if (o == FamilyOverride::sm80) return name + ": mma.sync, as FLASHREF_CUDA_FAMILY=sm80 asks";
      return name + ": mma.sync m16n8k16; " +
             (not_hopper.empty() ? "d = " + std::to_string(d) + " is not a multiple of 8"
                                 : not_hopper);
  }
  return name;
}

FamilyOverride family_override_from_env() {
  static const FamilyOverride from_env = family_override_from(std::getenv("FLASHREF_CUDA_FAMILY"));
  return from_env;
}

Family choose_family(int arch, DType dtype, long long d, bool allow_tf32) {
  return choose_family(arch, dtype, d, allow_tf32, family_override_from_env());
}

Support family_supports(Family f, const Problem& p) {
  // Rows move in 16-byte vectors: 8 elements of bf16/f16, 4 of float32.
  const long long chunk = f == Family::sm80 || f == Family::sm90 ? 8 : 4;
  if (p.d % chunk != 0) {
    return {false, "head dim d = " + std::to_string(p.d) + " is not a multiple of " +
                       std::to_string(chunk) + " (the " + std::string(dtype_name(p.dtype)) +
                       " kernels load rows in 16-byte vectors; compiled head dims are 32, 64, "
                       "128, 256 and smaller multiples pad up)"};
  }
  // Refused rather than quietly running the exact kernels the caller did not ask for.
  if (f == Family::sm80_tf32 && p.d > kMaxTf32HeadDim) {
    return {false,
            "allow_tf32 with head dim d = " + std::to_string(p.d) +
                ": the TF32 kernels are compiled for d <= " + std::to_string(kMaxTf32HeadDim) +
                " (at d = 256 a warp's float accumulator leaves no registers for the TF32 "
                "operands: every tiling spilled); without allow_tf32 the exact float32 "
                "kernels run d up to 256"};
  }
  if (f == Family::sm80_3xtf32 && p.d > kMaxTf32HeadDim) {
    return {false,
            "head dim d = " + std::to_string(p.d) +
                ": the 3xTF32 kernels are compiled for d <= " + std::to_string(kMaxTf32HeadDim) +
                "; the exact float32 kernels on the FMA units (ffma) run d up to 256"};
  }
  return {};
}

}  // namespace flashref::cuda

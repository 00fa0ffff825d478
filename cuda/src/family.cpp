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
  throw InvalidArgument("FLASHREF_CUDA_FAMILY",
                        "\"" + v +
                            "\" is not a family choice: use auto (the default), sm80 (bf16/f16 on "
                            "the mma.sync kernels, not sm90), 3xtf32 (exact float32 as 3xTF32 "
                            "on the mma.sync kernels) or ffma (exact float32 on the FMA units, "
                            "not as 3xTF32 on wgmma)");
}

bool sm90_built() {
#ifdef FLASHREF_CUDA_FOLDER_SM90
  return true;
#else
  return false;
#endif
}

Family choose_family(int arch, DType dtype, long long d, bool allow_tf32, FamilyOverride o) {
  // bf16/f16 take sm90 at every head dim up to 256: d <= 64 on its d = 64 kernels (padded up;
  // d <= 32 too), up to 128 on d = 128's, and up to 256 on d = 256's forward with the mma.sync
  // backward (kernels/sm90/launch.cuh). Run 49a (H100, causal bf16, against sm80): d = 32 S = 1k
  // forward -40%, backward -35%; d = 256 S = 2k forward -57%, backward level. Exact float32
  // takes sm90_3xtf32 at d in 33..128, its compiled 64 and 128, and ffma elsewhere (docs/cuda.md
  // has both). sm_90a code runs on compute capability 9.0 only. A build without 90a in
  // CMAKE_CUDA_ARCHITECTURES has no sm90 kernels (flashref_cuda_instances).
  const bool hopper_arch = sm90_built() && arch == 90;
  if (dtype == DType::f32) {
    const bool hopper = hopper_arch && d > 32 && d <= 128;
    if (allow_tf32) return Family::sm80_tf32;
    if (o == FamilyOverride::three_tf32 && d <= kMaxTf32HeadDim) return Family::sm80_3xtf32;
    return hopper && o != FamilyOverride::ffma ? Family::sm90_3xtf32 : Family::ffma;
  }
  if (hopper_arch && d <= 256 && d % 8 == 0 && o != FamilyOverride::sm80) return Family::sm90;
  return Family::sm80;
}

namespace {

// Why the wgmma family of `dtype` (sm90; sm90_3xtf32 for float32) does not run head dim d on this
// arch and build, or "" when it does.
std::string why_not_hopper(int arch, DType dtype, long long d) {
  if (!sm90_built()) {
    return "this build has no sm_90a kernels (CMAKE_CUDA_ARCHITECTURES lacks 90a)";
  }
  if (arch != 90) {
    return "compute capability " + std::to_string(arch / 10) + "." + std::to_string(arch % 10) +
           ": the wgmma kernels are sm_90a code, which runs on 9.0 only";
  }
  if (dtype == DType::f32 && (d <= 32 || d > 128)) {
    return "the 3xTF32 wgmma kernels are compiled for head dims 64 and 128 (d in 33..128), d = " +
           std::to_string(d) + " is not";
  }
  if (d > 256) return "the wgmma kernels take head dims up to 256, d = " + std::to_string(d);
  return "";
}

}  // namespace

std::string family_choice(int arch, DType dtype, long long d, bool allow_tf32, FamilyOverride o) {
  const Family f = choose_family(arch, dtype, d, allow_tf32, o);
  const std::string name = family_name(f);
  const std::string not_hopper = why_not_hopper(arch, dtype, d);
  const int compiled = family_head_dim(f, d);
  const std::string padded =
      d == compiled ? ""
                    : " (d = " + std::to_string(d) + " padded to " + std::to_string(compiled) + ")";
  switch (f) {
    case Family::sm90:
      if (d > 128)
        return name + ": the forward on wgmma, TMA and warp specialization, the backward on " +
               "mma.sync, compute capability 9.0" + padded;
      return name + ": wgmma, TMA and warp specialization, compute capability 9.0" + padded;
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

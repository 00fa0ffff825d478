#include "family.hpp"

#include <string>

namespace flashref::cuda {

const char* family_name(Family f) {
  switch (f) {
    case Family::sm80:
      return "sm80";
    case Family::sm80_tf32:
      return "sm80_tf32";
    case Family::ffma:
      return "ffma";
  }
  return "?";
}

Family choose_family(int arch, DType dtype, bool allow_tf32) {
  (void)arch;  // every accepted device (sm_80 and newer) runs the sm80 and ffma families
  if (dtype != DType::f32) return Family::sm80;
  return allow_tf32 ? Family::sm80_tf32 : Family::ffma;
}

Support family_supports(Family f, const Problem& p) {
  // Rows move in 16-byte vectors: 8 elements of bf16/f16, 4 of float32.
  const long long chunk = f == Family::sm80 ? 8 : 4;
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
  return {};
}

}  // namespace flashref::cuda

// Run-time values -> compile-time template arguments: the head dims the kernels are compiled
// for. The rest of the dispatch (family, dtype, head dim -> one generated instance) is one
// table lookup in dispatch.cu over FLASHREF_CUDA_INSTANCES, the list cuda/CMakeLists.txt
// generates the instances from; the family itself is chosen in family.cpp.
#pragma once

#include "family.hpp"

namespace flashref::cuda {

// The head dims the kernels are compiled for; d runs on the smallest one >= d.
inline constexpr int kCompiledHeadDims[] = {32, 64, 128, 256};

constexpr int compiled_head_dim(long long d) {
  for (int c : kCompiledHeadDims)
    if (d <= c) return c;
  return 0;  // above 256: no kernel
}

// The compiled head dim that runs d in family `f`: the wgmma families are compiled for 64 and
// 128 (sm90 for 256 too) and not for 32, so d <= 32 runs on 64 there; the others as above.
constexpr int family_head_dim(Family f, long long d) {
  if (f == Family::sm90_3xtf32) return d <= 64 ? 64 : d <= 128 ? 128 : 0;
  if (f == Family::sm90) return d <= 64 ? 64 : compiled_head_dim(d);
  return compiled_head_dim(d);
}

}  // namespace flashref::cuda

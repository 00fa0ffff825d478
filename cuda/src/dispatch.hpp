// Run-time values -> compile-time template arguments: the head dims the kernels are compiled
// for. The rest of the dispatch (family, dtype, head dim -> one generated instance) is one
// table lookup in dispatch.cu over FLASHREF_CUDA_INSTANCES, the list cuda/CMakeLists.txt
// generates the instances from; the family itself is chosen in family.cpp.
#pragma once

namespace flashref::cuda {

// The head dims the kernels are compiled for; d runs on the smallest one >= d.
inline constexpr int kCompiledHeadDims[] = {32, 64, 128, 256};

constexpr int compiled_head_dim(long long d) {
  for (int c : kCompiledHeadDims)
    if (d <= c) return c;
  return 0;  // above 256: no kernel
}

}  // namespace flashref::cuda

// Which instruction set the cpu backend's hot kernels use.
//
// The tile kernels (the matrix products, exp, the softmax sweeps) are compiled three times,
// for AVX-512, for AVX2 + FMA and for baseline x86-64 (or the compiler's default elsewhere),
// and the best one the running CPU supports is picked once, at first use. Nothing is compiled
// with -march=native, so one binary runs on any x86-64 machine. The environment variable
// FLASHREF_CPU_ISA=generic|avx2|avx512 overrides the pick (an unavailable one is ignored).
#pragma once

#include <string_view>
#include <vector>

namespace flashref::cpu {

enum class Isa { generic, avx2, avx512 };

std::string_view isa_name(Isa isa);  // "generic", "avx2", "avx512"
// The instruction sets this binary has kernels for and this CPU can run, best last.
std::vector<Isa> available_isas();
// The instruction set the kernels use now.
Isa active_isa();
// For tests and benchmarks: use `isa` from now on. Returns false (and changes nothing) when it
// is not available. Must not be called while a cpu backend call is running.
bool select_isa(Isa isa);

}  // namespace flashref::cpu

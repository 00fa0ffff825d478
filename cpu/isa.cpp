// Picks the tile kernels for the running CPU, once.
#include <atomic>
#include <cstdlib>
#include <string>

#include "flashref/cpu/isa.hpp"
#include "kernels.hpp"

namespace flashref::cpu {
namespace {

bool cpu_has(Isa isa) {
#if defined(__x86_64__) && defined(__GNUC__)
  switch (isa) {
    case Isa::generic:
      return true;
    case Isa::avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case Isa::avx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  }
  return false;
#else
  return isa == Isa::generic;
#endif
}

const detail::Kernels* table(Isa isa) {
  switch (isa) {
    case Isa::generic:
      return detail::kernels_generic();
    case Isa::avx2:
      return detail::kernels_avx2();
    case Isa::avx512:
      return detail::kernels_avx512();
  }
  return nullptr;
}

bool usable(Isa isa) {
  return table(isa) != nullptr && cpu_has(isa);
}

Isa initial_isa() {
  Isa best = Isa::generic;
  for (Isa isa : available_isas()) best = isa;
  if (const char* forced = std::getenv("FLASHREF_CPU_ISA")) {
    for (Isa isa : available_isas()) {
      if (isa_name(isa) == forced) best = isa;
    }
  }
  return best;
}

std::atomic<Isa>& current() {
  static std::atomic<Isa> isa{initial_isa()};
  return isa;
}

}  // namespace

std::string_view isa_name(Isa isa) {
  switch (isa) {
    case Isa::generic:
      return "generic";
    case Isa::avx2:
      return "avx2";
    case Isa::avx512:
      return "avx512";
  }
  return "?";
}

std::vector<Isa> available_isas() {
  std::vector<Isa> out;
  for (Isa isa : {Isa::generic, Isa::avx2, Isa::avx512}) {
    if (usable(isa)) out.push_back(isa);
  }
  return out;
}

Isa active_isa() {
  return current().load(std::memory_order_relaxed);
}

bool select_isa(Isa isa) {
  if (!usable(isa)) return false;
  current().store(isa, std::memory_order_relaxed);
  return true;
}

namespace detail {
const Kernels& kernels() {
  return *table(active_isa());
}
}  // namespace detail

}  // namespace flashref::cpu

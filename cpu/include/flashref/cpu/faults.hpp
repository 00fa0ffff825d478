// Planted bugs, for testing the diagnosis of `flashref check` (verify/diagnosis*.cpp) and the
// fuzzer.
//
// Options::faults (backend.hpp) is a bit set of Fault values: cpu::make_backend({.faults =
// Fault::no_scale | Fault::tail_rows}). Each fault reproduces one mistake that real attention
// kernels make, at the line of Algorithm 1 or 2 where it is made, so a test can run the cpu
// backend with the bug and assert that the diagnosis names it. Only the tiling plan
// (cpu/plan.hpp) reads the faults; it hands the algorithm the mask, scales, loop bounds and
// row finishing they change. With no faults the backend runs the real algorithm.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace flashref::cpu {

enum class Fault : std::uint32_t {
  none = 0,
  // Alg. 1 line 9 and Alg. 2 line 11: S = Q K^T without the softmax scale.
  no_scale = 1u << 0,
  // Alg. 1 line 16: L written in log base 2, (m + ln l) / ln 2, instead of the natural log.
  lse_base2 = 1u << 1,
  // Alg. 1 line 16: L = ln(l), without the running max m added back.
  lse_unshifted = 1u << 2,
  // Causal mask not applied: every key tile is treated as fully visible (forward and backward).
  mask_ignored = 1u << 3,
  // Causal alignment swapped: top-left where bottom-right was asked for, and the reverse.
  mask_alignment = 1u << 4,
  // Alg. 1 line 15 skipped: O is written without the final division by l.
  unnormalized = 1u << 5,
  // Alg. 1 lines 15-16 without the guard for rows that see no key: O = 0 / 0 = NaN there.
  nan_masked_rows = 1u << 6,
  // The last query tile, when partial (S_q not a multiple of B_q), stops one key tile early,
  // as a kernel with a wrong loop bound for the tail would.
  tail_rows = 1u << 7,
  // Tiles crossing the causal diagonal skip the index comparison (treated like full tiles).
  diagonal_tiles = 1u << 8,
  // Alg. 2 line 16: dQ accumulated without the softmax scale.
  dq_scale = 1u << 9,
  // Alg. 2 line 17: the softmax scale applied twice to dK.
  dk_scale = 1u << 10,
  // Alg. 2 line 2: D = 0 instead of rowsum(dO * O).
  d_vector = 1u << 11,
  // dK, dV taken from the first query head of each group only, not summed over the group.
  gqa_reduction = 1u << 12,
};

constexpr std::uint32_t operator|(Fault a, Fault b) {
  return static_cast<std::uint32_t>(a) | static_cast<std::uint32_t>(b);
}
constexpr std::uint32_t operator|(std::uint32_t a, Fault b) {
  return a | static_cast<std::uint32_t>(b);
}
constexpr bool has_fault(std::uint32_t faults, Fault f) {
  return (faults & static_cast<std::uint32_t>(f)) != 0;
}

// Every fault, in declaration order (for tests and for listing them in tools).
const std::vector<Fault>& all_faults();
// The fault's name as written above ("no_scale", "tail_rows", ...): the diagnosis code it plants.
std::string_view fault_name(Fault f);
// Inverse of fault_name; throws InvalidArgument("faults", ...) for an unknown name.
Fault parse_fault(std::string_view name);

}  // namespace flashref::cpu

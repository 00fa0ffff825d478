#include "flashref/cpu/faults.hpp"

#include <string>

#include "flashref/error.hpp"

namespace flashref::cpu {

const std::vector<Fault>& all_faults() {
  static const std::vector<Fault> faults{
      Fault::no_scale,       Fault::lse_base2,    Fault::lse_unshifted,   Fault::mask_ignored,
      Fault::mask_alignment, Fault::unnormalized, Fault::nan_masked_rows, Fault::tail_rows,
      Fault::diagonal_tiles, Fault::dq_scale,     Fault::dk_scale,        Fault::d_vector,
      Fault::gqa_reduction};
  return faults;
}

std::string_view fault_name(Fault f) {
  switch (f) {
    case Fault::none:
      return "none";
    case Fault::no_scale:
      return "no_scale";
    case Fault::lse_base2:
      return "lse_base2";
    case Fault::lse_unshifted:
      return "lse_unshifted";
    case Fault::mask_ignored:
      return "mask_ignored";
    case Fault::mask_alignment:
      return "mask_alignment";
    case Fault::unnormalized:
      return "unnormalized";
    case Fault::nan_masked_rows:
      return "nan_masked_rows";
    case Fault::tail_rows:
      return "tail_rows";
    case Fault::diagonal_tiles:
      return "diagonal_tiles";
    case Fault::dq_scale:
      return "dq_scale";
    case Fault::dk_scale:
      return "dk_scale";
    case Fault::d_vector:
      return "d_vector";
    case Fault::gqa_reduction:
      return "gqa_reduction";
  }
  return "?";
}

Fault parse_fault(std::string_view name) {
  for (Fault f : all_faults()) {
    if (fault_name(f) == name) return f;
  }
  std::string known;
  for (Fault f : all_faults()) known += (known.empty() ? "" : ", ") + std::string(fault_name(f));
  throw InvalidArgument("faults",
                        "unknown fault '" + std::string(name) + "' (known: " + known + ")");
}

}  // namespace flashref::cpu

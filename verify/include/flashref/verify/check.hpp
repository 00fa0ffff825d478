// `flashref check` in one call: judges another kernel's tensors against the gold under the rule
// (verification.hpp: the same judge and choice of the gradients' baseline as `flashref
// verify`), then diagnoses the failures (diagnosis/diagnose.hpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "flashref/verify/diagnosis/diagnose.hpp"
#include "flashref/verify/precision.hpp"
#include "flashref/verify/problem_data.hpp"
#include "flashref/verify/tensor_set.hpp"
#include "flashref/verify/verification.hpp"

namespace flashref::verify {

struct CheckResult {
  Precision precision;                // the precision the candidate was judged in
  std::vector<TensorReport> tensors;  // in TensorId order
  diagnosis::Diagnosis diagnosis;
  BackwardInputs backward_inputs = BackwardInputs::none;  // none when no gradient was given
  std::string backward_inputs_reason;  // why the baseline's own O and L were used; else empty
  // Non-finite inputs and scores beyond float32's range (nonfinite.hpp, input_notes).
  std::vector<std::string> input_notes;
  // What another precision would make of a failed candidate, where no finding says it: a
  // float32 candidate that passes with its products judged as 3xTF32 (--three-tf32).
  std::vector<std::string> precision_notes;
  bool passed() const;
};

// Judges each tensor of `candidate` (canonical layout) against the gold: the baseline is the
// reference backend in the problem's precision (with TF32 products under
// precision.allow_tf32), L's floor follows precision.lse_dtype; the baseline's backward runs
// from the candidate's O and L when both are given and pass. When a tensor fails, the
// precision findings come first: `lse_low_precision` when L passes as stored in bf16 or f16
// (and every value of it is one of that dtype's), `tf32_matmul` when a float32 candidate
// judged without --allow-tf32 passes against the TF32 baseline; the diagnosis
// (diagnosis/diagnose.hpp) then looks at the tensors these do not explain. A float32 candidate
// that fails as float32 and passes with --three-tf32 gets a precision note, not a finding. Worst
// indices are placed in tiles of tile_q query rows and tile_k key rows. Gradients need data.dO.
// Throws InvalidArgument for a candidate tensor of the wrong shape (field "candidate O", ...).
CheckResult check_candidate(const ProblemData& data, const TensorSet& candidate,
                            std::int64_t tile_q, std::int64_t tile_k,
                            const Precision& precision = {});

}  // namespace flashref::verify

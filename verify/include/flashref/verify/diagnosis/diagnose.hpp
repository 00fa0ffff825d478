// Diagnosis: what a wrong candidate most likely did wrong.
//
// `flashref check` judges another kernel's tensors against the gold; when one fails, this says
// why. Two kinds of evidence:
// - Hypotheses. The gold is recomputed under each plausible mistake (no softmax scale, no mask,
//   the other causal alignment, L in base 2, O not divided by l, a wrong D, dK not summed over
//   a GQA group, diagonal tiles without the index comparison, ...). A mistake is reported when
//   the candidate matches its recomputation about as closely as a correct kernel matches the
//   gold (relative L2 within the tolerance below) and at least 10 times more closely than it
//   matches the correct answer. Per tensor only the best-fitting mistake is reported.
// - Locations, for failures no hypothesis explains: NaN/inf in rows that see no key, errors
//   confined to the last partial tile for a tile size T in {16, 32, 64, 128}.
// A candidate whose tensors all pass gets no findings.
//
// Each finding has a stable code (below; the same strings as the cpu backend's test faults,
// cpu/faults.hpp) and a one-line explanation. `flashref check` (check.hpp) judges, then
// diagnoses.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "flashref/verify/problem_data.hpp"
#include "flashref/verify/tensor_set.hpp"
#include "flashref/verify/verification.hpp"

namespace flashref::verify::diagnosis {

// The stable codes, in the order hypotheses are preferred when two fit equally well.
inline constexpr std::string_view kDiagnosisCodes[] = {
    "no_scale",      "mask_ignored",   "mask_unexpected", "mask_alignment", "lse_base2",
    "lse_unshifted", "unnormalized",   "dq_scale",        "dk_scale",       "d_vector",
    "gqa_reduction", "diagonal_tiles", "nan_masked_rows", "tail_rows"};

struct Finding {
  std::string code;               // one of kDiagnosisCodes
  std::vector<TensorId> tensors;  // the tensors it explains
  std::string explanation;        // one line, for people
  nlohmann::json detail;          // values behind it (the scale that fits, the tile size, ...)
};

struct Diagnosis {
  std::vector<Finding> findings;
  // Set when the hypotheses were tested on part of a large problem (batch 0 and the query
  // heads of key/value head 0), which keeps the dozen recomputations of the gold affordable.
  std::string scope_note;
};

// `data` holds the inputs (Q, K, V, and dO when gradients are given); `candidate` the
// candidate's tensors; `judged` the rule's report of each of them (judge() in
// verification.hpp: the verdict, the limit, the baseline's relative L2 error); `gold` the gold
// for the whole problem (with backward when gradients are given). Throws InvalidArgument when a
// candidate tensor's shape does not match the problem.
Diagnosis diagnose(const ProblemData& data, const TensorSet& candidate,
                   const std::vector<TensorReport>& judged, const TensorSet& gold);

nlohmann::json to_json(const Finding& f);
nlohmann::json to_json(const Diagnosis& d);

}  // namespace flashref::verify::diagnosis

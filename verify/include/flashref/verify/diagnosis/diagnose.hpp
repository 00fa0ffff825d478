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
// - Locations and patterns, for failures no hypothesis explains: NaN/inf in rows that see no
//   key, errors confined to the last partial tile for a tile size T in {16, 32, 64, 128}, small
//   errors that all shrink the values (truncated sums).
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

#include "flashref/verify/precision.hpp"
#include "flashref/verify/problem_data.hpp"
#include "flashref/verify/tensor_set.hpp"
#include "flashref/verify/verification.hpp"

namespace flashref::verify::diagnosis {

// The stable codes, in the order hypotheses are preferred when two fit equally well.
// tf32_matmul and lse_low_precision come from check_candidate (check.hpp), which judges the
// candidate again in the precision they name; the others from diagnose().
inline constexpr std::string_view kDiagnosisCodes[] = {"lse_low_precision",
                                                       "tf32_matmul",
                                                       "no_scale",
                                                       "mask_ignored",
                                                       "mask_unexpected",
                                                       "mask_alignment",
                                                       "key_padding_unmasked",
                                                       "lse_base2",
                                                       "lse_unshifted",
                                                       "unnormalized",
                                                       "softmax_epsilon",
                                                       "dq_scale",
                                                       "dk_scale",
                                                       "d_vector",
                                                       "gqa_reduction",
                                                       "diagonal_tiles",
                                                       "max_init_zero",
                                                       "rounded_toward_zero",
                                                       "nan_masked_rows",
                                                       "masked_rows_not_zero",
                                                       "tail_rows",
                                                       "tail_garbage"};

struct Finding {
  std::string code;               // one of kDiagnosisCodes
  std::vector<TensorId> tensors;  // the tensors it explains
  std::string explanation;        // one line, for people
  nlohmann::json detail;          // values behind it (the scale that fits, the tile size, ...)
};

// Where a failed tensor's wrong elements sit, for the tensors no finding explains: a lead
// when nothing fits (elements further from the gold than the rule's limit).
struct Lead {
  TensorId tensor = TensorId::O;
  std::string summary;    // one line: "uniform: 97% of elements wrong, ..." / "a few elements"
  nlohmann::json detail;  // the counts behind it
};

struct Diagnosis {
  std::vector<Finding> findings;
  std::vector<Lead> lead;  // failed tensors no finding explains
  // Set when the hypotheses were tested on part of a large problem (batch 0 and the query
  // heads of key/value head 0), which keeps the dozen recomputations of the gold affordable.
  std::string scope_note;
};

// `data` holds the inputs (Q, K, V, and dO when gradients are given); `candidate` the
// candidate's tensors; `judged` the rule's report of each of them (judge() in
// verification.hpp: the verdict, the limit, the baseline's relative L2 error); `gold` the gold
// for the whole problem (with backward when gradients are given). Throws InvalidArgument when a
// candidate tensor's shape does not match the problem.
// `precision`: what the candidate was judged in (the hypotheses' tolerance for L follows
// precision.lse_dtype).
Diagnosis diagnose(const ProblemData& data, const TensorSet& candidate,
                   const std::vector<TensorReport>& judged, const TensorSet& gold,
                   const Precision& precision = {});

nlohmann::json to_json(const Finding& f);
nlohmann::json to_json(const Lead& l);
nlohmann::json to_json(const Diagnosis& d);

}  // namespace flashref::verify::diagnosis

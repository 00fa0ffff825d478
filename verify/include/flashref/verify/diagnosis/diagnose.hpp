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
// cpu/faults.hpp) and a one-line explanation.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>
#include <xtensor/xarray.hpp>

#include "flashref/verify/gold.hpp"
#include "flashref/verify/problem_data.hpp"
#include "flashref/verify/tensor_id.hpp"
#include "flashref/verify/verification.hpp"

namespace flashref::verify {

// The stable codes, in the order hypotheses are preferred when two fit equally well.
inline constexpr std::string_view kDiagnosisCodes[] = {
    "no_scale",      "mask_ignored",   "mask_unexpected", "mask_alignment", "lse_base2",
    "lse_unshifted", "unnormalized",   "dq_scale",        "dk_scale",       "d_vector",
    "gqa_reduction", "diagonal_tiles", "nan_masked_rows", "tail_rows"};

// One tensor the candidate produced, and what the rule said about it.
struct CandidateTensor {
  TensorId id = TensorId::O;
  // Canonical layout: O, dQ (B, H, S_q, d); dK, dV (B, H_kv, S_k, d); L (B, H, S_q).
  xt::xarray<double> values;
  bool failed = false;           // the rule's verdict
  double limit = 0.0;            // the largest |candidate - gold| per element the rule allows
  double baseline_rel_l2 = 0.0;  // the baseline's relative L2 error against the gold; 0: unknown
};

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

// `data` holds the inputs (Q, K, V, and dO when gradients are given); `gold` the gold for the
// whole problem (with backward when gradients are given). Throws InvalidArgument when a
// candidate tensor's shape does not match the problem.
Diagnosis diagnose(const ProblemData& data, const std::vector<CandidateTensor>& candidate,
                   const GoldOutputs& gold);

nlohmann::json to_json(const Finding& f);
nlohmann::json to_json(const Diagnosis& d);

// `flashref check` in one call: judges each candidate tensor present against the gold under
// the rule (the baseline is the reference backend in the problem's precision; its backward
// runs from the candidate's O and L when both are given and pass), then diagnoses the
// failures. Worst indices are placed in tiles of tile_q query rows and tile_k key rows.
// Gradients need data.dO. Throws InvalidArgument for a candidate of the wrong shape.
using CandidateSet = std::map<TensorId, xt::xarray<double>>;
struct CheckResult {
  std::vector<TensorReport> tensors;  // in TensorId order
  Diagnosis diagnosis;
  BackwardInputs backward_inputs = BackwardInputs::none;  // none when no gradient was given
  std::string backward_inputs_reason;  // why the baseline's own O and L were used; else empty
  bool passed() const;
};
CheckResult check_candidate(const ProblemData& data, const CandidateSet& candidate,
                            std::int64_t tile_q, std::int64_t tile_k);

}  // namespace flashref::verify

// The states layout on disk (verify/states.hpp, docs/checking-your-kernel.md, "States"):
// `flashref trace --q ... --out DIR` writes it, `flashref check --states DIR` reads it. Also
// the --select option both take, the size limit, and check's states report as text.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "flashref/verify/states.hpp"

namespace flashref::cli {

// At most this many elements in acc (the largest array): 2^26 floats, 256 MiB as float32 and
// 512 MiB as the double gold; the judge holds the gold, the baseline and the candidate
// (docs/verification.md, "Limits"). A larger problem is refused with a message naming
// --select, which keeps one head (or one query tile).
inline constexpr double kMaxStateElements = 67108864.0;

// "b,h" or "b,h,i" into `grid` (its b, h, i); throws InvalidArgument("--select", ...).
void parse_select(const std::string& text, verify::StatesGrid& grid);

// Throws InvalidArgument("--select", ...) when the states of `shape` exceed kMaxStateElements.
void require_states_fit(const Problem& p, const verify::StatesShape& shape);

struct WrittenState {
  std::string path, dtype, quantity;
  std::vector<std::size_t> shape;
};

// DIR/{m,l,acc}.npy (the baseline, float32) and DIR/gold/{m,l,acc}.npy (float64). Creates DIR
// and DIR/gold; replaces those six files and nothing else. Throws InvalidArgument("--out", ...)
// when DIR cannot be made.
std::vector<WrittenState> write_states(const std::string& dir, const verify::ForwardStates& base,
                                       const verify::ForwardStates& gold);

// Throws InvalidArgument("--select", ...) when the backward's seven arrays of `shape` together
// exceed kMaxStateElements.
void require_backward_states_fit(const Problem& p, const verify::StatesShape& shape);

// DIR/{D,P,dP,dS,dQ,dV,dK}.npy (the baseline, float32) and DIR/gold/ (float64), as
// write_states.
std::vector<WrittenState> write_backward_states(const std::string& dir,
                                                const verify::BackwardStates& base,
                                                const verify::BackwardStates& gold);

// Whether DIR holds any of the forward's (m, l, acc) or the backward's (D, P, ...) files.
bool has_forward_states(const std::string& dir);
bool has_backward_states(const std::string& dir);

// Reads DIR's backward files, those that exist (at least one). D may also be (B, H, S_q), the
// kernel's own D buffer, when no query tile is selected. Throws InvalidArgument naming the file.
verify::CandidateBackwardStates read_backward_states(const std::string& dir, const Problem& p,
                                                     const verify::StatesShape& shape,
                                                     std::vector<std::string>& files_read);

// The backward states section of check's report.
std::string format_backward_states(const verify::BackwardStatesReport& r,
                                   const verify::StatesShape& shape,
                                   const std::vector<std::string>& files);

// Reads DIR/m.npy, l.npy, acc.npy, those that exist (at least one). With one head (and no
// head selected), files without the head axis are taken too. Throws InvalidArgument naming
// --states or the file.
verify::CandidateStates read_states(const std::string& dir, const Problem& p,
                                    const verify::StatesShape& shape,
                                    std::vector<std::string>& files_read);

// The states section of check's report.
std::string format_states(const verify::StatesReport& r, const verify::StatesShape& shape,
                          const std::vector<std::string>& files);

}  // namespace flashref::cli

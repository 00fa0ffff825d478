// A problem read from .npy files, for `flashref run` and `flashref check`: the options that
// name the input files, the checks that their shapes agree (errors name the file), and the
// conversion of outputs and candidate tensors between the files' layout and the canonical one.
//
// Layouts: 4-D (B, H, S, d) for Q, K, V, O, dO, dQ, dK, dV and 3-D (B, H, S_q) for L; or the
// course's 3-D (B, S, d) (one head), whose outputs keep that layout ((B, S_q) for L).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <xtensor/xarray.hpp>

#include "flashref/verify/problem_data.hpp"
#include "flashref/verify/runner.hpp"
#include "flashref/verify/tensor_id.hpp"

namespace flashref::cli {

// The options naming the inputs and the problem: --q --k --v [--do] [--mask] [--scale]
// [--dtype] [--tile].
class NpyProblemOptions {
 public:
  // `tile_help` says what --tile means for the subcommand.
  void add_to(CLI::App& app, const std::string& tile_help);
  std::string q, k, v, dO;  // paths; dO empty when not given
  std::string mask = "none";
  std::string dtype;  // empty: the dtype of q's file (f32 or f16)
  std::string tile;   // "Bq,Bk", empty: the backend's default
  CLI::Option* scale_opt = nullptr;
  double scale = 0.0;

  std::pair<int, int> tiles() const;  // (0, 0) when --tile is absent
};

struct NpyProblem {
  verify::ProblemData data;    // dO empty unless --do was given
  bool course_layout = false;  // the inputs were 3-D (B, S, d)
  // One line per input with finite values that overflow when rounded to the problem's dtype.
  std::vector<std::string> overflows;
};

// Reads and checks the inputs. Throws InvalidArgument naming the file (or the option) and what
// is wrong: unreadable files, ranks that differ, shapes that disagree, H not divisible by H_kv.
NpyProblem load_npy_problem(const NpyProblemOptions& options);

// A candidate tensor from `path` in the canonical layout (tensor_set.hpp): 4-D files, or
// 3-D (B, S, d) files when the tensor has one head; L as (B, H, S_q), or (B, S_q) with one head.
xt::xarray<double> load_candidate(const std::string& path, verify::TensorId id,
                                  const Problem& problem);

// What a backend wrote, as float32 arrays in the inputs' layout: "o", "lse", and with a
// backward "dq", "dk", "dv". Values are exact (every f16/bf16 value is a float).
std::vector<std::pair<std::string, xt::xarray<float>>> output_arrays(const verify::RunOutputs& out,
                                                                     const Problem& problem,
                                                                     bool course_layout);

}  // namespace flashref::cli

// The non-finite policy (docs/verification.md, "Non-finite inputs and outputs"): the gold
// follows IEEE arithmetic consistently (a NaN row is NaN in O and L, never L = -inf); `check`
// names non-finite inputs and passes a candidate that matches the gold's NaN, without calling
// them masked rows; `run` and `trace` warn about non-finite outputs, naming the tensor and the
// first index, and say why (a NaN input, an input that overflows f16, scores beyond float32).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "cli_harness.hpp"
#include "flashref/verify/gold.hpp"
#include "flashref/verify/nonfinite.hpp"
#include "flashref/verify/npy.hpp"
#include "flashref/verify/problem_data.hpp"

namespace {

using namespace flashref;
using flashref::testing::CliRun;
using flashref::testing::run_cli;
using flashref::testing::ScratchDir;

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// (1, 1, S, d) float32 random inputs; Q[0, 0, nan_row, 0] = `q00` when nan_row >= 0.
verify::ProblemData inputs(std::int64_t S, std::int64_t d, std::int64_t row, float value) {
  const Problem p = make_problem(1, 1, 1, S, S, d, Mask::none, DType::f32);
  verify::ProblemData data = verify::make_problem_data(p, {5, false, verify::Layout::bhsd});
  if (row >= 0) data.q.set(0, 0, row, 0, value);
  return data;
}

// Q, K, V (and dO unless forward_only) of `data` as (1, 1, S, d) float32 files in `dir`;
// returns the options naming them.
std::string save(const verify::ProblemData& data, const ScratchDir& dir,
                 bool forward_only = false) {
  std::string args;
  const std::pair<const char*, const verify::HostTensor*> tensors[] = {
      {"q", &data.q}, {"k", &data.k}, {"v", &data.v}, {"do", &data.dO}};
  for (const auto& [name, t] : tensors) {
    if (forward_only && t == &data.dO) continue;
    xt::xarray<float> a = xt::xarray<float>::from_shape(
        {1, 1, static_cast<std::size_t>(t->S()), static_cast<std::size_t>(t->d())});
    std::size_t n = 0;
    for (std::int64_t s = 0; s < t->S(); ++s)
      for (std::int64_t i = 0; i < t->d(); ++i) a.flat(n++) = t->get(0, 0, s, i);
    const std::string path = dir.file(std::string(name) + ".npy");
    verify::write_npy(path, a);
    args += std::string(" --") + name + " " + path;
  }
  return args;
}

TEST(NonFiniteGold, ARowWithANaNScoreIsNaNInOAndL) {
  const verify::ProblemData data = inputs(6, 4, 2, std::numeric_limits<float>::quiet_NaN());
  const verify::TensorSet gold = verify::compute_gold(data, true);
  const auto& L = gold.at(verify::TensorId::L);
  const auto& O = gold.at(verify::TensorId::O);
  EXPECT_TRUE(std::isnan(L(0, 0, 2))) << L(0, 0, 2);  // was -inf, a masked row's value
  for (std::size_t c = 0; c < 4; ++c) EXPECT_TRUE(std::isnan(O(0, 0, 2, c)));
  for (std::size_t s : {0u, 1u, 3u, 4u, 5u}) EXPECT_TRUE(std::isfinite(L(0, 0, s))) << s;
}

TEST(NonFiniteGold, APlusInfinityScoreIsNaNNotMasked) {
  // +inf in Q makes the row's scores +-inf: exp(inf - inf) = NaN, as IEEE says.
  const verify::ProblemData data = inputs(4, 3, 1, std::numeric_limits<float>::infinity());
  const verify::TensorSet gold = verify::compute_gold(data, false);
  EXPECT_TRUE(std::isnan(gold.at(verify::TensorId::L)(0, 0, 1)));
}

TEST(NonFiniteCli, RunWarnsAndCheckPassesItsOwnOutputWithoutAMaskedRowsFinding) {
  ScratchDir dir;
  const std::string in = save(inputs(9, 4, 3, std::numeric_limits<float>::quiet_NaN()), dir);
  const CliRun run = run_cli("run --backend cpu" + in + " --out " + dir.file("out"));
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_TRUE(has(run.err, "warning: output O holds")) << run.err;
  EXPECT_TRUE(has(run.err, "(first at [0,0,3,0]")) << run.err;
  EXPECT_TRUE(has(run.err, "input Q holds 1 NaN")) << run.err;
  const std::string out = dir.file("out");
  const CliRun check =
      run_cli("check" + in + " --o " + out + "/o.npy --lse " + out + "/lse.npy --dq " + out +
              "/dq.npy --dk " + out + "/dk.npy --dv " + out + "/dv.npy --json");
  EXPECT_EQ(check.exit_code, 0) << check.out << check.err;
  EXPECT_TRUE(has(check.out, "\"input_notes\"")) << check.out;
  EXPECT_TRUE(has(check.out, "Q holds 1 NaN (first at [0,0,3,0]")) << check.out;
  EXPECT_FALSE(has(check.out, "nan_masked_rows")) << check.out;
}

TEST(NonFiniteCli, AnInputThatOverflowsF16IsNamed) {
  ScratchDir dir;
  const std::string in = save(inputs(5, 4, 2, 1.0e5f), dir);
  const CliRun run =
      run_cli("run --backend reference --dtype f16" + in + " --out " + dir.file("out"));
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_TRUE(has(run.err, "1 finite value(s) overflow to infinity when rounded to f16"))
      << run.err;
  EXPECT_TRUE(has(run.err, "65504")) << run.err;
}

TEST(NonFiniteCli, ScoresBeyondFloat32AreSaidToBe) {
  ScratchDir dir;
  const std::string in = save(inputs(8, 4, -1, 0.0f), dir);
  const CliRun run = run_cli("run --backend cpu --scale 1e38" + in + " --out " + dir.file("out"));
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_TRUE(has(run.err, "beyond float32's largest value")) << run.err;
  const CliRun trace = run_cli("trace --shape 1,1,4,4,4 --scale 1e38 --backward");
  ASSERT_EQ(trace.exit_code, 0) << trace.err;
  EXPECT_TRUE(has(trace.err, "flashref trace: warning: output")) << trace.err;
  EXPECT_TRUE(has(trace.err, "beyond float32's largest value")) << trace.err;
}

TEST(NonFiniteCli, VerifySaysWhenTheScoresExceedFloat32AndStillFailsTheNaN) {
  const CliRun r = run_cli("verify --backends cpu --shape 1,1,6,6,4 --scale 1e38 --json");
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;  // the NaN the gold lacks still fails
  EXPECT_TRUE(has(r.out, "\"input_notes\"")) << r.out;
  EXPECT_TRUE(has(r.out, "beyond float32's largest value")) << r.out;
}

// Scores past 2^31 / log2(e): the note names the folded softmax's range (run 32g lost a row of
// the sm90 bf16 forward at |S| ~ 1e37); below it no note.
TEST(NonFiniteNotes, ScoresPastTheFoldsRangeAreNamedBelowItNothing) {
  const verify::ProblemData data = inputs(4, 4, -1, 0.0f);
  const std::vector<std::string> past = verify::input_notes(data, 2.0e9);
  ASSERT_EQ(past.size(), 1u);
  EXPECT_TRUE(has(past[0], "2^31 / log2(e)")) << past[0];
  EXPECT_TRUE(has(past[0], "sees no key")) << past[0];
  EXPECT_TRUE(verify::input_notes(data, 1.0e9).empty());
  // Past float32's exp2 range the earlier note takes over, alone.
  const std::vector<std::string> beyond = verify::input_notes(data, 3.0e38);
  ASSERT_EQ(beyond.size(), 1u);
  EXPECT_TRUE(has(beyond[0], "S * log2(e) does not")) << beyond[0];
}

TEST(NonFiniteCli, FiniteScoresThatFitFloat32GiveNoWarning) {
  ScratchDir dir;
  const std::string in = save(inputs(8, 4, -1, 0.0f), dir);
  const CliRun run = run_cli("run --backend cpu" + in + " --out " + dir.file("out"));
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_FALSE(has(run.err, "warning")) << run.err;
}

TEST(NonFiniteCli, ScoresUpToFloat32sLargestGiveFiniteOutputsInEveryCpuBackend) {
  // The scale that puts max |S| at 3e38, just under float32's largest value: the math is
  // finite and the scores fit, so neither the tiled cpu backend (exp(S - m) on S itself) nor
  // the reference may produce a NaN or an infinity.
  const verify::ProblemData data = inputs(12, 4, -1, 0.0f);
  double max_dot = 0.0;
  for (std::int64_t i = 0; i < 12; ++i)
    for (std::int64_t j = 0; j < 12; ++j) {
      double dot = 0.0;
      for (std::int64_t c = 0; c < 4; ++c)
        dot += double(data.q.get(0, 0, i, c)) * data.k.get(0, 0, j, c);
      max_dot = std::max(max_dot, std::fabs(dot));
    }
  char scale[64];
  std::snprintf(scale, sizeof scale, "%.9g", 3.0e38 / max_dot);
  ScratchDir dir;
  const std::string in = save(data, dir, /*forward_only=*/true);
  // Tiles of 5 x 3 make the cpu's running max rescale O and l across key tiles.
  for (const std::string backend : {"cpu --tile 5,3", "reference"}) {
    const CliRun run = run_cli("run --backend " + backend + " --scale " + scale + in + " --out " +
                               dir.file(backend.substr(0, 3)));
    ASSERT_EQ(run.exit_code, 0) << backend << run.out << run.err;
    EXPECT_FALSE(has(run.err, "warning")) << backend << ": " << run.err;
  }
}

TEST(NonFiniteOutputs, AMaskedRowsMinusInfinityIsNotWarnedAbout) {
  // causal-bottom-right with S_q > S_k: the first rows see no key, and their L = -inf is right.
  const Problem p = make_problem(1, 1, 1, 5, 3, 2, Mask::causal_bottom_right, DType::f32);
  verify::TensorSet out;
  out[verify::TensorId::L] = xt::zeros<double>({1, 1, 5});
  out[verify::TensorId::L](0, 0, 0) = -std::numeric_limits<double>::infinity();
  EXPECT_TRUE(verify::nonfinite_outputs(out, p).empty());
  out[verify::TensorId::L](0, 0, 4) = -std::numeric_limits<double>::infinity();  // sees keys
  const auto w = verify::nonfinite_outputs(out, p);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].neg_inf, 1);
  EXPECT_EQ(w[0].first, (std::vector<std::int64_t>{0, 0, 4}));
}

}  // namespace

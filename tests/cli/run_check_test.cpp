// `flashref run` and `flashref check` end to end, through the built binary: outputs equal the
// backend's in-process outputs bit for bit, malformed or mismatched files are exit-2 errors
// naming the file (and nothing is written), and check judges and diagnoses dumped tensors.
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_harness.hpp"
#include "flashref/backend.hpp"
#include "flashref/cpu/backend.hpp"
#include "flashref/cpu/faults.hpp"
#include "flashref/verify/npy.hpp"
#include "flashref/verify/problem_data.hpp"
#include "flashref/verify/runner.hpp"
#include "npy_bytes.hpp"

namespace {

using namespace flashref;
using namespace flashref::verify;
using flashref::testing::CliRun;
using flashref::testing::run_cli;
using flashref::testing::ScratchDir;

// A HostTensor's values as a float array: (B, H, S, d), or (B, S, d) in the course layout.
xt::xarray<float> as_array(const HostTensor& t, bool course) {
  std::vector<std::size_t> shape{std::size_t(t.B()), std::size_t(t.H()), std::size_t(t.S()),
                                 std::size_t(t.d())};
  if (course) shape.erase(shape.begin() + 1);
  xt::xarray<float> a = xt::xarray<float>::from_shape(shape);
  std::size_t n = 0;
  for (std::int64_t b = 0; b < t.B(); ++b)
    for (std::int64_t h = 0; h < t.H(); ++h)
      for (std::int64_t s = 0; s < t.S(); ++s)
        for (std::int64_t i = 0; i < t.d(); ++i) a.flat(n++) = t.get(b, h, s, i);
  return a;
}

std::uint32_t bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// Asserts that a written .npy holds exactly `expected`'s bits in `expected`'s shape.
void expect_same_bits(const std::string& path, const xt::xarray<float>& expected) {
  const NpyArray got = read_npy(path);
  EXPECT_EQ(got.dtype, DType::f32) << path;
  ASSERT_EQ(got.values.shape(), expected.shape()) << path;
  std::size_t differing = 0;
  for (std::size_t n = 0; n < expected.size(); ++n) {
    if (bits(got.values.flat(n)) != bits(expected.flat(n))) ++differing;
  }
  EXPECT_EQ(differing, 0u) << path;
}

struct RunCase {
  Problem problem;
  bool course = false;     // 3-D (B, S, d) files
  bool f16_files = false;  // write the inputs as float16 and let the dtype follow them
  bool backward = true;
  int tile_q = 16, tile_k = 8;
};

void write_inputs(const ScratchDir& dir, const ProblemData& data, const RunCase& c) {
  const DType file_dtype = c.f16_files ? DType::f16 : DType::f32;
  write_npy(dir.file("q.npy"), as_array(data.q, c.course), file_dtype);
  write_npy(dir.file("k.npy"), as_array(data.k, c.course), file_dtype);
  write_npy(dir.file("v.npy"), as_array(data.v, c.course), file_dtype);
  write_npy(dir.file("do.npy"), as_array(data.dO, c.course), file_dtype);
}

std::string input_args(const ScratchDir& dir, bool with_do = true) {
  return "--q " + dir.file("q.npy") + " --k " + dir.file("k.npy") + " --v " + dir.file("v.npy") +
         (with_do ? " --do " + dir.file("do.npy") : "");
}

TEST(CliRun, OutputsEqualTheBackendsInProcessOutputsBitForBit) {
  const RunCase cases[] = {
      // GQA, bottom-right causal with fully masked rows, bf16 from float32 files.
      {make_problem(2, 4, 2, 37, 23, 12, Mask::causal_bottom_right, DType::bf16)},
      // The course's layout: 3-D (B, S, d), causal, float32.
      {make_problem(3, 1, 1, 40, 40, 8, Mask::causal_top_left, DType::f32), true},
      // float16 files: the dtype follows the Q file; forward only.
      {make_problem(1, 2, 1, 20, 33, 5, Mask::none, DType::f16), false, true, false, 7, 64},
  };
  for (const RunCase& c : cases) {
    SCOPED_TRACE(describe(c.problem));
    ScratchDir dir;
    const ProblemData data = make_problem_data(c.problem, {9, false, Layout::bhsd});
    write_inputs(dir, data, c);
    std::string args = "run --backend cpu " + input_args(dir, c.backward) + " --mask " +
                       std::string(mask_name(c.problem.mask)) + " --tile " +
                       std::to_string(c.tile_q) + "," + std::to_string(c.tile_k) + " --out " +
                       dir.file("out");
    if (!c.f16_files) args += " --dtype " + std::string(dtype_name(c.problem.dtype));
    const CliRun r = run_cli(args);
    ASSERT_EQ(r.exit_code, 0) << r.err;

    RunOptions options;
    options.exec.tile_q = c.tile_q;
    options.exec.tile_k = c.tile_k;
    options.backward = c.backward;
    const RunOutputs in_process = run_backend(*make_backend("cpu"), data, options);
    expect_same_bits(dir.file("out/o.npy"), as_array(in_process.o, c.course));
    xt::xarray<float> lse = in_process.lse;
    if (c.course) lse.reshape({std::size_t(c.problem.B), std::size_t(c.problem.S_q)});
    expect_same_bits(dir.file("out/lse.npy"), lse);
    if (c.backward) {
      expect_same_bits(dir.file("out/dq.npy"), as_array(in_process.dq, c.course));
      expect_same_bits(dir.file("out/dk.npy"), as_array(in_process.dk, c.course));
      expect_same_bits(dir.file("out/dv.npy"), as_array(in_process.dv, c.course));
    } else {
      EXPECT_FALSE(std::filesystem::exists(dir.file("out/dq.npy")));
    }
  }
}

// Runs `run` with q/k/v/do replaced by the named bytes and expects exit 2, a message naming
// the file and containing `phrase`, and no output directory.
void expect_refused(const std::string& role, const std::string& bytes, const std::string& phrase) {
  SCOPED_TRACE(role + ": " + phrase);
  ScratchDir dir;
  const Problem p = make_problem(1, 2, 1, 6, 6, 4);
  const ProblemData data = make_problem_data(p, {1, false, Layout::bhsd});
  write_inputs(dir, data, RunCase{p});
  const std::string bad = dir.file("bad_" + role + ".npy");
  {
    std::ofstream out(bad, std::ios::binary);
    out << bytes;
  }
  std::string args = "run " + input_args(dir) + " --out " + dir.file("out");
  const std::string original = dir.file(role + ".npy");
  args.replace(args.find(original), original.size(), bad);
  const CliRun r = run_cli(args);
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find(bad), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(phrase), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir.file("out"))) << "an output was written";
}

TEST(CliRun, MalformedFilesAreExit2ErrorsNamingTheFile) {
  using flashref::testing::float_bytes;
  using flashref::testing::npy_bytes;
  const std::string data(2 * 6 * 4 * 4, '\0');  // (1, 2, 6, 4) float32
  auto dict = [](const std::string& descr, const std::string& fortran, const std::string& shape) {
    return "{'descr': '" + descr + "', 'fortran_order': " + fortran + ", 'shape': " + shape + ", }";
  };
  expect_refused("q", "this is not numpy", "bad magic");
  expect_refused("q", npy_bytes(dict("<f8", "False", "(1, 2, 6, 4)"), data + data), "float64");
  expect_refused("k", npy_bytes(dict("<f4", "True", "(1, 1, 6, 4)"), data.substr(0, 96)),
                 "Fortran");
  expect_refused("v", npy_bytes(dict(">f4", "False", "(1, 1, 6, 4)"), data.substr(0, 96)),
                 "big-endian");
  expect_refused("q", npy_bytes(dict("<f4", "False", "(1, 2, 6, 4)"), data.substr(0, 100)),
                 "truncated data");
  expect_refused("do", npy_bytes(dict("<f4", "False", "(1, 2, 6, 4)"), data, 5, 0), "version 5.0");
}

TEST(CliRun, MismatchedShapesAreExit2ErrorsNamingTheFile) {
  using flashref::testing::npy_bytes;
  auto f32 = [](const std::string& shape, std::size_t count) {
    return npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + ", }",
                     std::string(count * 4, '\0'));
  };
  expect_refused("k", f32("(1, 1, 6, 5)", 30), "head dim d must agree");  // d differs
  expect_refused("k", f32("(2, 1, 6, 4)", 48), "batch B");                // B differs
  expect_refused("k", f32("(1, 6, 4)", 24), "rank 3");                    // layouts mixed
  expect_refused("v", f32("(1, 1, 7, 4)", 28), "must equal");             // V is not K
  expect_refused("k", f32("(1, 3, 6, 4)", 72), "do not divide");          // H % H_kv
  expect_refused("do", f32("(1, 2, 5, 4)", 40), "must equal");            // dO is not Q
  expect_refused("q", f32("(1, 48)", 48), "4-D (B, H, S, d) or 3-D");     // wrong rank
}

TEST(CliRun, MissingFileUnknownBackendAndUsageErrorsAreExit2) {
  ScratchDir dir;
  CliRun r = run_cli("run --q " + dir.file("nope.npy") + " --k a --v b --out " + dir.file("o"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find(dir.file("nope.npy")), std::string::npos) << r.err;
  r = run_cli("run --backend nosuch --q a --k b --v c --out " + dir.file("o"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("nosuch"), std::string::npos) << r.err;
  r = run_cli("run --k b --v c --out " + dir.file("o"));  // --q missing
  EXPECT_EQ(r.exit_code, 2);
  r = run_cli("check --q a --k b --v c --tile 0,4");
  EXPECT_EQ(r.exit_code, 2);
}

TEST(CliCheck, TheBackendsOwnOutputsPassWithNoFindings) {
  ScratchDir dir;
  const RunCase c{make_problem(2, 4, 2, 50, 50, 16, Mask::causal_top_left, DType::f32)};
  const ProblemData data = make_problem_data(c.problem, {4, false, Layout::bhsd});
  write_inputs(dir, data, c);
  ASSERT_EQ(run_cli("run " + input_args(dir) + " --mask causal --out " + dir.file("out")).exit_code,
            0);
  const std::string out = dir.file("out/");
  const CliRun r = run_cli("check " + input_args(dir) + " --mask causal --o " + out +
                           "o.npy --lse " + out + "lse.npy --dq " + out + "dq.npy --dk " + out +
                           "dk.npy --dv " + out + "dv.npy --json");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j.at("passed").get<bool>());
  EXPECT_TRUE(j.at("findings").empty());
  EXPECT_EQ(j.at("tensors").size(), 5u);
  EXPECT_EQ(j.at("problem").at("H_kv"), 2);
  EXPECT_EQ(j.at("dtype"), "f32");
  EXPECT_FALSE(j.at("rule").get<std::string>().empty());
  for (const auto& t : j.at("tensors")) {
    EXPECT_EQ(t.at("verdict"), "pass");
    for (const char* key :
         {"max_abs", "mean_abs", "max_rel", "rel_l2", "nan", "pos_inf", "neg_inf"}) {
      EXPECT_TRUE(t.at("candidate").contains(key)) << key;
    }
    EXPECT_TRUE(t.at("candidate").at("worst").contains("s"));
    EXPECT_LE(t.at("candidate_err").get<double>(), t.at("limit").get<double>());
    EXPECT_TRUE(t.contains("baseline_err"));
  }
}

TEST(CliCheck, DiagnosesAPlantedBugFromDumpedTensors) {
  ScratchDir dir;
  const RunCase c{make_problem(1, 2, 2, 40, 40, 8, Mask::none, DType::f32)};
  const ProblemData data = make_problem_data(c.problem, {2, false, Layout::bhsd});
  write_inputs(dir, data, c);
  const RunOptions options{};
  const auto lse_base2 =
      cpu::make_backend({.faults = static_cast<std::uint32_t>(cpu::Fault::lse_base2)});
  const RunOutputs buggy = run_backend(*lse_base2, data, options);
  write_npy(dir.file("o.npy"), as_array(buggy.o, false));
  write_npy(dir.file("lse.npy"), xt::xarray<float>(buggy.lse));

  const std::string args = "check " + input_args(dir, false) + " --o " + dir.file("o.npy") +
                           " --lse " + dir.file("lse.npy");
  const CliRun text = run_cli(args);
  EXPECT_EQ(text.exit_code, 1) << text.out << text.err;
  EXPECT_NE(text.out.find("[lse_base2] (L)"), std::string::npos) << text.out;
  const CliRun json = run_cli(args + " --json");
  EXPECT_EQ(json.exit_code, 1);
  const nlohmann::json j = nlohmann::json::parse(json.out);
  EXPECT_FALSE(j.at("passed").get<bool>());
  ASSERT_EQ(j.at("findings").size(), 1u) << json.out;
  EXPECT_EQ(j.at("findings")[0].at("code"), "lse_base2");
  EXPECT_EQ(j.at("findings")[0].at("tensors"), nlohmann::json::array({"L"}));
  EXPECT_FALSE(j.at("findings")[0].at("explanation").get<std::string>().empty());
  EXPECT_EQ(j.at("tensors")[0].at("verdict"), "pass");  // O
  EXPECT_EQ(j.at("tensors")[1].at("verdict"), "fail");  // L
}

TEST(CliCheck, CandidateOfTheWrongShapeIsAnExit2ErrorNamingTheFile) {
  ScratchDir dir;
  const RunCase c{make_problem(1, 2, 1, 10, 12, 4)};
  const ProblemData data = make_problem_data(c.problem, {2, false, Layout::bhsd});
  write_inputs(dir, data, c);
  write_npy(dir.file("o.npy"), xt::xarray<float>::from_shape({1, 2, 12, 4}));
  const CliRun r = run_cli("check " + input_args(dir) + " --o " + dir.file("o.npy"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find(dir.file("o.npy")), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("(1, 2, 10, 4)"), std::string::npos) << r.err;
  const CliRun no_do = run_cli("check " + input_args(dir, false) + " --dq " + dir.file("o.npy"));
  EXPECT_EQ(no_do.exit_code, 2);
  EXPECT_NE(no_do.err.find("--do"), std::string::npos) << no_do.err;
}

}  // namespace

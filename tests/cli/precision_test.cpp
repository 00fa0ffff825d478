// The precision modes on the command line (issue 9): --allow-tf32 and --lse-dtype in check,
// run, verify and fuzz, and --three-tf32 in check, shown in the header and the JSON; bad values
// are exit-2 errors naming the option; check names a TF32 kernel and a padded-key kernel from
// dumped tensors, and passes the TF32 kernel under --allow-tf32 and a 3xTF32 one under
// --three-tf32.
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "../verify/kernel_corpus.hpp"
#include "cli_harness.hpp"
#include "flashref/verify/npy.hpp"
#include "flashref/verify/problem_data.hpp"

namespace {

using namespace flashref;
using namespace flashref::verify;
using flashref::testing::CliRun;
using flashref::testing::contains;
using flashref::testing::run_cli;
using flashref::testing::ScratchDir;

xt::xarray<float> as_array(const HostTensor& t) {
  return xt::cast<float>(t.to_double());
}

// Writes q, k, v of a seeded problem and the corpus kernel's o and lse; returns the check
// command's arguments.
std::string dump(const ScratchDir& dir, const Problem& p, const corpus::Kernel& k) {
  const ProblemData data = make_problem_data(p, {7, false, Layout::bhsd});
  // NumPy has no bfloat16: bf16 inputs go as float32 (exact) with --dtype bf16.
  const DType file = p.dtype == DType::bf16 ? DType::f32 : p.dtype;
  write_npy(dir.file("q.npy"), as_array(data.q), file);
  write_npy(dir.file("k.npy"), as_array(data.k), file);
  write_npy(dir.file("v.npy"), as_array(data.v), file);
  const TensorSet out = corpus::run_kernel(data, k);
  write_npy(dir.file("o.npy"), xt::xarray<float>(xt::cast<float>(out.at(TensorId::O))));
  write_npy(dir.file("lse.npy"), xt::xarray<float>(xt::cast<float>(out.at(TensorId::L))));
  return "check --q " + dir.file("q.npy") + " --k " + dir.file("k.npy") + " --v " +
         dir.file("v.npy") + " --mask " + std::string(mask_name(p.mask)) + " --o " +
         dir.file("o.npy") + " --lse " + dir.file("lse.npy") +
         (p.dtype == DType::bf16 ? " --dtype bf16" : "");
}

TEST(CliPrecision, BadLseDtypeIsAnExit2ErrorNamingTheOption) {
  ScratchDir dir;
  const Problem p = make_problem(1, 1, 1, 20, 20, 8, Mask::none, DType::f32);
  const std::string check = dump(dir, p, {});
  for (const std::string& args :
       {check + " --lse-dtype f64", std::string("verify --forward-only --lse-dtype int8"),
        std::string("fuzz --cases 1 --lse-dtype bfloat17"),
        "run --q " + dir.file("q.npy") + " --k " + dir.file("k.npy") + " --v " + dir.file("v.npy") +
            " --out " + dir.file("out") + " --lse-dtype x"}) {
    const CliRun r = run_cli(args);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.out << r.err;
    EXPECT_TRUE(contains(r.err, "--lse-dtype")) << args << "\n" << r.err;
    EXPECT_TRUE(contains(r.err, "f32, bf16 or f16")) << r.err;
  }
}

TEST(CliPrecision, Tf32KernelIsNamedThenPassesUnderAllowTf32) {
  ScratchDir dir;
  corpus::Kernel tf32;
  tf32.tf32 = true;
  const Problem p = make_problem(1, 2, 1, 100, 100, 16, Mask::causal_top_left, DType::f32);
  const std::string args = dump(dir, p, tf32);
  const CliRun text = run_cli(args);
  EXPECT_EQ(text.exit_code, 1) << text.out << text.err;
  EXPECT_TRUE(contains(text.out, "precision: products f32 inputs, L f32, gradients f32"))
      << text.out;
  EXPECT_TRUE(contains(text.out, "[tf32_matmul] (O, L)")) << text.out;
  const CliRun json = run_cli(args + " --json");
  const nlohmann::json j = nlohmann::json::parse(json.out);
  ASSERT_EQ(j.at("findings").size(), 1u) << json.out;
  EXPECT_EQ(j.at("findings")[0].at("code"), "tf32_matmul");
  EXPECT_FALSE(j.at("precision").at("allow_tf32").get<bool>());

  const CliRun pass = run_cli(args + " --allow-tf32 --json");
  EXPECT_EQ(pass.exit_code, 0) << pass.out << pass.err;
  const nlohmann::json k = nlohmann::json::parse(pass.out);
  EXPECT_TRUE(k.at("passed").get<bool>());
  EXPECT_TRUE(k.at("findings").empty());
  EXPECT_EQ(k.at("precision").at("products"), "tf32");
  const CliRun header = run_cli(args + " --allow-tf32");
  EXPECT_TRUE(contains(header.out, "precision: products TF32 (--allow-tf32)")) << header.out;
}

// --three-tf32: a 3xTF32 kernel (CUTLASS's split) passes and the report says the products were
// judged as 3xTF32; a 3xTF32 kernel with a real mistake is still failed and named under it; and
// with --allow-tf32, or with --states, it is an exit-2 error naming the option, before any
// file is read.
TEST(CliPrecision, ThreeTf32JudgesA3xTf32KernelAndStillNamesAMistake) {
  ScratchDir dir;
  corpus::Kernel k;
  k.three_tf32 = true;
  k.three_tf32_big_truncated = true;
  const Problem p = make_problem(1, 2, 1, 100, 100, 3, Mask::causal_top_left, DType::f32);
  const std::string args = dump(dir, p, k);
  const CliRun pass = run_cli(args + " --three-tf32 --json");
  EXPECT_EQ(pass.exit_code, 0) << pass.out << pass.err;
  const nlohmann::json j = nlohmann::json::parse(pass.out);
  EXPECT_TRUE(j.at("findings").empty());
  EXPECT_EQ(j.at("precision").at("products"), "3xtf32");
  EXPECT_TRUE(j.at("precision").at("three_tf32").get<bool>());
  const CliRun header = run_cli(args + " --three-tf32");
  EXPECT_TRUE(contains(header.out, "precision: products 3xTF32 (--three-tf32)")) << header.out;

  ScratchDir padded_dir;
  corpus::Kernel padded = k;
  padded.pad_keys_unmasked = true;
  const Problem q = make_problem(1, 2, 1, 100, 100, 16, Mask::none, DType::f32);
  const CliRun fail = run_cli(dump(padded_dir, q, padded) + " --three-tf32 --json");
  EXPECT_EQ(fail.exit_code, 1) << fail.out << fail.err;
  const nlohmann::json f = nlohmann::json::parse(fail.out);
  ASSERT_EQ(f.at("findings").size(), 1u) << fail.out;
  EXPECT_EQ(f.at("findings")[0].at("code"), "key_padding_unmasked");
  // Judged as float32, the same mistake gets no note: it fails as 3xTF32 too.
  const CliRun float32 = run_cli(dump(padded_dir, q, padded) + " --json");
  const nlohmann::json g = nlohmann::json::parse(float32.out);
  EXPECT_EQ(g.at("findings")[0].at("code"), "key_padding_unmasked") << float32.out;
  EXPECT_TRUE(g.at("precision_notes").empty()) << float32.out;

  const std::string missing = " --q " + dir.file("none.npy") + " --k " + dir.file("none.npy") +
                              " --v " + dir.file("none.npy") + " --o " + dir.file("none.npy");
  for (const std::string& bad :
       {"check --three-tf32 --allow-tf32" + missing,
        "check --three-tf32 --tile 16,16 --states " + dir.file("s") + missing}) {
    const CliRun r = run_cli(bad);
    EXPECT_EQ(r.exit_code, 2) << bad << "\n" << r.out << r.err;
    EXPECT_TRUE(contains(r.err, "--three-tf32")) << r.err;
    EXPECT_FALSE(contains(r.err, "none.npy")) << r.err;
  }
}

TEST(CliPrecision, Bf16LseIsNamedThenPassesUnderLseDtype) {
  ScratchDir dir;
  corpus::Kernel k;
  k.lse_dtype = DType::bf16;
  const Problem p = make_problem(1, 2, 1, 100, 70, 16, Mask::causal_bottom_right, DType::bf16);
  const std::string args = dump(dir, p, k);
  const CliRun fail = run_cli(args + " --json");
  EXPECT_EQ(fail.exit_code, 1) << fail.out << fail.err;
  const nlohmann::json j = nlohmann::json::parse(fail.out);
  ASSERT_EQ(j.at("findings").size(), 1u) << fail.out;
  EXPECT_EQ(j.at("findings")[0].at("code"), "lse_low_precision");
  EXPECT_EQ(j.at("findings")[0].at("lse_dtype_fits"), "bf16");
  const CliRun pass = run_cli(args + " --lse-dtype bf16 --json");
  EXPECT_EQ(pass.exit_code, 0) << pass.out << pass.err;
  EXPECT_EQ(nlohmann::json::parse(pass.out).at("precision").at("lse_dtype"), "bf16");
}

TEST(CliPrecision, PaddedKeysAreNamedAndAnUnexplainedFailureGetsALead) {
  ScratchDir dir;
  corpus::Kernel k;
  k.pad_keys_unmasked = true;
  const Problem p = make_problem(1, 2, 1, 100, 100, 16, Mask::none, DType::f32);
  const CliRun r = run_cli(dump(dir, p, k) + " --json");
  EXPECT_EQ(r.exit_code, 1);
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.at("findings").size(), 1u) << r.out;
  EXPECT_EQ(j.at("findings")[0].at("code"), "key_padding_unmasked");
  EXPECT_EQ(j.at("findings")[0].at("tile_k_fits"), 32);
  EXPECT_TRUE(j.at("lead").empty());

  // Junk in a few elements: no finding, and a lead that says so.
  ScratchDir race;
  const std::string args = dump(race, p, {});
  xt::xarray<float> o = read_npy(race.file("o.npy")).values;
  o(0, 1, 50, 3) += 1.0f;
  write_npy(race.file("o.npy"), o);
  const CliRun text = run_cli(args);
  EXPECT_EQ(text.exit_code, 1);
  EXPECT_TRUE(contains(text.out, "lead (O): a few isolated elements (1 of 3200)")) << text.out;
  const nlohmann::json l = nlohmann::json::parse(run_cli(args + " --json").out);
  ASSERT_EQ(l.at("lead").size(), 1u);
  EXPECT_EQ(l.at("lead")[0].at("where").at("pattern"), "few");
}

TEST(CliPrecision, VerifyRunAndFuzzShowThePrecision) {
  const CliRun v = run_cli(
      "verify --backends cpu --shape 1,2,33,47,8 --dtype bf16 --forward-only --lse-dtype bf16 "
      "--json");
  EXPECT_EQ(v.exit_code, 0) << v.out << v.err;
  const nlohmann::json j = nlohmann::json::parse(v.out);
  EXPECT_EQ(j.at("precision").at("lse_dtype"), "bf16");
  EXPECT_EQ(j.at("case").at("lse_dtype"), "bf16");
  EXPECT_TRUE(contains(j.at("command").get<std::string>(), "--lse-dtype bf16"));
  const CliRun text = run_cli(
      "verify --backends cpu --shape 1,1,20,20,8 --dtype f32 "
      "--forward-only --allow-tf32");
  EXPECT_EQ(text.exit_code, 0) << text.out << text.err;
  EXPECT_TRUE(contains(text.out, "precision: products TF32 (--allow-tf32), L f32")) << text.out;

  ScratchDir dir;
  const Problem p = make_problem(1, 1, 1, 20, 20, 8, Mask::none, DType::f32);
  dump(dir, p, {});
  const CliRun run =
      run_cli("run --q " + dir.file("q.npy") + " --k " + dir.file("k.npy") + " --v " +
              dir.file("v.npy") + " --out " + dir.file("out") + " --lse-dtype f16 --json");
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_EQ(nlohmann::json::parse(run.out).at("precision").at("lse_dtype"), "f16");
  const NpyArray lse = read_npy(dir.file("out/lse.npy"));
  for (float x : lse.values) EXPECT_EQ(round_to(DType::f16, x), x);

  const CliRun fuzz = run_cli(
      "fuzz --cases 3 --max-seq 24 --forward-only --lse-dtype bf16 "
      "--allow-tf32 --json");
  EXPECT_EQ(fuzz.exit_code, 0) << fuzz.out << fuzz.err;
  const nlohmann::json f = nlohmann::json::parse(fuzz.out);
  EXPECT_EQ(f.at("precision").at("lse_dtype"), "bf16");
  EXPECT_TRUE(f.at("precision").at("allow_tf32").get<bool>());
}

// --nondeterministic (the cuda backend's atomic backward, where it has one) is carried by
// every subcommand that runs a backend: in verify's case, its JSON and its reproduce command,
// in fuzz's JSON; on the cpu backend, deterministic either way, the result is unchanged.
TEST(CliPrecision, NondeterministicIsCarriedIntoTheCaseAndItsCommand) {
  const std::string args = "verify --backends cpu --shape 1,2,33,47,16 --dtype bf16 --json";
  const CliRun plain = run_cli(args);
  const CliRun atomic = run_cli(args + " --nondeterministic");
  ASSERT_EQ(plain.exit_code, 0) << plain.out << plain.err;
  ASSERT_EQ(atomic.exit_code, 0) << atomic.out << atomic.err;
  const nlohmann::json a = nlohmann::json::parse(atomic.out);
  const nlohmann::json p = nlohmann::json::parse(plain.out);
  EXPECT_FALSE(a.at("case").at("deterministic").get<bool>());
  EXPECT_TRUE(p.at("case").at("deterministic").get<bool>());
  EXPECT_TRUE(contains(a.at("command").get<std::string>(), "--nondeterministic"));
  EXPECT_FALSE(contains(p.at("command").get<std::string>(), "--nondeterministic"));
  EXPECT_EQ(a.at("backends"), p.at("backends"));

  const CliRun fuzz = run_cli("fuzz --cases 3 --max-seq 24 --nondeterministic --json");
  EXPECT_EQ(fuzz.exit_code, 0) << fuzz.out << fuzz.err;
  EXPECT_FALSE(nlohmann::json::parse(fuzz.out).at("deterministic").get<bool>());
  const CliRun bench =
      run_cli("bench --backends cpu --shape 1,1,16,16,8 --reps 1 --warmup 0 --nondeterministic");
  EXPECT_EQ(bench.exit_code, 0) << bench.out << bench.err;
}

}  // namespace

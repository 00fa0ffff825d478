// `flashref trace --q --k --v --do --tile --out` and `flashref check --do --states` for the
// backward's states, run as a user runs them: the written states are the mirror's backward
// (the in-process baseline, bit for bit), they pass; a broken backward's states
// (states_kernel.hpp) get the in-process first divergence in the JSON and the table; bad input
// is exit 2 naming the file or option, with nothing written.
#include <filesystem>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_harness.hpp"
#include "flashref/verify/npy.hpp"
#include "flashref/verify/states.hpp"
#include "states_arrays.hpp"
#include "states_kernel.hpp"

namespace {

using namespace flashref;
using namespace flashref::verify;
using flashref::testing::contains;
using flashref::testing::run_cli;
using flashref::testing::ScratchDir;

using flashref::verify::testing::as_array;
using flashref::verify::testing::as_float;
using flashref::verify::testing::same_bits;


// Partial tiles on both axes, S_q != S_k, GQA (two query heads on one key/value head).
struct Inputs {
  ScratchDir dir;
  ProblemData data;
  std::string args;
  explicit Inputs(Mask mask) {
    data = make_problem_data(make_problem(1, 2, 1, 10, 13, 8, mask, DType::f32),
                             {21, false, Layout::bhsd});
    write_npy(dir.file("q.npy"), as_array(data.q));
    write_npy(dir.file("k.npy"), as_array(data.k));
    write_npy(dir.file("v.npy"), as_array(data.v));
    write_npy(dir.file("do.npy"), as_array(data.dO));
    args = "--q " + dir.file("q.npy") + " --k " + dir.file("k.npy") + " --v " +
           dir.file("v.npy") + " --do " + dir.file("do.npy") + " --mask " +
           (mask == Mask::none ? "none" : "causal");
  }
};

TEST(CliBackwardStates, TraceWritesTheMirrorsBackwardAndItPassesCheck) {
  const Inputs in(Mask::causal_top_left);
  const std::string out = in.dir.file("states");
  const auto trace = run_cli("trace " + in.args + " --tile 4,5 --out " + out);
  ASSERT_EQ(trace.exit_code, 0) << trace.err;
  const BackwardStates base = baseline_backward_states(in.data, {4, 5});
  EXPECT_TRUE(same_bits(read_npy(out + "/D.npy").values, as_float(base.D)));
  EXPECT_TRUE(same_bits(read_npy(out + "/P.npy").values, as_float(base.P)));
  EXPECT_TRUE(same_bits(read_npy(out + "/dS.npy").values, as_float(base.dS)));
  EXPECT_TRUE(same_bits(read_npy(out + "/dQ.npy").values, as_float(base.dQ)));
  EXPECT_TRUE(same_bits(read_npy(out + "/dK.npy").values, as_float(base.dK)));
  EXPECT_EQ(read_npy(out + "/dV.npy").values.shape(),
            (std::vector<std::size_t>{1, 2, 3, 3, 5, 8}));
  for (const char* name : {"D", "P", "dP", "dS", "dQ", "dV", "dK"})
    EXPECT_TRUE(std::filesystem::exists(out + "/gold/" + name + ".npy")) << name;

  const auto check = run_cli("check " + in.args + " --tile 4,5 --states " + out);
  EXPECT_EQ(check.exit_code, 0) << check.out << check.err;
  EXPECT_TRUE(contains(check.out, "first divergence: none: every backward state follows "
                                  "Algorithm 2"))
      << check.out;
}

TEST(CliBackwardStates, BrokenBackwardGetsTheInProcessFirstDivergence) {
  const Inputs in(Mask::none);
  states_kernel::BackwardKernel k;
  k.B_q = 4;
  k.B_k = 3;
  k.ds_without_D = true;
  const CandidateBackwardStates states = states_kernel::run_backward(in.data, k);
  const std::string out = in.dir.file("broken");
  std::filesystem::create_directories(out);
  write_npy(out + "/P.npy", as_float(*states.P));
  write_npy(out + "/dS.npy", as_float(*states.dS));
  write_npy(out + "/dQ.npy", as_float(*states.dQ));
  // D as the kernel's own (B, H, S_q) buffer.
  xt::xarray<float> D = xt::xarray<float>::from_shape({1, 2, 10});
  for (std::size_t h = 0; h < 2; ++h)
    for (std::size_t q = 0; q < 10; ++q) D(0, h, q) = static_cast<float>((*states.D)(0, h, q / 4, q % 4));
  write_npy(out + "/D.npy", D);
  CandidateBackwardStates given;
  given.P = states.P;
  given.dS = states.dS;
  given.dQ = states.dQ;
  given.D = states.D;
  const BackwardStatesReport expected = judge_backward_states(in.data, {4, 3}, given);
  ASSERT_TRUE(expected.first.has_value());
  const StepCheck& step = expected.first->step;

  const auto json = run_cli("check " + in.args + " --tile 4,3 --states " + out + " --json");
  ASSERT_EQ(json.exit_code, 1) << json.out << json.err;
  const nlohmann::json j = nlohmann::json::parse(json.out);
  const nlohmann::json& f = j.at("first_divergence");
  EXPECT_EQ(f.at("i"), step.i);
  EXPECT_EQ(f.at("j"), step.j);
  EXPECT_EQ(f.at("quantity"), "dS");
  EXPECT_EQ(f.at("line"), 15);
  EXPECT_EQ(f.at("algorithm"), 2);
  EXPECT_EQ(f.at("cause"), "ds_without_D");
  EXPECT_EQ(f.at("expected").get<double>(), step.expected);
  EXPECT_EQ(f.at("found").get<double>(), step.found);
  EXPECT_EQ(j.at("backward_states").at("files").size(), 4u);
  EXPECT_FALSE(j.contains("states"));

  const auto text = run_cli("check " + in.args + " --tile 4,3 --states " + out);
  EXPECT_EQ(text.exit_code, 1);
  EXPECT_TRUE(contains(text.out, "key tile j = " + std::to_string(step.j) +
                                     " (dQ pass): dS, Alg. 2 line 15"))
      << text.out;
  EXPECT_TRUE(contains(text.out, "[ds_without_D]")) << text.out;
  EXPECT_TRUE(contains(text.out, "result: FAIL")) << text.out;
}

TEST(CliBackwardStates, SelectionWritesAndJudgesOneQueryTile) {
  const Inputs in(Mask::causal_bottom_right);
  const std::string out = in.dir.file("one");
  const auto trace = run_cli("trace " + in.args + " --tile 4,5 --select 0,1,2 --out " + out);
  ASSERT_EQ(trace.exit_code, 0) << trace.err;
  EXPECT_EQ(read_npy(out + "/D.npy").values.shape(), (std::vector<std::size_t>{1, 1, 1, 4}));
  EXPECT_EQ(read_npy(out + "/P.npy").values.shape(),
            (std::vector<std::size_t>{1, 1, 1, 3, 4, 5}));
  EXPECT_EQ(read_npy(out + "/dK.npy").values.shape(),
            (std::vector<std::size_t>{1, 1, 3, 1, 5, 8}));
  const auto check = run_cli("check " + in.args + " --tile 4,5 --select 0,1,2 --states " + out);
  EXPECT_EQ(check.exit_code, 0) << check.out << check.err;
  EXPECT_TRUE(contains(check.out, "every backward state follows Algorithm 2")) << check.out;
}

TEST(CliBackwardStates, BadInputIsExit2NamingTheFileAndWritesNothing) {
  const Inputs in(Mask::none);
  const std::string out = in.dir.file("s");
  ASSERT_EQ(run_cli("trace " + in.args + " --tile 4,4 --out " + out).exit_code, 0);
  // A D of the wrong shape, in an otherwise right folder.
  const std::string bad = in.dir.file("bad");
  std::filesystem::create_directories(bad);
  std::filesystem::copy_file(out + "/dS.npy", bad + "/dS.npy");
  write_npy(bad + "/D.npy", xt::xarray<float>::from_shape({1, 2, 3, 5}));
  // Backward files alone, judged in other tiles than they were written in.
  const std::string only_dS = in.dir.file("only_dS");
  std::filesystem::create_directories(only_dS);
  std::filesystem::copy_file(out + "/dS.npy", only_dS + "/dS.npy");
  const std::string no_do = "--q " + in.dir.file("q.npy") + " --k " + in.dir.file("k.npy") +
                            " --v " + in.dir.file("v.npy");
  // S_q = S_k = 4800, d = 1, tiles 1,1: the forward's states fit, the backward's (P alone
  // 2.3e7 values, 1.4e8 in all) do not.
  write_npy(in.dir.file("long_q.npy"), xt::xarray<float>::from_shape({1, 1, 4800, 1}));
  const std::string long_args = "--q " + in.dir.file("long_q.npy") + " --k " +
                                in.dir.file("long_q.npy") + " --v " + in.dir.file("long_q.npy") +
                                " --do " + in.dir.file("long_q.npy");
  const std::pair<std::string, std::string> cases[] = {
      {"check " + in.args + " --tile 4,4 --states " + bad, "D.npy"},
      {"check " + in.args + " --tile 4,5 --states " + only_dS, "dS.npy"},
      {"check " + no_do + " --tile 4,4 --states " + out, "--do"},
      {"trace " + no_do + " --backward --tile 4,4 --out " + in.dir.file("x"), "--do"},
      {"trace " + no_do + " --do " + in.dir.file("k.npy") + " --tile 4,4 --out " +
           in.dir.file("x"),
       "k.npy"},
      {"trace " + long_args + " --tile 1,1 --out " + in.dir.file("x"), "--select"},
  };
  for (const auto& [args, needle] : cases) {
    const auto r = run_cli(args);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.out << r.err;
    EXPECT_TRUE(contains(r.err, needle)) << args << "\n" << r.err;
  }
  EXPECT_FALSE(std::filesystem::exists(in.dir.file("x")));
}

}  // namespace

// `flashref trace --q --k --v --tile --out` and `flashref check --states`, run as a user runs
// them: the written states are the mirror's (the in-process baseline, bit for bit) in the
// documented layout, the mirror's own states pass, a broken kernel's states (states_kernel.hpp)
// get the same first divergence as the in-process judge in the table and the JSON, and bad
// usage is exit 2 with a message naming the option or file.
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

// The problem of these tests: partial tiles on both axes, S_q != S_k, two heads.
struct Inputs {
  ScratchDir dir;
  ProblemData data;
  std::string args;
  explicit Inputs(Mask mask) {
    data = make_problem_data(make_problem(1, 2, 2, 10, 13, 8, mask, DType::f32),
                             {11, false, Layout::bhsd});
    write_npy(dir.file("q.npy"), as_array(data.q));
    write_npy(dir.file("k.npy"), as_array(data.k));
    write_npy(dir.file("v.npy"), as_array(data.v));
    args = "--q " + dir.file("q.npy") + " --k " + dir.file("k.npy") + " --v " +
           dir.file("v.npy") + " --mask " + (mask == Mask::none ? "none" : "causal");
  }
};


TEST(CliStates, TraceWritesTheMirrorsStatesAndTheyPassCheck) {
  const Inputs in(Mask::causal_top_left);
  const std::string out = in.dir.file("states");
  const auto trace = run_cli("trace " + in.args + " --tile 4,4 --out " + out);
  ASSERT_EQ(trace.exit_code, 0) << trace.err;
  const ForwardStates base = baseline_forward_states(in.data, {4, 4});
  EXPECT_TRUE(same_bits(read_npy(out + "/m.npy").values, as_float(base.m)));
  EXPECT_TRUE(same_bits(read_npy(out + "/l.npy").values, as_float(base.l)));
  EXPECT_TRUE(same_bits(read_npy(out + "/acc.npy").values, as_float(base.acc)));
  EXPECT_EQ(read_npy(out + "/acc.npy").values.shape(),
            (std::vector<std::size_t>{1, 2, 3, 4, 4, 8}));
  for (const char* name : {"m", "l", "acc"})
    EXPECT_TRUE(std::filesystem::exists(out + "/gold/" + name + ".npy")) << name;

  const auto check = run_cli("check " + in.args + " --tile 4,4 --states " + out);
  EXPECT_EQ(check.exit_code, 0) << check.out << check.err;
  EXPECT_TRUE(contains(check.out, "first divergence: none")) << check.out;
}

TEST(CliStates, BrokenKernelGetsTheInProcessFirstDivergence) {
  const Inputs in(Mask::none);
  states_kernel::Kernel k;
  k.B_q = 4;
  k.B_k = 3;
  k.l_not_rescaled = true;
  const CandidateStates states = states_kernel::run(in.data, k);
  const std::string out = in.dir.file("broken");
  std::filesystem::create_directories(out);
  write_npy(out + "/m.npy", as_float(*states.m));
  write_npy(out + "/l.npy", as_float(*states.l));
  write_npy(out + "/acc.npy", as_float(*states.acc));
  const StatesReport expected = judge_forward_states(in.data, {4, 3}, states);
  ASSERT_TRUE(expected.first.has_value());
  const StepCheck& step = expected.first->step;

  const auto json = run_cli("check " + in.args + " --tile 4,3 --states " + out + " --json");
  ASSERT_EQ(json.exit_code, 1) << json.out << json.err;
  const nlohmann::json j = nlohmann::json::parse(json.out);
  const nlohmann::json& f = j.at("first_divergence");
  EXPECT_EQ(f.at("b"), step.b);
  EXPECT_EQ(f.at("h"), step.h);
  EXPECT_EQ(f.at("i"), step.i);
  EXPECT_EQ(f.at("j"), step.j);
  EXPECT_EQ(f.at("quantity"), "l");
  EXPECT_EQ(f.at("line"), 12);
  EXPECT_EQ(f.at("cause"), "l_not_rescaled");
  EXPECT_EQ(f.at("expected").get<double>(), step.expected);
  EXPECT_EQ(f.at("found").get<double>(), step.found);
  EXPECT_FALSE(j.at("passed").get<bool>());

  const auto text = run_cli("check " + in.args + " --tile 4,3 --states " + out);
  EXPECT_EQ(text.exit_code, 1);
  EXPECT_TRUE(contains(text.out, "first divergence: b = " + std::to_string(step.b) +
                                     ", h = " + std::to_string(step.h) + ", query tile i = " +
                                     std::to_string(step.i) + ", key tile j = " +
                                     std::to_string(step.j) + ": l, Alg. 1 line 12"))
      << text.out;
  EXPECT_TRUE(contains(text.out, "[l_not_rescaled]")) << text.out;
  EXPECT_TRUE(contains(text.out, "result: FAIL")) << text.out;
}

TEST(CliStates, SelectionWritesAndJudgesOneQueryTile) {
  const Inputs in(Mask::causal_top_left);
  const std::string out = in.dir.file("one");
  const auto trace = run_cli("trace " + in.args + " --tile 4,4 --select 0,1,2 --out " + out);
  ASSERT_EQ(trace.exit_code, 0) << trace.err;
  EXPECT_EQ(read_npy(out + "/m.npy").values.shape(), (std::vector<std::size_t>{1, 1, 1, 4, 4}));
  const auto check = run_cli("check " + in.args + " --tile 4,4 --select 0,1,2 --states " + out);
  EXPECT_EQ(check.exit_code, 0) << check.out << check.err;
  // Without the selection the files do not fit the layout: exit 2 naming the file.
  const auto whole = run_cli("check " + in.args + " --tile 4,4 --states " + out);
  EXPECT_EQ(whole.exit_code, 2);
  EXPECT_TRUE(contains(whole.err, "m.npy")) << whole.err;
}

TEST(CliStates, BadUsageIsExit2NamingTheOption) {
  const Inputs in(Mask::none);
  const std::string out = in.dir.file("s");
  ASSERT_EQ(run_cli("trace " + in.args + " --tile 4,4 --out " + out).exit_code, 0);
  const std::pair<std::string, std::string> cases[] = {
      {"trace " + in.args + " --out " + in.dir.file("x"), "--tile"},
      {"trace " + in.args + " --tile 4,4", "--out"},
      {"trace " + in.args + " --tile 4,4 --shape 1,1,4,4 --out " + in.dir.file("x"), "--shape"},
      {"trace " + in.args + " --tile 4,4 --select 0,5 --out " + in.dir.file("x"), "--select"},
      {"trace " + in.args + " --tile 4,4 --select 0 --out " + in.dir.file("x"), "--select"},
      {"check " + in.args + " --states " + out, "--tile"},
      {"check " + in.args + " --tile 4,4 --select 0,0", "--select"},
      {"check " + in.args + " --tile 4,4 --allow-tf32 --states " + out, "--allow-tf32"},
      {"check " + in.args + " --tile 4,4 --states " + in.dir.path().string(), "none of m.npy"},
      {"check " + in.args + " --tile 4,5 --states " + out, "m.npy"},
  };
  for (const auto& [args, needle] : cases) {
    const auto r = run_cli(args);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.out << r.err;
    EXPECT_TRUE(contains(r.err, needle)) << args << "\n" << r.err;
  }
  // Nothing was written by the refused trace runs.
  EXPECT_FALSE(std::filesystem::exists(in.dir.file("x")));
}

}  // namespace

// `flashref verify` as a user runs it: exit codes, the table, the JSON, error messages, and
// the reproduce command that property failures print.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "flashref/backend.hpp"
#include "flashref/cpu/backend.hpp"
#include "flashref/cpu/faults.hpp"
#include "flashref/verify/generators.hpp"
#include "flashref/verify/report.hpp"
#include "flashref/verify/verification.hpp"
#include "cli_harness.hpp"

namespace flashref {
namespace {

using testing::contains;
using testing::run_cli;

TEST(VerifyCli, DefaultRunPassesOnEveryBackendOfTheBuild) {
  const auto r = run_cli("verify");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "B=2 H=4 H_kv=2 S_q=300 S_k=300 d=64 mask=causal dtype=bf16"))
      << r.out;
  EXPECT_TRUE(contains(r.out, "forward and backward")) << r.out;
  EXPECT_TRUE(contains(r.out, "result: PASS")) << r.out;
  EXPECT_TRUE(contains(r.out, "rule:")) << r.out;
  for (const std::string& name : backend_names()) {
    const auto backend = make_backend(name);
    const Support s = backend->supports(verify::default_case().problem);
    if (s.ok) {
      for (const char* t : {"O ", "L ", "dQ ", "dK ", "dV "}) {
        EXPECT_TRUE(contains(r.out, std::string(t)) && contains(r.out, name)) << t << name;
      }
    } else {
      // e.g. cuda on a machine without a GPU: listed with its reason, not a failure.
      EXPECT_TRUE(contains(r.out, "unavailable")) << r.out;
      EXPECT_TRUE(contains(r.out, s.reason)) << r.out;
    }
  }
}

TEST(VerifyCli, JsonParsesAndHoldsTheRuleForEveryTensor) {
  const auto r = run_cli(
      "verify --json --shape 1,3,17,9,5 --heads-kv 1 --mask causal-bottom-right --dtype f16 "
      "--tile 4,3 --seed 5 --backends reference,cpu");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["problem"]["B"], 1);
  EXPECT_EQ(j["problem"]["H"], 3);
  EXPECT_EQ(j["problem"]["H_kv"], 1);
  EXPECT_EQ(j["problem"]["S_q"], 17);
  EXPECT_EQ(j["problem"]["S_k"], 9);
  EXPECT_EQ(j["problem"]["d"], 5);
  EXPECT_EQ(j["problem"]["mask"], "causal-bottom-right");
  EXPECT_EQ(j["dtype"], "f16");
  EXPECT_EQ(j["case"]["tile_q"], 4);
  EXPECT_EQ(j["case"]["tile_k"], 3);
  EXPECT_EQ(j["passed"], true);
  ASSERT_EQ(j["backends"].size(), 2u);
  for (const auto& b : j["backends"]) {
    ASSERT_EQ(b["tensors"].size(), 5u) << b;
    for (const auto& t : b["tensors"]) {
      const double limit = t["limit"];
      EXPECT_DOUBLE_EQ(
          limit, t["k"].get<double>() * t["baseline_err"].get<double>() + t["floor"].get<double>());
      EXPECT_DOUBLE_EQ(t["ratio"].get<double>(), t["candidate_err"].get<double>() / limit);
      EXPECT_EQ(t["candidate_err"], t["candidate"]["max_abs"]);
      EXPECT_EQ(t["verdict"], "pass");
    }
    // S_q = 17 > S_k = 9 bottom-right: 8 fully masked rows per head, L = -inf matched.
    const auto& L = b["tensors"][1];
    EXPECT_EQ(L["tensor"], "L");
    EXPECT_EQ(L["candidate"]["count"], 3 * 17);
    EXPECT_EQ(L["candidate"]["finite_pairs"], 3 * 9);
  }
}

// A planted bug fails (what `flashref verify` turns into exit 1), and the report prints the
// command of the case. The command line plants no bug: the case is judged in process, with the
// cpu backend made with the fault, and the command line must build that same case.
TEST(VerifyCli, APlantedBugExitsOneAndPrintsTheReproduceCommand) {
  verify::VerifyCase c = verify::default_case();  // what `verify --shape 1,2,40,40,16` runs
  c.problem = make_problem(1, 2, 2, 40, 40, 16, Mask::causal_top_left, DType::bf16);
  const auto faulty =
      cpu::make_backend({.faults = static_cast<std::uint32_t>(cpu::Fault::no_scale)});
  const verify::VerifyReport report = verify::verify_backends(c, {faulty.get()});
  EXPECT_FALSE(report.passed());
  const std::string table = verify::format_table(report);
  EXPECT_TRUE(contains(table, "FAIL")) << table;
  EXPECT_TRUE(contains(table, "result: FAIL")) << table;
  EXPECT_TRUE(contains(table, "reproduce: flashref verify --backends cpu --shape 1,2,40,40,16"))
      << table;
  EXPECT_TRUE(contains(table, "worst at")) << table;

  const nlohmann::json j = verify::to_json(report);
  EXPECT_EQ(j["passed"], false);
  EXPECT_EQ(j["backends"][0]["passed"], false);

  // The same options on the command line give the same case and command, and, without the
  // planted bug, pass.
  const auto r = run_cli("verify --json --backends cpu --shape 1,2,40,40,16");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  const nlohmann::json cli = nlohmann::json::parse(r.out);
  EXPECT_EQ(cli["command"], j["command"]);
  EXPECT_EQ(cli["problem"], j["problem"]);
  EXPECT_EQ(cli["case"], j["case"]);
}

struct BadInput {
  const char* args;
  const char* names;  // the option the message must name
};

TEST(VerifyCli, BadInputExitsTwoAndNamesTheProblem) {
  const BadInput cases[] = {
      {"--shape 1,2,3", "--shape"},
      {"--shape 1,2,0,4,8", "--shape"},
      {"--shape 1,2,8,8,257", "--shape"},
      {"--shape 1,4,8,8,16 --heads-kv 3", "--heads-kv"},
      {"--dtype f64", "--dtype"},
      {"--grad-dtype int8", "--grad-dtype"},
      {"--mask diagonal", "--mask"},
      {"--scale inf", "--scale"},
      {"--tile 3x4", "--tile"},
      {"--tile 1,2,3", "--tile"},
      {"--layout bsd", "--layout"},
      {"--threads -1", "--threads"},
      {"--backends reference,nope", "nope"},
      {"--backends cpu,cpu", "--backends"},
      {"--backward --forward-only", "--forward-only"},
      {"--seed many", "--seed"},
      {"--no-such-option", "--no-such-option"},
  };
  for (const BadInput& c : cases) {
    const auto r = run_cli(std::string("verify ") + c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args << "\n" << r.out << r.err;
    EXPECT_TRUE(contains(r.err, c.names)) << c.args << " -> " << r.err;
    EXPECT_TRUE(r.out.empty()) << c.args << " printed a report: " << r.out;
  }
}

TEST(VerifyCli, AnUnavailableBackendAskedForByNameExitsTwo) {
  // Without CUDA in the build the name is unknown; with it but without a GPU the backend
  // cannot run. Either way: exit 2, and the message says which backend and why.
  const auto r = run_cli("verify --backends cuda --shape 1,1,8,8,8");
  const std::vector<std::string> names = backend_names();
  if (std::find(names.begin(), names.end(), "cuda") != names.end() &&
      make_backend("cuda")->supports(make_problem(1, 1, 1, 8, 8, 8)).ok) {
    GTEST_SKIP() << "a CUDA device is present: cuda is available here";
  }
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_TRUE(contains(r.err, "cuda")) << r.err;
}

TEST(VerifyCli, FuzzingAnUnavailableBackendExitsTwoAndSaysWhy) {
  const std::vector<std::string> names = backend_names();
  if (std::find(names.begin(), names.end(), "cuda") == names.end()) {
    GTEST_SKIP() << "no cuda backend in this build";
  }
  const Support support = make_backend("cuda")->supports(make_problem(1, 1, 1, 8, 8, 8));
  if (support.ok) GTEST_SKIP() << "a CUDA device is present: cuda is available here";
  const auto r = run_cli("fuzz --backend cuda --cases 5");
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "backend 'cuda' could not run")) << r.out;
  EXPECT_TRUE(contains(r.out, support.reason)) << r.out;
  EXPECT_FALSE(contains(r.out, "RC_DISCARD")) << "RapidCheck's internals leaked: " << r.out;
}

TEST(VerifyCli, UsageErrorsAndHelp) {
  EXPECT_EQ(run_cli("").exit_code, 2);
  EXPECT_EQ(run_cli("frobnicate").exit_code, 2);
  const auto help = run_cli("verify --help");
  EXPECT_EQ(help.exit_code, 0);
  for (const char* option :
       {"--shape", "--heads-kv", "--mask", "--dtype", "--scale", "--tile", "--seed", "--backward",
        "--layout", "--large", "--json", "--backends"}) {
    EXPECT_TRUE(contains(help.out, option)) << option;
  }
  EXPECT_FALSE(contains(help.out, "--test-faults")) << "test-only option shown in --help";
}

// The command a failing property prints must rebuild exactly the case it came from.
TEST(VerifyCli, ReproduceCommandRebuildsTheCaseExactly) {
  verify::CaseBounds bounds;
  bounds.max_seq = 48;
  const rc::Gen<verify::VerifyCase> gen = verify::gen_case(bounds);
  for (int i = 0; i < 12; ++i) {
    const verify::VerifyCase c = gen(rc::Random(1000u + static_cast<std::uint64_t>(i)), 50).value();
    const std::string command = verify::reproduce_command(c, {"cpu"});
    const auto r = run_cli(command.substr(std::string("flashref ").size()) + " --json");
    const verify::VerifyReport expected = verify::run_verification(c, {"cpu"});
    ASSERT_EQ(r.exit_code, expected.passed() ? 0 : 1) << command << "\n" << r.err;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["command"], command);
    EXPECT_EQ(j["problem"]["scale"].get<double>(), c.problem.scale) << command;
    EXPECT_EQ(j["problem"]["S_q"], c.problem.S_q);
    EXPECT_EQ(j["problem"]["d"], c.problem.d);
    EXPECT_EQ(j["case"]["seed"], c.seed);
    EXPECT_EQ(j["case"]["large"], c.large);
    // Same inputs, same backend: the same errors to the last bit.
    const auto& tensors = j["backends"][0]["tensors"];
    ASSERT_EQ(tensors.size(), expected.backends[0].tensors.size()) << command;
    for (std::size_t t = 0; t < tensors.size(); ++t) {
      EXPECT_EQ(tensors[t]["candidate_err"].get<double>(),
                expected.backends[0].tensors[t].rule.candidate_err)
          << command;
    }
  }
}

}  // namespace
}  // namespace flashref

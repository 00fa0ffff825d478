// `flashref fuzz` through the built binary: it finds a bug planted in the cpu backend, shrinks
// it to a small case, and prints the command of exactly that case (the failure reproduced in
// process with the bug planted); a correct backend passes; bad usage is exit 2.
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_harness.hpp"
#include "flashref/cpu/backend.hpp"
#include "flashref/cpu/faults.hpp"
#include "flashref/verify/verification.hpp"

namespace {

using flashref::testing::CliRun;
using flashref::testing::run_cli;

nlohmann::json fuzz_json(const std::string& args, int expected_exit) {
  const CliRun r = run_cli("fuzz --json " + args);
  EXPECT_EQ(r.exit_code, expected_exit) << r.out << r.err;
  return nlohmann::json::parse(r.out);
}

// The reproduce command with our binary in place of "flashref".
std::string rerun_args(const std::string& command) {
  const std::string prefix = "flashref ";
  EXPECT_EQ(command.rfind(prefix, 0), 0u) << command;
  return command.substr(prefix.size());
}

// The case of a fuzz report's "case" object (the generator draws no threads and no TF32).
flashref::verify::VerifyCase case_of(const nlohmann::json& j) {
  const nlohmann::json& p = j.at("problem");
  flashref::verify::VerifyCase c;
  c.problem =
      flashref::make_problem(p.at("B").get<std::int64_t>(), p.at("H").get<std::int64_t>(),
                             p.at("H_kv").get<std::int64_t>(), p.at("S_q").get<std::int64_t>(),
                             p.at("S_k").get<std::int64_t>(), p.at("d").get<std::int64_t>(),
                             flashref::parse_mask(p.at("mask").get<std::string>()),
                             flashref::parse_dtype(p.at("dtype").get<std::string>()));
  c.problem.grad_dtype = flashref::parse_dtype(p.at("grad_dtype").get<std::string>());
  c.problem.scale = p.at("scale").get<double>();
  c.tile_q = j.at("tile_q").get<int>();
  c.tile_k = j.at("tile_k").get<int>();
  c.seed = j.at("seed").get<std::uint64_t>();
  c.layout = flashref::verify::parse_layout(j.at("layout").get<std::string>());
  c.large = j.at("large").get<bool>();
  c.backward = j.at("backward").get<bool>();
  return c;
}

TEST(CliFuzz, FindsAPlantedBugShrinksItAndReproducesIt) {
  const auto planted = flashref::cpu::make_backend(
      {.faults = static_cast<std::uint32_t>(flashref::cpu::Fault::tail_rows)});
  std::int64_t shrink_steps = 0;
  for (int seed : {1, 2, 3}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    // Short sequences keep the cases about the plant: a tail tile needs only a few rows.
    const nlohmann::json j =
        fuzz_json("--plant-fault tail_rows --dtype f32 --max-seq 24 --cases 200 --seed " +
                      std::to_string(seed),
                  1);
    EXPECT_FALSE(j.at("passed").get<bool>());
    ASSERT_TRUE(j.contains("failure"));
    const nlohmann::json& failure = j.at("failure");
    const nlohmann::json& p = failure.at("case").at("problem");
    // Small: the planted bug needs only a partial last query tile and a key tile to miss.
    EXPECT_EQ(p.at("B"), 1);
    EXPECT_LE(p.at("H").get<int>(), 2);
    EXPECT_LE(p.at("S_q").get<int>(), 8);
    EXPECT_LE(p.at("S_k").get<int>(), 8);
    // d may stay at a power of two the generator drew (those do not shrink), so bound the work.
    EXPECT_LE(p.at("B").get<int>() * p.at("H").get<int>() * p.at("S_q").get<int>() *
                  p.at("S_k").get<int>() * p.at("d").get<int>(),
              512);
    shrink_steps += failure.at("shrink_steps").get<std::int64_t>();

    const std::string command = failure.at("reproduce").get<std::string>();
    // The report names the plant: `flashref verify` runs the cpu backend without it.
    EXPECT_EQ(failure.at("planted_faults"), nlohmann::json::array({"tail_rows"})) << failure;
    // The command is the minimal case's, and that case fails again with the bug planted.
    const flashref::verify::VerifyCase minimal = case_of(failure.at("case"));
    EXPECT_EQ(flashref::verify::reproduce_command(minimal, {"cpu"}), command);
    EXPECT_FALSE(flashref::verify::verify_backends(minimal, {planted.get()}).passed()) << command;
    // Without the planted fault the same case passes: the fuzzer found the plant.
    const std::string clean = rerun_args(command);
    const CliRun fixed = run_cli(clean);
    EXPECT_EQ(fixed.exit_code, 0) << clean << "\n" << fixed.out;
  }
  EXPECT_GT(shrink_steps, 0) << "no case was shrunk";
}

TEST(CliFuzz, TheSameSeedGivesTheSameMinimalCase) {
  const std::string args = "--plant-fault tail_rows --dtype f32 --max-seq 24 --cases 100 --seed 2";
  EXPECT_EQ(fuzz_json(args, 1).at("failure"), fuzz_json(args, 1).at("failure"));
}

TEST(CliFuzz, ACorrectBackendPassesByCasesAndBySeconds) {
  // The reference backend is the baseline itself, so every case passes whatever the rule.
  const nlohmann::json by_cases = fuzz_json("--backend reference --cases 30 --seed 3", 0);
  EXPECT_TRUE(by_cases.at("passed").get<bool>());
  EXPECT_EQ(by_cases.at("cases"), 30);
  EXPECT_FALSE(by_cases.contains("failure"));
  const nlohmann::json by_time = fuzz_json("--backend reference --seconds 1 --seed 4", 0);
  EXPECT_GT(by_time.at("cases").get<int>(), 0);
  EXPECT_LT(by_time.at("seconds").get<double>(), 10.0);
}

TEST(CliFuzz, TextOutputNamesTheFailureAndTheCommand) {
  const CliRun r = run_cli("fuzz --plant-fault lse_base2 --dtype f32 --cases 20 --seed 5");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("FAIL"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("L: max abs err"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("reproduce: flashref verify --backends cpu"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("planted faults: lse_base2"), std::string::npos) << r.out;
  // Not a terminal: no progress line.
  EXPECT_EQ(r.err.find("cases/s"), std::string::npos) << r.err;
}

TEST(CliFuzz, BadUsageIsExit2) {
  EXPECT_EQ(run_cli("fuzz --cases 0").exit_code, 2);
  EXPECT_EQ(run_cli("fuzz --cases 5 --seconds 1").exit_code, 2);
  EXPECT_EQ(run_cli("fuzz --seconds -1").exit_code, 2);
  EXPECT_EQ(run_cli("fuzz --dtype f64 --cases 1").exit_code, 2);
  const CliRun fault = run_cli("fuzz --plant-fault nosuch --cases 1");
  EXPECT_EQ(fault.exit_code, 2);
  EXPECT_NE(fault.err.find("nosuch"), std::string::npos) << fault.err;
  EXPECT_EQ(run_cli("fuzz --backend reference --plant-fault no_scale --cases 1").exit_code, 2);
}

}  // namespace

// `flashref verify --ranks R` and `flashref bench --ranks R` as a user runs them: the ring is
// judged like any backend, its reproduce command brings the ring back, and bad rank counts
// exit 2 naming --ranks.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli_harness.hpp"
#include "flashref/backend.hpp"

namespace flashref {
namespace {

using testing::contains;
using testing::run_cli;

TEST(RingCli, VerifyRanksJudgesTheRingAndReproducesIt) {
  const auto r = run_cli(
      "verify --ranks 3 --backends cpu --shape 1,4,37,29,16 --heads-kv 2 --mask "
      "causal-bottom-right --dtype f16 --json");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["backends"].size(), 1u);
  EXPECT_EQ(j["backends"][0]["name"], "ring3(cpu)");
  EXPECT_EQ(j["backends"][0]["tensors"].size(), 5u);  // O, L, dQ, dK, dV
  EXPECT_EQ(j["case"]["ranks"], 3);
  const std::string command = j["command"];
  EXPECT_TRUE(contains(command, "--backends cpu ")) << command;
  EXPECT_TRUE(contains(command, "--ranks 3")) << command;
  // The printed command runs the same ring again.
  const auto again = run_cli(command.substr(std::string("flashref ").size()) + " --json");
  ASSERT_EQ(again.exit_code, 0) << again.out << again.err;
  EXPECT_EQ(nlohmann::json::parse(again.out)["backends"][0]["name"], "ring3(cpu)");
}

TEST(RingCli, VerifyRanksRunsEveryHostBackendByDefault) {
  const auto r = run_cli("verify --ranks 2 --shape 1,2,20,20,8 --forward-only");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "ring2(reference)")) << r.out;
  EXPECT_TRUE(contains(r.out, "ring2(cpu)")) << r.out;
  EXPECT_TRUE(contains(r.out, "ring of 2 ranks (in-process)")) << r.out;
}

TEST(RingCli, BadRankCountsExitTwoAndNameTheOption) {
  for (const char* args : {"verify --ranks 0", "verify --ranks 65", "verify --ranks two",
                           "bench --ranks -1 --shape 1,1,8,8,8"}) {
    const auto r = run_cli(args);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.out << r.err;
    EXPECT_TRUE(contains(r.err, "--ranks")) << args << " -> " << r.err;
    EXPECT_TRUE(r.out.empty()) << args << " printed: " << r.out;
  }
}

// A device backend runs as a ring too (its ranks' buffers on the device): on a GPU it is
// judged like the backend itself; without one it is unavailable for the same reason.
TEST(RingCli, DeviceBackendRunsAsARingWhereItRuns) {
  const std::vector<std::string> names = backend_names();
  if (std::find(names.begin(), names.end(), "cuda") == names.end()) {
    GTEST_SKIP() << "skipped: this build has no cuda backend";
  }
  const char* shape = " --backends cuda --shape 1,2,70,70,32 --mask causal --dtype bf16";
  const auto alone = run_cli(std::string("verify") + shape);
  const auto ring = run_cli(std::string("verify --ranks 2") + shape);
  EXPECT_EQ(ring.exit_code, alone.exit_code) << ring.out << ring.err << alone.out << alone.err;
  if (alone.exit_code == 0) {
    EXPECT_TRUE(contains(ring.out, "ring2(cuda)")) << ring.out;
    EXPECT_TRUE(contains(ring.out, "PASS")) << ring.out;
  }
}

TEST(RingCli, BenchRanksTimesTheRing) {
  const auto r = run_cli(
      "bench --ranks 2 --backends cpu --shape 1,2,64,64,16 --mask causal --backward --reps 2 "
      "--warmup 0 --threads 2 --json");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const nlohmann::json rows = nlohmann::json::parse(r.out);
  ASSERT_EQ(rows.size(), 3u);  // forward, backward, forward+backward
  for (const auto& row : rows) {
    EXPECT_EQ(row["backend"], "ring2(cpu)");
    EXPECT_GT(row["median_ms"].get<double>(), 0.0);
  }
}

TEST(RingCli, FuzzRanksFuzzesTheRingAndReproducesAFailureAsARing) {
  const auto ok = run_cli("fuzz --backend cpu --ranks 2 --cases 20 --max-seq 40 --seed 3 --json");
  ASSERT_EQ(ok.exit_code, 0) << ok.out << ok.err;
  // A planted bug in every rank's partial attention (L in base 2) breaks the merge's weights:
  // found, shrunk, and reproduced with --ranks.
  const auto bad = run_cli(
      "fuzz --backend cpu --ranks 3 --cases 50 --max-seq 40 --seed 3 --plant-fault lse_base2 "
      "--json");
  ASSERT_EQ(bad.exit_code, 1) << bad.out << bad.err;
  EXPECT_TRUE(contains(bad.out, "--ranks 3")) << bad.out;
}

}  // namespace
}  // namespace flashref

// `flashref bench`: rows per (backend, pass), consistent numbers, and clear errors.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "flashref/problem.hpp"
#include "cli_harness.hpp"

namespace flashref {
namespace {

using testing::contains;
using testing::run_cli;

TEST(BenchCli, JsonHasOneRowPerBackendAndPass) {
  const auto r = run_cli(
      "bench --backends cpu,reference --shape 1,2,64,48,16 --mask none --dtype bf16 --backward "
      "--reps 3 --warmup 1 --threads 2 --json");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const nlohmann::json rows = nlohmann::json::parse(r.out);
  ASSERT_TRUE(rows.is_array());
  ASSERT_EQ(rows.size(), 6u);
  const Problem p = make_problem(1, 2, 2, 64, 48, 16, Mask::none, DType::bf16);
  const char* passes[] = {"forward", "backward", "forward+backward"};
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto& row = rows[i];
    EXPECT_EQ(row["backend"], i < 3 ? "cpu" : "reference");
    EXPECT_EQ(row["pass"], passes[i % 3]);
    EXPECT_EQ(row["problem"]["S_q"], 64);
    EXPECT_EQ(row["problem"]["S_k"], 48);
    EXPECT_EQ(row["problem"]["dtype"], "bf16");
    EXPECT_EQ(row["threads"], 2);
    ASSERT_EQ(row["times_ms"].size(), 3u);
    const double median = row["median_ms"];
    EXPECT_GT(median, 0.0);
    EXPECT_LE(row["min_ms"].get<double>(), median);
    EXPECT_GE(row["max_ms"].get<double>(), median);
    const double flops = i % 3 == 0   ? forward_flops(p)
                         : i % 3 == 1 ? backward_flops(p)
                                      : forward_flops(p) + backward_flops(p);
    EXPECT_DOUBLE_EQ(row["flops"].get<double>(), flops);
    EXPECT_DOUBLE_EQ(row["gflops"].get<double>(), flops / (median * 1e6));
    EXPECT_TRUE(row.contains("peak_extra_bytes"));
    EXPECT_GE(row["peak_extra_bytes"].get<std::int64_t>(), -1);
    EXPECT_FALSE(row["memory_method"].get<std::string>().empty());
    EXPECT_FALSE(row.contains("plan"));  // the host backends have one way to run a problem
  }
}

TEST(BenchCli, TheNaiveReferenceNeedsMoreMemoryThanTheTiledCpu) {
  // S = 1024: the reference's S x S float matrices are 4 MiB per head; the tiled cpu
  // backend holds a few tiles. The peak RSS growth must show the difference.
  const auto r = run_cli(
      "bench --backends cpu,reference --shape 1,1,1024,1024,32 --mask none --dtype f32 "
      "--reps 1 --warmup 1 --threads 1 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json rows = nlohmann::json::parse(r.out);
  ASSERT_EQ(rows.size(), 2u);
  const auto cpu = rows[0]["peak_extra_bytes"].get<std::int64_t>();
  const auto ref = rows[1]["peak_extra_bytes"].get<std::int64_t>();
  if (cpu < 0 || ref < 0)
    GTEST_SKIP() << "peak RSS is not measurable here: " << rows[0]["memory_method"];
  EXPECT_GE(ref, 4 << 20) << "reference peak " << ref;
  EXPECT_LT(cpu, ref / 4) << "cpu peak " << cpu << " vs reference " << ref;
}

TEST(BenchCli, TextTableAndSweeps) {
  const auto r = run_cli("bench --backends cpu --shape 1,1,32,32,8 --reps 1 --warmup 0");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "median ms")) << r.out;
  EXPECT_TRUE(contains(r.out, "GFLOP/s")) << r.out;
  EXPECT_TRUE(contains(r.out, "forward")) << r.out;
  const auto list = run_cli("bench --list-sweeps");
  EXPECT_EQ(list.exit_code, 0);
  EXPECT_TRUE(contains(list.out, "cpu-peer")) << list.out;
}

TEST(BenchCli, BadInputExitsTwoAndNamesTheOption) {
  const std::pair<const char*, const char*> cases[] = {
      {"--reps 0", "--reps"},        {"--warmup -1", "--warmup"}, {"--sweep nope", "--sweep"},
      {"--shape 1,1,8", "--shape"},  {"--dtype f8", "--dtype"},   {"--backends cpu,bogus", "bogus"},
      {"--threads -3", "--threads"},
  };
  for (const auto& [args, names] : cases) {
    const auto r = run_cli(std::string("bench --shape 1,1,16,16,8 ") + args);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.out << r.err;
    EXPECT_TRUE(contains(r.err, names)) << args << " -> " << r.err;
  }
  EXPECT_EQ(run_cli("bench --help").exit_code, 0);
}

}  // namespace
}  // namespace flashref

// The built `flashref` binary on bad and extreme inputs: each defect that a tour of such inputs
// found, with its exit code, a message that names the option or the file, and nothing written.
// Problems too large for memory are refused by the feasibility check before any allocation, so
// these tests never allocate much; the ones whose verdict depends on the machine's memory run
// under `ulimit -v`, which the check counts as available memory.
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "cli_harness.hpp"
#include "flashref/verify/npy.hpp"
#include "flashref/verify/problem_data.hpp"
#include "npy_bytes.hpp"

namespace {

using flashref::testing::CliRun;
using flashref::testing::read_text;
using flashref::testing::run_cli;
using flashref::testing::ScratchDir;
namespace fs = std::filesystem;

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// `prefix` (shell: "ulimit -v N;", "OMP_NUM_THREADS=N") before the binary, then `args`.
CliRun run_shell(const std::string& prefix, const std::string& args) {
  ScratchDir io;
  const std::string out = io.file("stdout"), err = io.file("stderr");
  const std::string command = prefix + " " + std::string(FLASHREF_CLI) + " " + args + " >" + out +
                              " 2>" + err + " </dev/null";
  const int status = std::system(command.c_str());
  CliRun r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = read_text(out);
  r.err = read_text(err);
  return r;
}

// Address-space limits (ulimit -v) cannot apply to a binary built with AddressSanitizer: its
// shadow memory alone is terabytes of address space.
#if defined(__SANITIZE_ADDRESS__)
#define SKIP_WITHOUT_ADDRESS_LIMITS() GTEST_SKIP() << "ulimit -v does not work under ASan"
#else
#define SKIP_WITHOUT_ADDRESS_LIMITS() (void)0
#endif

// A process limited to 4 GiB of address space: a problem needing more is refused on any machine.
CliRun run_in_4gib(const std::string& args) {
  return run_shell("ulimit -v 4194304;", args);
}

void expect_usage_error(const CliRun& r, const std::string& names) {
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_TRUE(has(r.err, names)) << "expected '" << names << "' in: " << r.err;
  EXPECT_FALSE(has(r.err, "terminate called")) << r.err;
}

// Inputs q, k, v (and do) of shape (1, 1, S, d) in `dir`.
std::string write_inputs(const ScratchDir& dir, std::int64_t S, std::int64_t d, bool with_do) {
  using namespace flashref;
  const Problem p = make_problem(1, 1, 1, S, S, d, Mask::none, DType::f32);
  const verify::ProblemData data = verify::make_problem_data(p, {1, false, verify::Layout::bhsd});
  auto save = [&](const verify::HostTensor& t, const std::string& name) {
    xt::xarray<float> a = xt::xarray<float>::from_shape(
        {std::size_t(t.B()), std::size_t(t.H()), std::size_t(t.S()), std::size_t(t.d())});
    std::size_t n = 0;
    for (std::int64_t s = 0; s < t.S(); ++s)
      for (std::int64_t i = 0; i < t.d(); ++i) a.flat(n++) = t.get(0, 0, s, i);
    verify::write_npy(dir.file(name), a);
  };
  save(data.q, "q.npy");
  save(data.k, "k.npy");
  save(data.v, "v.npy");
  std::string args = " --q " + dir.file("q.npy") + " --k " + dir.file("k.npy") + " --v " +
                     dir.file("v.npy");
  if (with_do) {
    save(data.dO, "do.npy");
    args += " --do " + dir.file("do.npy");
  }
  return args;
}

// No temporary folder of `run` left beside its outputs.
void expect_no_temporaries(const fs::path& parent) {
  for (const fs::directory_entry& e : fs::directory_iterator(parent)) {
    EXPECT_FALSE(has(e.path().filename().string(), ".flashref-")) << e.path();
  }
}

// --- Items 1 and 2: no abort, no OOM kill: refused before any work -------------------------

TEST(HardeningFeasibility, VerifyOfALongSequenceIsRefusedWithTheBytesNeededNotAnAbort) {
  SKIP_WITHOUT_ADDRESS_LIMITS();
  // Issue item 1: this aborted with "terminate called without an active exception" (a
  // std::bad_alloc of the gold's 65536 x 65536 double matrices inside the OpenMP region).
  const CliRun r = run_in_4gib("verify --shape 1,1,65536,16 --backends cpu");
  expect_usage_error(r, "--shape");
  EXPECT_TRUE(has(r.err, "S_q=65536")) << r.err;
  EXPECT_TRUE(has(r.err, "bytes")) << r.err;
  EXPECT_TRUE(has(r.err, "available")) << r.err;
  EXPECT_TRUE(has(r.err, "ulimit -v")) << r.err;
}

TEST(HardeningFeasibility, AnAstronomicalProblemIsRefusedAtOnceOnAnyMachine) {
  const CliRun r = run_cli("verify --shape 1,1,100000000,100000000,64");
  expect_usage_error(r, "--shape");
  EXPECT_TRUE(has(r.err, "needs about")) << r.err;
  expect_usage_error(run_cli("bench --backends reference --shape 1,1,100000000,64"), "--shape");
  expect_usage_error(run_cli("bench --backends cpu --shape 1000,1000,100000000,64"), "--shape");
}

TEST(HardeningFeasibility, BenchOfTheReferenceOnALongSequenceIsRefused) {
  SKIP_WITHOUT_ADDRESS_LIMITS();
  expect_usage_error(run_in_4gib("bench --backends reference --shape 1,1,65536,16"), "--shape");
}

TEST(HardeningFeasibility, CheckAndRunOnLongSequenceFilesAreRefusedNamingTheFile) {
  SKIP_WITHOUT_ADDRESS_LIMITS();
  ScratchDir dir;
  const std::string inputs = write_inputs(dir, 65536, 16, false);  // 4 MiB files
  const CliRun check = run_in_4gib("check" + inputs + " --o " + dir.file("q.npy"));
  expect_usage_error(check, dir.file("q.npy"));
  EXPECT_TRUE(has(check.err, "needs about")) << check.err;
  const CliRun run =
      run_in_4gib("run --backend reference" + inputs + " --out " + dir.file("out"));
  expect_usage_error(run, dir.file("q.npy"));
  EXPECT_FALSE(fs::exists(dir.file("out")));
  expect_no_temporaries(dir.path());
}

TEST(HardeningFeasibility, TraceHasItsOwnSizeLimit) {
  const CliRun r = run_cli("trace --shape 1,1,100000,100000,64");
  expect_usage_error(r, "--shape");
  EXPECT_TRUE(has(r.err, "65536")) << r.err;
  expect_usage_error(run_cli("trace --shape 1,1,300,300,4"), "--shape");
  expect_usage_error(run_cli("trace --grid --shape 1,1,100000,100000,4 --tile 1,1"), "--tile");
  EXPECT_EQ(run_cli("trace --shape 1,1,256,256,2 --tile 128,128").exit_code, 0);
}

TEST(HardeningFeasibility, FuzzMaxSeqIsBounded) {
  const CliRun r = run_cli("fuzz --max-seq 100000000 --cases 1");
  expect_usage_error(r, "--max-seq");
  EXPECT_TRUE(has(r.err, "4096")) << r.err;
}

TEST(HardeningThreads, ThreadCountsAboveTheMaximumAreRefusedNotACrash) {
  // Issue item 3: a segfault in the reference's gather at 100000, a libgomp out-of-memory exit 1
  // at 2^31 - 1.
  for (const char* threads : {"100000", "2147483647", "-1"}) {
    SCOPED_TRACE(threads);
    const CliRun verify = run_cli(std::string("verify --shape 1,1,8,4 --threads ") + threads);
    expect_usage_error(verify, "--threads");
    EXPECT_TRUE(has(verify.err, "1024")) << verify.err;
    expect_usage_error(run_cli(std::string("bench --shape 1,1,8,4 --threads ") + threads),
                       "--threads");
    expect_usage_error(
        run_cli(std::string("run --q a --k b --v c --out o --threads ") + threads), "--threads");
  }
  EXPECT_EQ(run_cli("verify --shape 1,1,8,4 --threads 1024 --backends cpu").exit_code, 0);
}

TEST(HardeningThreads, OmpNumThreadsAboveTheMaximumIsRefusedNamingIt) {
  for (const char* threads : {"100000", "2147483647"}) {
    SCOPED_TRACE(threads);
    for (const char* command : {"verify --shape 1,1,8,4", "trace", "fuzz --cases 1"}) {
      expect_usage_error(run_shell(std::string("OMP_NUM_THREADS=") + threads, command),
                         "OMP_NUM_THREADS");
    }
  }
  EXPECT_EQ(run_shell("OMP_NUM_THREADS=3", "verify --shape 1,1,8,4 --backends cpu").exit_code, 0);
}

// --- Item 3: run --out is all or nothing, never mixed with an earlier run -------------------

TEST(HardeningRunOutput, ASecondRunReplacesTheEarlierOutputsAllTogether) {
  ScratchDir dir;
  const std::string with_do = write_inputs(dir, 9, 4, true);
  ASSERT_EQ(run_cli("run" + with_do + " --out " + dir.file("out")).exit_code, 0);
  ASSERT_TRUE(fs::exists(dir.file("out/dq.npy")));
  const std::string forward_only = " --q " + dir.file("q.npy") + " --k " + dir.file("k.npy") +
                                   " --v " + dir.file("v.npy");
  const CliRun r = run_cli("run" + forward_only + " --out " + dir.file("out"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(has(r.err, "removed dk.npy dq.npy dv.npy")) << r.err;
  EXPECT_TRUE(fs::exists(dir.file("out/o.npy")));
  EXPECT_TRUE(fs::exists(dir.file("out/lse.npy")));
  for (const char* stale : {"out/dq.npy", "out/dk.npy", "out/dv.npy"}) {
    EXPECT_FALSE(fs::exists(dir.file(stale))) << stale << " of the first run is still there";
  }
  expect_no_temporaries(dir.path());
}

TEST(HardeningRunOutput, OtherFilesInTheDirectoryAreLeftAlone) {
  ScratchDir dir;
  const std::string with_do = write_inputs(dir, 9, 4, true);
  fs::create_directories(dir.file("out"));
  std::ofstream(dir.file("out/notes.txt")) << "mine";
  ASSERT_EQ(run_cli("run" + with_do + " --out " + dir.file("out")).exit_code, 0);
  const std::string forward_only = " --q " + dir.file("q.npy") + " --k " + dir.file("k.npy") +
                                   " --v " + dir.file("v.npy");
  ASSERT_EQ(run_cli("run" + forward_only + " --out " + dir.file("out/")).exit_code, 0);
  EXPECT_EQ(read_text(dir.file("out/notes.txt")), "mine");
  EXPECT_TRUE(fs::exists(dir.file("out/o.npy")));
  EXPECT_FALSE(fs::exists(dir.file("out/dq.npy")));
  expect_no_temporaries(dir.path());
  expect_no_temporaries(dir.file("out"));
}

TEST(HardeningRunOutput, OutDotWritesBesideTheInputsAndLeavesNoTemporaries) {
  ScratchDir dir;
  const std::string with_do = write_inputs(dir, 9, 4, true);
  const std::string cd = "cd " + dir.path().string() + " &&";
  ASSERT_EQ(run_shell(cd, "run" + with_do + " --out .").exit_code, 0);
  ASSERT_EQ(run_shell(cd, "run" + with_do + " --out .").exit_code, 0);
  for (const char* file : {"o.npy", "lse.npy", "dq.npy", "dk.npy", "dv.npy", "q.npy"}) {
    EXPECT_TRUE(fs::exists(dir.file(file))) << file;
  }
  expect_no_temporaries(dir.path());
}

TEST(HardeningRunOutput, AWriteThatFailsHalfwayLeavesNothing) {
  // Issue item 4: o.npy was written before lse.npy failed. A file-size limit of 8 KiB (with
  // SIGXFSZ ignored, the write fails with EFBIG) lets the small lse.npy through but not o.npy.
  ScratchDir dir;
  const std::string inputs = write_inputs(dir, 300, 16, true);  // o.npy: 19 KiB
  const CliRun r =
      run_shell("trap '' XFSZ; ulimit -f 8;", "run" + inputs + " --out " + dir.file("out"));
  expect_usage_error(r, dir.file("out"));
  EXPECT_TRUE(has(r.err, "nothing was written")) << r.err;
  EXPECT_FALSE(fs::exists(dir.file("out")));
  expect_no_temporaries(dir.path());
}

TEST(HardeningRunOutput, AnOutThatIsAFileIsRefused) {
  ScratchDir dir;
  const std::string inputs = write_inputs(dir, 5, 4, false);
  std::ofstream(dir.file("taken")) << "x";
  expect_usage_error(run_cli("run" + inputs + " --out " + dir.file("taken")), "--out");
  EXPECT_EQ(read_text(dir.file("taken")), "x");
}

// --- Item 4: the CLI's messages (issue items 8 and 9) ---------------------------------------

TEST(HardeningMessages, ADirectoryOrAFifoGivenAsANpyFileIsNamedAsSuch) {
  ScratchDir dir;
  const std::string inputs = write_inputs(dir, 5, 4, false);
  fs::create_directories(dir.file("adir"));
  CliRun r = run_cli("check --q " + dir.file("adir") + " --k " + dir.file("k.npy") + " --v " +
                     dir.file("v.npy") + " --o " + dir.file("q.npy"));
  expect_usage_error(r, dir.file("adir"));
  EXPECT_TRUE(has(r.err, "is a directory")) << r.err;
  ASSERT_EQ(mkfifo(dir.file("fifo").c_str(), 0600), 0);
  // Without the check it blocks forever opening a FIFO that has no writer.
  r = run_shell("timeout 60", "run --q " + dir.file("fifo") + " --k " + dir.file("k.npy") +
                                  " --v " + dir.file("v.npy") + " --out " + dir.file("out"));
  expect_usage_error(r, dir.file("fifo"));
  EXPECT_TRUE(has(r.err, "not a regular file")) << r.err;
  EXPECT_FALSE(fs::exists(dir.file("out")));
}

TEST(HardeningMessages, NpyHeaderShapesThatAreNotNonNegativeIntegersAreNamed) {
  using flashref::testing::npy_bytes;
  ScratchDir dir;
  const std::string inputs = write_inputs(dir, 6, 4, false);
  const std::string data(6 * 4 * 4, '\0');
  const std::pair<std::string, std::string> cases[] = {
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, -2, 4), }", "negative dimension -2"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 2.5, 4), }", "'2.5'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 6, 4), 'shape': (1, 1, 6, 4), }",
       "appears 2 times"},
  };
  for (const auto& [dict, phrase] : cases) {
    SCOPED_TRACE(dict);
    std::ofstream(dir.file("bad.npy"), std::ios::binary) << npy_bytes(dict, data);
    std::string args = "check" + inputs + " --o " + dir.file("q.npy");
    args.replace(args.find(dir.file("q.npy")), dir.file("q.npy").size(), dir.file("bad.npy"));
    const CliRun r = run_cli(args);
    expect_usage_error(r, dir.file("bad.npy"));
    EXPECT_TRUE(has(r.err, phrase)) << r.err;
    EXPECT_FALSE(has(r.err, "18446744073709551614")) << r.err;
  }
}

TEST(HardeningMessages, OutOfMemoryIsSaidInWordsNotJustStdBadAlloc) {
  SKIP_WITHOUT_ADDRESS_LIMITS();
  // A 1.5 GiB input (a sparse file: no disk used) read under a 1 GiB address-space limit.
  using flashref::testing::npy_bytes;
  ScratchDir dir;
  const std::string inputs = write_inputs(dir, 4, 4, false);
  const std::string big = dir.file("big.npy");
  const std::string header =
      npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 100663296, 4), }", "");
  std::ofstream(big, std::ios::binary) << header;
  fs::resize_file(big, header.size() + (std::uintmax_t{3} << 29));
  std::string args = "check" + inputs + " --o " + dir.file("q.npy");
  args.replace(args.find(" --q " + dir.file("q.npy")), 5 + dir.file("q.npy").size(),
               " --q " + big);
  const CliRun r = run_shell("ulimit -v 1048576;", args);
  expect_usage_error(r, "out of memory (std::bad_alloc)");
  EXPECT_TRUE(has(r.err, "smaller problem")) << r.err;
}

TEST(HardeningMessages, TileMessagesGiveTheRealLimit) {
  const CliRun r = run_cli("verify --tile 1000000000");
  expect_usage_error(r, "--tile");
  EXPECT_TRUE(has(r.err, "1048576")) << r.err;
  expect_usage_error(run_cli("trace --tile 1000000000"), "1048576");
  expect_usage_error(run_cli("check --q a --k b --v c --tile 1000000000"), "1048576");
}

TEST(HardeningMessages, EverySubcommandTakesTheSameShapesAndTiles) {
  // One tile size for both, and B,H,S,d, everywhere (check, run and trace refused them).
  EXPECT_EQ(run_cli("trace --shape 1,1,8,4 --tile 8").exit_code, 0);
  EXPECT_EQ(run_cli("trace --shape 1,1,8,4 --tile 0").exit_code, 0);
  ScratchDir dir;
  const std::string inputs = write_inputs(dir, 7, 4, false);
  const CliRun run = run_cli("run" + inputs + " --tile 8 --out " + dir.file("out"));
  EXPECT_EQ(run.exit_code, 0) << run.err;
  const CliRun check = run_cli("check" + inputs + " --tile 8 --o " + dir.file("out/o.npy") +
                               " --lse " + dir.file("out/lse.npy"));
  EXPECT_EQ(check.exit_code, 0) << check.out << check.err;
  for (const char* bad : {"--tile 8,8,8", "--tile -1", "--tile x"}) {
    expect_usage_error(run_cli(std::string("trace ") + bad), "--tile");
    expect_usage_error(run_cli(std::string("verify ") + bad), "--tile");
  }
  expect_usage_error(run_cli("trace --shape 1,1,8"), "--shape");
}

TEST(HardeningMessages, GradDtypeErrorsNameGradDtype) {
  const CliRun r = run_cli("check --q a --k b --v c --o d --grad-dtype bad");
  expect_usage_error(r, "--grad-dtype");
  EXPECT_FALSE(has(r.err, "--dtype:")) << r.err;
}

TEST(HardeningMessages, ANegativeSeedIsRefusedNotWrapped) {
  for (const char* command : {"verify", "bench", "trace", "fuzz"}) {
    SCOPED_TRACE(command);
    const CliRun r = run_cli(std::string(command) + " --seed -1");
    expect_usage_error(r, "--seed");
    EXPECT_TRUE(has(r.err, "18446744073709551615")) << r.err;  // the range, not the wrapped value
  }
  EXPECT_EQ(run_cli("trace --seed 18446744073709551615 --shape 1,1,2,2").exit_code, 0);
}

TEST(HardeningMessages, AnUnknownSubcommandIsNamed) {
  const CliRun r = run_cli("frobnicate --shape 1,1,8,4");
  expect_usage_error(r, "unknown subcommand 'frobnicate'");
  EXPECT_FALSE(has(r.err, "A subcommand is required")) << r.err;
}

TEST(HardeningMessages, BenchRepetitionsAreBounded) {
  expect_usage_error(run_cli("bench --shape 1,1,8,4 --reps 2000000000"), "--reps");
  expect_usage_error(run_cli("bench --shape 1,1,8,4 --warmup 2000000000"), "--warmup");
  expect_usage_error(run_cli("bench --shape 1,1,8,4 --reps 0"), "--reps");
}

TEST(HardeningMessages, BenchSweepConflictsWithProblemOptions) {
  for (const char* option : {"--shape 1,1,8,4", "--mask none", "--dtype f16"}) {
    SCOPED_TRACE(option);
    const CliRun r = run_cli(std::string("bench --sweep cpu-peer ") + option);
    expect_usage_error(r, "conflicts with --sweep");
  }
}

TEST(HardeningMessages, FuzzRefusesEmptyListsAndEndlessTime) {
  expect_usage_error(run_cli("fuzz --dtype '' --cases 1"), "--dtype");
  expect_usage_error(run_cli("fuzz --mask '' --cases 1"), "--mask");
  for (const char* seconds : {"inf", "nan", "0", "-1"}) {
    SCOPED_TRACE(seconds);
    expect_usage_error(run_cli(std::string("fuzz --seconds ") + seconds), "--seconds");
  }
}

// --- Item 5: SIGINT during fuzz ends with a summary ------------------------------------------

TEST(HardeningFuzz, SigintEndsTheRunWithASummaryOfTheCasesAndTheSeed) {
  ScratchDir io;
  const std::string command = std::string(FLASHREF_CLI) +
                              " fuzz --backend cpu --seconds 300 --seed 77 >" + io.file("out") +
                              " 2>" + io.file("err") +
                              " </dev/null & pid=$!; sleep 3; kill -INT $pid; wait $pid";
  const int status = std::system(command.c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 130) << read_text(io.file("out")) << read_text(io.file("err"));
  const std::string out = read_text(io.file("out"));
  EXPECT_TRUE(has(out, "interrupted (SIGINT) after")) << out;
  EXPECT_TRUE(has(out, "seed 77")) << out;
  EXPECT_TRUE(has(out, "cases")) << out;
}

}  // namespace

// No exception crosses an OpenMP region. Before the fix, a std::bad_alloc of
// the gold's per-thread S_q x S_k matrices (`flashref verify --shape 1,1,65536,16`) escaped the
// region and libgomp's must-not-throw wrapper aborted with "terminate called without an active
// exception". Now every region keeps the first exception and rethrows it after the region.
//
// The allocation failure is made real but small: a child process (a threadsafe death test: a
// fresh process, no OpenMP pool inherited through fork) lowers its address-space limit to a few
// hundred MiB and runs a problem whose scratch needs more. Nothing large is ever allocated.
#include <sys/resource.h>

#include <cstdlib>
#include <fstream>
#include <new>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "algorithms.hpp"  // cpu/: for_each_task
#include "flashref/detail/parallel_errors.hpp"
#include "flashref/reference/backend.hpp"
#include "flashref/reference/gold.hpp"
#include "flashref/verify/noise_floor.hpp"
#include "flashref/verify/problem_data.hpp"

namespace {

using namespace flashref;

TEST(ParallelErrors, TheFirstExceptionIsRethrownAfterTheRegion) {
  detail::ParallelErrors errors;
#pragma omp parallel for num_threads(4) schedule(dynamic, 1)
  for (int n = 0; n < 1000; ++n) {
    errors.run([&] {
      if (n == 10) throw std::runtime_error("task 10 failed");
    });
  }
  EXPECT_TRUE(errors.failed());
  try {
    errors.rethrow();
    FAIL() << "no exception rethrown";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "task 10 failed");
  }
}

TEST(ParallelErrors, WorkAfterAFailureIsSkipped) {
  // One thread, so the order is known: tasks 11.. come after the failure of task 10.
  detail::ParallelErrors errors;
  int ran = 0;
#pragma omp parallel for num_threads(1)
  for (int n = 0; n < 1000; ++n) {
    errors.run([&] {
      ++ran;
      if (n == 10) throw std::runtime_error("task 10 failed");
    });
  }
  EXPECT_EQ(ran, 11);
  EXPECT_THROW(errors.rethrow(), std::runtime_error);
}

TEST(ParallelErrors, NoExceptionNoRethrow) {
  detail::ParallelErrors errors;
  int sum = 0;
#pragma omp parallel for num_threads(2) reduction(+ : sum)
  for (int n = 0; n < 100; ++n) errors.run([&] { sum += n; });
  EXPECT_FALSE(errors.failed());
  EXPECT_NO_THROW(errors.rethrow());
  EXPECT_EQ(sum, 4950);
}

TEST(ParallelErrors, TheCpuTaskLoopRethrowsABodysException) {
  std::vector<int> workspaces(3, 0);
  EXPECT_THROW(cpu::detail::for_each_task(50, workspaces,
                                          [](int&, std::int64_t task) {
                                            if (task == 3) throw std::invalid_argument("task 3");
                                          }),
               std::invalid_argument);
}

// The child's part: an address-space limit `headroom` above what it maps now.
void limit_address_space(std::int64_t headroom) {
  std::ifstream in("/proc/self/status");
  std::string line;
  std::int64_t kib = 0;
  while (std::getline(in, line)) {
    if (line.rfind("VmSize:", 0) == 0) std::istringstream(line.substr(7)) >> kib;
  }
  rlimit limit{};
  limit.rlim_cur = limit.rlim_max = static_cast<rlim_t>(kib * 1024 + headroom);
  if (setrlimit(RLIMIT_AS, &limit) != 0) std::_Exit(5);
}

// Runs `call` under the limit: exit 0 when it throws std::bad_alloc (rethrown after the
// region), 3 for another exception, 4 when it returns; an abort is a signal, not an exit.
template <class Call>
void expect_bad_alloc_in_child(Call call) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "an address-space limit cannot be set under AddressSanitizer (its shadow "
                  "memory is terabytes of address space)";
#endif
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        limit_address_space(std::int64_t{320} << 20);
        try {
          call();
        } catch (const std::bad_alloc&) {
          std::_Exit(0);
        } catch (...) {
          std::_Exit(3);
        }
        std::_Exit(4);
      },
      ::testing::ExitedWithCode(0), "");
}

// The same with a `prepare` step run before the limit (its result is passed to `call`), and
// the given headroom.
template <class Prepare, class Call>
void expect_bad_alloc_in_child_after(Prepare prepare, std::int64_t headroom, Call call) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "an address-space limit cannot be set under AddressSanitizer (its shadow "
                  "memory is terabytes of address space)";
#endif
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        const auto prepared = prepare();
        limit_address_space(headroom);
        try {
          call(prepared);
        } catch (const std::bad_alloc&) {
          std::_Exit(0);
        } catch (...) {
          std::_Exit(3);
        }
        std::_Exit(4);
      },
      ::testing::ExitedWithCode(0), "");
}

// 1 x 2 x 6000 x 6000 x 1: tiny inputs, but one 6000 x 6000 double matrix is 275 MiB, and the
// gold wants two (four for the backward) per thread.
struct BigScores {
  static constexpr std::int64_t S = 6000;
  Problem p = make_problem(2, 2, 2, S, S, 1, Mask::none, DType::f32);
  std::vector<float> q = std::vector<float>(2 * S, 0.5f), k = q, v = q, o = q, dO = q, dq = q,
                     dk = q, dv = q;
  std::vector<float> lse = std::vector<float>(2 * S, 0.0f);

  ForwardParams forward() {
    ForwardParams f;
    f.problem = p;
    f.q = bhsd_view(q.data(), DType::f32, 1, 2, S, 1);
    f.k = bhsd_view(k.data(), DType::f32, 1, 2, S, 1);
    f.v = bhsd_view(v.data(), DType::f32, 1, 2, S, 1);
    f.o = bhsd_view(o.data(), DType::f32, 1, 2, S, 1);
    f.lse = lse.data();
    f.options.num_threads = 2;
    return f;
  }
  BackwardParams backward() {
    BackwardParams b;
    const ForwardParams f = forward();
    b.problem = p;
    b.q = f.q;
    b.k = f.k;
    b.v = f.v;
    b.o = f.o;
    b.lse = f.lse;
    b.dO = bhsd_view(dO.data(), DType::f32, 1, 2, S, 1);
    b.dq = bhsd_view(dq.data(), DType::f32, 1, 2, S, 1);
    b.dk = bhsd_view(dk.data(), DType::f32, 1, 2, S, 1);
    b.dv = bhsd_view(dv.data(), DType::f32, 1, 2, S, 1);
    b.options.num_threads = 2;
    return b;
  }
};

TEST(ParallelErrorsDeathTest, GoldForwardOutOfMemoryThrowsBadAllocInsteadOfAborting) {
  expect_bad_alloc_in_child([] {
    BigScores big;
    big.p.B = 1;
    (void)reference::gold_forward(big.forward());
  });
}

TEST(ParallelErrorsDeathTest, GoldBackwardOutOfMemoryThrowsBadAllocInsteadOfAborting) {
  expect_bad_alloc_in_child([] {
    BigScores big;
    big.p.B = 1;
    (void)reference::gold_backward(big.backward());
  });
}

TEST(ParallelErrorsDeathTest, BaselineOutOfMemoryThrowsBadAllocInsteadOfAborting) {
  expect_bad_alloc_in_child([] {
    BigScores big;
    big.p.B = 1;
    reference::make_backend()->backward(big.backward());
  });
  expect_bad_alloc_in_child([] {
    BigScores big;
    big.p.B = 1;
    // float S and P: 2 x 137 MiB per thread, 2 threads.
    reference::make_backend()->forward(big.forward());
  });
}

TEST(ParallelErrorsDeathTest, NoiseFloorOutOfMemoryThrowsBadAllocInsteadOfAborting) {
  // The rule's noise floor (verify/noise_floor.cpp): each thread's row scratch holds 4 doubles
  // per key, 256 MiB for 8M keys, above the 200 MiB left to the child once the inputs are
  // made; the inputs' double copies (128 MiB), made before the region, still fit. So the
  // allocation that fails is inside the region (without ParallelErrors it aborted).
  expect_bad_alloc_in_child_after(
      [] {
        return verify::make_problem_data(
            make_problem(1, 1, 1, 1, std::int64_t{8} << 20, 1, Mask::none, DType::f32), {});
      },
      std::int64_t{200} << 20,
      [](const verify::ProblemData& data) { (void)verify::score_rounding_noise(data, false); });
}

}  // namespace

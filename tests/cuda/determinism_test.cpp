// Bitwise reproducibility: the cuda backward has no atomics (each dQ row is owned by one block
// of the dQ pass, each dK/dV row by one block of the dK/dV pass, summing in a fixed order), so
// two runs on the same inputs give the same bits, forward and backward, for every dtype.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "cuda_test_support.hpp"
#include "flashref/verify/problem_data.hpp"
#include "flashref/verify/runner.hpp"

namespace flashref {
namespace {

bool same_bits(const verify::HostTensor& a, const verify::HostTensor& b) {
  return a.bytes() == b.bytes() && std::memcmp(a.data(), b.data(), a.bytes()) == 0;
}

struct Case {
  const char* name;
  Problem problem;
};

TEST(CudaDeterminism, TwoRunsGiveIdenticalBits) {
  FLASHREF_REQUIRE_GPU();
  const std::vector<Case> cases = {
      {"bf16 causal GQA, partial tiles",
       make_problem(2, 8, 2, 1000, 1000, 64, Mask::causal_top_left, DType::bf16)},
      {"f16 bottom-right S_q > S_k, d=128",
       make_problem(1, 4, 4, 700, 333, 128, Mask::causal_bottom_right, DType::f16)},
      {"bf16 MQA d=256 (two dK/dV launches)",
       make_problem(1, 4, 1, 300, 500, 256, Mask::none, DType::bf16)},
      {"f32 causal GQA d=40",
       make_problem(1, 6, 3, 513, 513, 40, Mask::causal_top_left, DType::f32)},
  };
  const std::unique_ptr<Backend> cuda = make_backend("cuda");
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    verify::InputOptions in;
    in.seed = 11;
    const verify::ProblemData data = verify::make_problem_data(c.problem, in);
    verify::RunOptions run;
    run.backward = true;
    const verify::RunOutputs a = verify::run_backend(*cuda, data, run);
    const verify::RunOutputs b = verify::run_backend(*cuda, data, run);
    EXPECT_TRUE(same_bits(a.o, b.o)) << "O";
    EXPECT_EQ(std::memcmp(a.lse.data(), b.lse.data(), a.lse.size() * sizeof(float)), 0) << "L";
    EXPECT_TRUE(same_bits(a.dq, b.dq)) << "dQ";
    EXPECT_TRUE(same_bits(a.dk, b.dk)) << "dK";
    EXPECT_TRUE(same_bits(a.dv, b.dv)) << "dV";
    // Guard against a vacuous pass: the runs produced real numbers, not poison.
    EXPECT_TRUE(std::isfinite(a.values.at(verify::TensorId::dQ)(0, 0, 0, 0)));
    EXPECT_TRUE(std::isfinite(a.values.at(verify::TensorId::dK)(0, 0, 0, 0)));
  }
}

}  // namespace
}  // namespace flashref

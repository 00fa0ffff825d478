// validate(Problem): every rule, with the field and the offending values in the message.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "validate_support.hpp"

namespace flashref {
namespace {

using test::expect_invalid;

Problem valid() {
  return make_problem(2, 4, 2, 5, 6, 8);
}

TEST(ValidateProblem, AcceptsAValidProblemAndTheExtremesOfD) {
  EXPECT_NO_THROW(validate(valid()));
  for (std::int64_t d : {1, 256}) {
    Problem p = valid();
    p.d = d;
    EXPECT_NO_THROW(validate(p)) << d;
  }
  Problem mqa = valid();
  mqa.H_kv = 1;
  EXPECT_NO_THROW(validate(mqa));
}

TEST(ValidateProblem, EverySizeMustBePositive) {
  struct Field {
    std::int64_t Problem::*member;
    const char* name;
  };
  for (const Field& f : {Field{&Problem::B, "problem.B"}, Field{&Problem::H, "problem.H"},
                         Field{&Problem::H_kv, "problem.H_kv"}, Field{&Problem::S_q, "problem.S_q"},
                         Field{&Problem::S_k, "problem.S_k"}}) {
    for (std::int64_t bad : {0, -3}) {
      Problem p = valid();
      p.*f.member = bad;
      expect_invalid([&] { validate(p); }, f.name, {">= 1", "got " + std::to_string(bad)});
    }
  }
}

TEST(ValidateProblem, HkvMustDivideH) {
  Problem p = valid();
  p.H_kv = 3;
  expect_invalid([&] { validate(p); }, "problem.H_kv", {"H_kv = 3", "H = 4", "divide"});
  p.H_kv = 8;  // more kv heads than query heads
  expect_invalid([&] { validate(p); }, "problem.H_kv", {"H_kv = 8", "H = 4"});
}

TEST(ValidateProblem, HeadDimMustBeIn1To256) {
  for (std::int64_t d : {0, 257, -1}) {
    Problem p = valid();
    p.d = d;
    expect_invalid([&] { validate(p); }, "problem.d", {"1..256", "got " + std::to_string(d)});
  }
}

TEST(ValidateProblem, ScaleMustBeFinite) {
  const double inf = std::numeric_limits<double>::infinity();
  struct Case {
    double scale;
    const char* printed;
  };
  for (const Case& c : {Case{std::nan(""), "nan"}, Case{inf, "inf"}, Case{-inf, "-inf"}}) {
    Problem p = valid();
    p.scale = c.scale;
    expect_invalid([&] { validate(p); }, "problem.scale",
                   {"finite", std::string("got ") + c.printed});
  }
  // Zero and negative scales are finite: unusual, but well defined.
  Problem p = valid();
  p.scale = -0.5;
  EXPECT_NO_THROW(validate(p));
}

// The params validators check the problem first.
TEST(ValidateProblem, ParamsValidatorsCheckTheProblemFirst) {
  test::ParamsBuffers buffers;
  ForwardParams f = buffers.forward();
  f.problem.d = 0;
  expect_invalid([&] { validate(f); }, "problem.d", {"got 0"});
  expect_invalid([&] { validate_inputs(f); }, "problem.d", {"got 0"});
  BackwardParams b = buffers.backward();
  b.problem.scale = std::nan("");
  expect_invalid([&] { validate(b); }, "problem.scale", {"nan"});
  expect_invalid([&] { validate_inputs(b); }, "problem.scale", {"nan"});
}

}  // namespace
}  // namespace flashref

// The case generator: every awkward feature shows up often enough, every case respects its
// bounds and is valid, and the printed command carries every field.
#include <gtest/gtest.h>

#include <map>

#include "flashref/verify/generators.hpp"

namespace flashref::verify {
namespace {

std::vector<VerifyCase> sample(const CaseBounds& bounds, int n) {
  const rc::Gen<VerifyCase> gen = gen_case(bounds);
  std::vector<VerifyCase> cases;
  for (int i = 0; i < n; ++i) {
    // Sizes 0..100 like a RapidCheck run; a fixed seed per case keeps the test deterministic.
    cases.push_back(gen(rc::Random(static_cast<std::uint64_t>(i) * 7919u + 1u), i % 101).value());
  }
  return cases;
}

TEST(Generators, CasesAreValidAndWithinBounds) {
  const CaseBounds bounds;
  for (const VerifyCase& c : sample(bounds, 2000)) {
    const Problem& p = c.problem;
    ASSERT_NO_THROW(validate(p)) << describe(c);
    EXPECT_LE(p.S_q, bounds.max_seq);
    EXPECT_LE(p.S_k, bounds.max_seq);
    EXPECT_LE(p.d, bounds.max_d);
    EXPECT_GE(c.tile_q, 0);
    EXPECT_LE(c.tile_q, bounds.max_tile);
    EXPECT_LE(c.tile_k, bounds.max_tile);
    EXPECT_LE(p.B * p.H * p.S_q * p.S_k * p.d, std::max(bounds.max_work, p.S_q * p.S_k * p.d));
    EXPECT_EQ(p.grad_dtype, p.dtype);
    EXPECT_TRUE(c.backward);
  }
}

TEST(Generators, AwkwardFeaturesAreCommon) {
  const int n = 2000;
  std::map<std::string, int> seen;
  for (const VerifyCase& c : sample({}, n)) {
    for (const std::string& f : case_features(c)) ++seen[f];
  }
  std::string mix;
  for (const auto& [feature, count] : seen) mix += feature + ": " + std::to_string(count) + "\n";
  // Minimum shares out of 2000; the generator's weights give each at least twice this.
  const std::map<std::string, int> minimum = {{"S_q=1", 60},
                                              {"S_k=1", 60},
                                              {"S_q<B_q", 200},
                                              {"S_q%B_q!=0", 600},
                                              {"S_k%B_k!=0", 600},
                                              {"S_q=n*B_q", 40},
                                              {"S_q>S_k", 300},
                                              {"S_q<S_k", 300},
                                              {"B_q!=B_k", 1000},
                                              {"default tile", 100},
                                              {"d=1", 60},
                                              {"d odd", 400},
                                              {"d not 2^n", 600},
                                              {"GQA", 200},
                                              {"MQA", 200},
                                              {"B>1", 200},
                                              {"large", 200},
                                              {"scale!=1/sqrt(d)", 60},
                                              {"fully masked rows", 60},
                                              {"mask=none", 400},
                                              {"mask=causal", 400},
                                              {"mask=causal-bottom-right", 400},
                                              {"dtype=f32", 400},
                                              {"dtype=f16", 400},
                                              {"dtype=bf16", 400},
                                              {"layout=bshd", 600},
                                              {"layout=bhsd", 600}};
  for (const auto& [feature, at_least] : minimum) {
    EXPECT_GE(seen[feature], at_least) << feature << "\nmix:\n" << mix;
  }
}

TEST(Generators, BoundsRestrictTheDraw) {
  CaseBounds b;
  b.max_seq = 40;
  b.max_d = 64;
  b.d_multiple = 8;
  b.dtypes = {DType::bf16};
  b.masks = {Mask::causal_bottom_right};
  b.backward = false;
  for (const VerifyCase& c : sample(b, 500)) {
    EXPECT_EQ(c.problem.d % 8, 0);
    EXPECT_LE(c.problem.d, 64);
    EXPECT_LE(c.problem.S_q, 40);
    EXPECT_EQ(c.problem.dtype, DType::bf16);
    EXPECT_EQ(c.problem.mask, Mask::causal_bottom_right);
    EXPECT_FALSE(c.backward);
  }
}

TEST(Generators, ReproduceCommandCarriesEveryField) {
  VerifyCase c;
  c.problem = make_problem(2, 6, 3, 17, 9, 5, Mask::causal_bottom_right, DType::f16);
  c.problem.scale = 0.03125;
  c.tile_q = 7;
  c.tile_k = 3;
  c.seed = 12345;
  c.layout = Layout::bhsd;
  c.large = true;
  c.backward = false;
  c.threads = 3;
  const std::string cmd = reproduce_command(c, {"cpu", "reference"});
  for (const char* part : {"flashref verify", "--backends cpu,reference", "--shape 2,6,17,9,5",
                           "--heads-kv 3", "--mask causal-bottom-right", "--dtype f16",
                           "--scale 0.03125", "--tile 7,3", "--seed 12345", "--layout bhsd",
                           "--large", "--forward-only", "--threads 3"}) {
    EXPECT_NE(cmd.find(part), std::string::npos) << part << " missing from: " << cmd;
  }
  // Defaults are left out, so commands stay short.
  const std::string plain = reproduce_command(default_case(), {});
  EXPECT_EQ(plain.find("--scale"), std::string::npos) << plain;
  EXPECT_EQ(plain.find("--tile"), std::string::npos) << plain;
  EXPECT_EQ(plain.find("--forward-only"), std::string::npos) << plain;
}

TEST(Generators, ShowValuePrintsTheReproduceCommand) {
  VerifyCase c = default_case();
  c.seed = 99;
  std::ostringstream os;
  showValue(c, os);
  EXPECT_NE(os.str().find("--seed 99"), std::string::npos) << os.str();
  EXPECT_NE(os.str().find("S_q=300"), std::string::npos) << os.str();
}

}  // namespace
}  // namespace flashref::verify

// The cpu backend's building blocks: the branch-free float helpers (exp, rounding to 16-bit
// precision, float16 decoding) against the core library and libm, the matrix kernel of every
// instruction set against a double product, and the whole backend under every instruction set.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string_view>
#include <vector>

#include "cpu_test_support.hpp"
#include "flashref/cpu/isa.hpp"
#include "kernels.hpp"
#include "vec_math.hpp"

namespace flashref::cputest {
namespace {

using cpu::detail::exp_f32;

bool same_value(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b);
}

// Floats to test rounding on: a stride through all 2^32 bit patterns, and around every value
// of the 16-bit format the exact midpoints to its neighbours and one float either side of them
// (where round-to-nearest-even decides).
std::vector<float> rounding_probes(int mantissa_bits_dropped, bool is_f16) {
  std::vector<float> probes;
  for (std::uint64_t b = 0; b < (1ull << 32); b += 997)
    probes.push_back(std::bit_cast<float>(std::uint32_t(b)));
  for (std::uint32_t h = 0; h < 65536; ++h) {
    const float x =
        is_f16 ? f16_bits_to_float(std::uint16_t(h)) : bf16_bits_to_float(std::uint16_t(h));
    if (!std::isfinite(x)) continue;
    const std::uint32_t bits = std::bit_cast<std::uint32_t>(x);
    probes.push_back(x);
    if (!is_f16 || std::fabs(x) >= 0x1p-14f) {
      const std::uint32_t mid = bits + (1u << (mantissa_bits_dropped - 1));
      for (std::uint32_t m : {mid - 1, mid, mid + 1}) probes.push_back(std::bit_cast<float>(m));
    } else {
      const float step = 0x1p-24f;  // float16 subnormal spacing
      const float mid = x + (x < 0 ? -step / 2 : step / 2);
      probes.push_back(mid);
      probes.push_back(std::nextafter(mid, 0.0f));
      probes.push_back(std::nextafter(mid, 1.0f));
    }
  }
  for (float s : {65504.0f, 65519.0f, 65520.0f, 65536.0f, 3.3895e38f, 3.4028235e38f}) {
    probes.push_back(s);
    probes.push_back(-s);
  }
  for (float s : {0.0f, -0.0f, std::numeric_limits<float>::infinity(),
                  -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
                  std::numeric_limits<float>::denorm_min()}) {
    probes.push_back(s);
  }
  return probes;
}

TEST(VecMath, RoundBf16MatchesTheCoreConversion) {
  for (float x : rounding_probes(16, false)) {
    ASSERT_TRUE(same_value(cpu::detail::round_bf16(x), round_to(DType::bf16, x)))
        << std::hexfloat << x;
  }
}

TEST(VecMath, RoundF16MatchesTheCoreConversion) {
  for (float x : rounding_probes(13, true)) {
    ASSERT_TRUE(same_value(cpu::detail::round_f16(x), round_to(DType::f16, x)))
        << std::hexfloat << x << " -> " << cpu::detail::round_f16(x) << " vs "
        << round_to(DType::f16, x);
  }
}

TEST(VecMath, DecodingEvery16BitPatternMatchesTheCore) {
  for (std::uint32_t h = 0; h < 65536; ++h) {
    ASSERT_TRUE(
        same_value(cpu::detail::f16_to_f32(std::uint16_t(h)), f16_bits_to_float(std::uint16_t(h))))
        << h;
    ASSERT_TRUE(same_value(cpu::detail::bf16_to_f32(std::uint16_t(h)),
                           bf16_bits_to_float(std::uint16_t(h))))
        << h;
  }
}

// Worst error in ulp of the correctly rounded exp over its normal range, in steps fine enough
// to cross every exponent and reduction interval many times.
template <class Exp>
std::pair<double, float> worst_exp_ulp(Exp exp_of) {
  std::vector<float> xs;
  for (std::int64_t n = 0;; ++n) {
    const float x = -87.3f + 0.000731f * static_cast<float>(n);
    if (x > 88.72f) break;
    xs.push_back(x);
  }
  const std::vector<float> ys = exp_of(xs);
  double worst = 0;
  float worst_x = 0;
  for (std::size_t n = 0; n < xs.size(); ++n) {
    const double exact = std::exp(double(xs[n]));
    const double err = std::fabs(ys[n] - exact) / std::ldexp(1.0, std::ilogb(exact) - 23);
    if (err > worst) worst = err, worst_x = xs[n];
  }
  return {worst, worst_x};
}

TEST(VecMath, ExpIsWithinTwoUlpOnItsRange) {
  const auto [worst, at] = worst_exp_ulp([](std::vector<float> xs) {
    for (float& x : xs) x = exp_f32(x);
    return xs;
  });
  EXPECT_LE(worst, 2.0) << "worst at x = " << at;
  std::printf("exp_f32: worst error %.3f ulp\n", worst);
  EXPECT_EQ(exp_f32(0.0f), 1.0f);
}

TEST(VecMath, ExpSpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(exp_f32(-inf), 0.0f);
  EXPECT_EQ(exp_f32(-104.5f), 0.0f);  // exp(x) < 2^-150: rounds to 0
  EXPECT_EQ(exp_f32(-1e30f), 0.0f);
  EXPECT_EQ(exp_f32(inf), inf);
  EXPECT_EQ(exp_f32(89.0f), inf);
  EXPECT_TRUE(std::isfinite(exp_f32(88.7f)));
  EXPECT_TRUE(std::isnan(exp_f32(std::numeric_limits<float>::quiet_NaN())));
}

// Below FLT_MIN (x < -87.34) exp underflows gradually, as a correctly rounded exp does: each
// result is a subnormal within one subnormal step (2^-149) of exp(x), not a flushed 0.
// Returns the number of subnormal results; every result out of bounds fails the test.
template <class Exp>
int check_gradual_underflow(Exp exp_of, std::string_view what) {
  std::vector<float> xs;
  for (int n = 0;; ++n) {
    const float x = -87.34f - 0.00731f * static_cast<float>(n);
    if (x < -104.0f) break;
    xs.push_back(x);
  }
  const std::vector<float> ys = exp_of(xs);
  int subnormals = 0;
  for (std::size_t n = 0; n < xs.size(); ++n) {
    const double exact = std::exp(static_cast<double>(xs[n]));
    EXPECT_LE(std::fabs(static_cast<double>(ys[n]) - exact), std::ldexp(1.0, -149))
        << what << ": x = " << xs[n];
    if (ys[n] > 0.0f && ys[n] < std::numeric_limits<float>::min()) ++subnormals;
  }
  return subnormals;
}

TEST(VecMath, ExpUnderflowsGradually) {
  const int subnormals = check_gradual_underflow(
      [](std::vector<float> xs) {
        for (float& x : xs) x = exp_f32(x);
        return xs;
      },
      "scalar");
  EXPECT_GT(subnormals, 2000);
}

// Restores the instruction set a test switched away from.
struct IsaScope {
  cpu::Isa saved = cpu::active_isa();
  ~IsaScope() { cpu::select_isa(saved); }
};

TEST(Kernels, EveryInstructionSetIsListedAndSelectable) {
  IsaScope scope;
  const auto isas = cpu::available_isas();
  ASSERT_FALSE(isas.empty());
  EXPECT_EQ(isas.front(), cpu::Isa::generic);
  for (cpu::Isa isa : isas) {
    EXPECT_TRUE(cpu::select_isa(isa));
    EXPECT_EQ(cpu::active_isa(), isa);
  }
  std::printf("instruction sets here: ");
  for (cpu::Isa isa : isas) std::printf("%s ", std::string(cpu::isa_name(isa)).c_str());
  std::printf("\n");
}

// The kernels' own exp (inlined, compiled for each instruction set, with FMA where it has
// it): exp_sub_rows with L = 0.
TEST(Kernels, ExpIsWithinTwoUlpUnderEveryInstructionSet) {
  IsaScope scope;
  for (cpu::Isa isa : cpu::available_isas()) {
    ASSERT_TRUE(cpu::select_isa(isa));
    const auto [worst, at] = worst_exp_ulp([](std::vector<float> xs) {
      const float zero = 0.0f;
      const auto n = static_cast<std::int64_t>(xs.size());
      cpu::detail::kernels().exp_sub_rows(xs.data(), n, 1, n, &zero);
      return xs;
    });
    EXPECT_LE(worst, 2.0) << cpu::isa_name(isa) << ": worst at x = " << at;
  }
}

TEST(Kernels, ExpUnderflowsGraduallyUnderEveryInstructionSet) {
  IsaScope scope;
  for (cpu::Isa isa : cpu::available_isas()) {
    ASSERT_TRUE(cpu::select_isa(isa));
    const int subnormals = check_gradual_underflow(
        [](std::vector<float> xs) {
          const float zero = 0.0f;
          const auto n = static_cast<std::int64_t>(xs.size());
          cpu::detail::kernels().exp_sub_rows(xs.data(), n, 1, n, &zero);
          return xs;
        },
        cpu::isa_name(isa));
    EXPECT_GT(subnormals, 2000) << cpu::isa_name(isa);
  }
}

// C = alpha op(A) B and C += alpha op(A) B against a double product, for every instruction
// set, op(A) = A and A^T, and widths that exercise every column-block remainder.
TEST(Kernels, GemmMatchesADoubleProduct) {
  IsaScope scope;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  for (cpu::Isa isa : cpu::available_isas()) {
    ASSERT_TRUE(cpu::select_isa(isa));
    const cpu::detail::Kernels& k = cpu::detail::kernels();
    for (std::int64_t M : {8, 16, 72})
      for (std::int64_t N : {16, 32, 48, 64, 80, 112})
        for (std::int64_t K : {1, 7, 64})
          for (bool transpose_a : {false, true}) {
            // A is M x K, or K x M when transposed; element (r, t) of op(A) is a(r, t).
            const std::int64_t lda = (transpose_a ? M : K) + 3, ldb = N + 16, ldc = N + 32;
            std::vector<float> A((transpose_a ? K : M) * lda), B(K * ldb), C(M * ldc), C0;
            for (float& x : A) x = normal(rng);
            for (float& x : B) x = normal(rng);
            for (float& x : C) x = normal(rng);
            auto a = [&](std::int64_t r, std::int64_t t) {
              return double(transpose_a ? A[t * lda + r] : A[r * lda + t]);
            };
            std::vector<float> row_scale(M);
            for (float& x : row_scale) x = normal(rng);
            C0 = C;
            for (int variant = 0; variant < 3; ++variant) {
              // C = 0.5 op(A) B; C += 0.5 op(A) B; C = diag(row_scale) C + 0.5 op(A) B.
              const bool accumulate = variant > 0;
              const float* C_scale = variant == 2 ? row_scale.data() : nullptr;
              C = C0;
              k.gemm(C.data(), ldc, A.data(), lda, B.data(), ldb, M, N, K, 0.5f, accumulate,
                     transpose_a, C_scale);
              for (std::int64_t r = 0; r < M; ++r)
                for (std::int64_t c = 0; c < ldc; ++c) {
                  if (c >= N) {
                    ASSERT_EQ(C[r * ldc + c], C0[r * ldc + c]) << "wrote past N";
                    continue;
                  }
                  double dot = 0, mag = 0;
                  for (std::int64_t t = 0; t < K; ++t) {
                    dot += a(r, t) * B[t * ldb + c];
                    mag += std::fabs(a(r, t) * B[t * ldb + c]);
                  }
                  const double old_C = !accumulate ? 0.0
                                       : C_scale   ? double(C0[r * ldc + c]) * C_scale[r]
                                                   : C0[r * ldc + c];
                  const double expected = old_C + 0.5 * dot;
                  const double bound =
                      (K + 2.0) * 0x1p-24 * (0.5 * mag + std::fabs(old_C) + std::fabs(expected));
                  ASSERT_NEAR(C[r * ldc + c], expected, bound)
                      << cpu::isa_name(isa) << " M=" << M << " N=" << N << " K=" << K
                      << " transpose_a=" << transpose_a << " variant=" << variant;
                }
            }
          }
  }
}

// A product and the product of the transposes agree bit for bit (each element is the same
// chain of multiply-adds): what lets the dQ and dK/dV passes recompute identical tiles of S.
TEST(Kernels, TransposedProductsAreBitwiseEqual) {
  IsaScope scope;
  std::mt19937 rng(8);
  std::normal_distribution<float> normal;
  for (cpu::Isa isa : cpu::available_isas()) {
    ASSERT_TRUE(cpu::select_isa(isa));
    const cpu::detail::Kernels& k = cpu::detail::kernels();
    const std::int64_t M = 32, N = 48, K = 40;  // A: M x K, B: K x N (both multiples of 16)
    std::vector<float> A(M * K), A_T(K * M), B(K * N), B_T(N * K), C(M * N), C_T(N * M);
    for (std::int64_t r = 0; r < M; ++r)
      for (std::int64_t t = 0; t < K; ++t) A_T[t * M + r] = A[r * K + t] = normal(rng);
    for (std::int64_t t = 0; t < K; ++t)
      for (std::int64_t c = 0; c < N; ++c) B_T[c * K + t] = B[t * N + c] = normal(rng);
    k.gemm(C.data(), N, A.data(), K, B.data(), N, M, N, K, 0.25f, false, false, nullptr);
    // (A B)^T = B^T A^T, with B^T as the left operand stored K x N (read transposed).
    k.gemm(C_T.data(), M, B.data(), N, A_T.data(), M, N, M, K, 0.25f, false, true, nullptr);
    for (std::int64_t r = 0; r < M; ++r)
      for (std::int64_t c = 0; c < N; ++c)
        ASSERT_EQ(C[r * N + c], C_T[c * M + r]) << cpu::isa_name(isa);
  }
}

// The whole backend under each instruction set: within the baseline rule on problems with
// partial tiles, GQA and a causal mask, for each dtype.
TEST(Kernels, TheBackendPassesTheRuleUnderEveryInstructionSet) {
  IsaScope scope;
  for (cpu::Isa isa : cpu::available_isas()) {
    ASSERT_TRUE(cpu::select_isa(isa));
    for (DType t : {DType::f32, DType::bf16, DType::f16}) {
      const Problem p = make_problem(1, 4, 2, 45, 38, 40, Mask::causal_bottom_right, t);
      const Inputs in = make_inputs(p, 51);
      const auto cpu = flashref::cpu::make_backend();
      const auto base = flashref::reference::make_backend();
      const ForwardResult f = run_forward(*cpu, in, tiles(16, 24));
      const BackwardResult g = run_backward(*cpu, in, f, tiles(16, 24));
      const ForwardResult bf = run_forward(*base, in);
      const BackwardResult bg = run_backward(*base, in, bf);
      ForwardResult uf = empty_forward(in);
      BackwardResult ug = empty_backward(in);
      const auto gold_f = reference::gold_forward(forward_params(in, uf));
      const auto gold_b = reference::gold_backward(backward_params(in, f, ug));
      const std::string where = std::string(cpu::isa_name(isa)) + " " + std::string(dtype_name(t));
      for (const RuleCheck& r :
           {rule("O", max_abs_error(f.o, gold_f.O), max_abs_error(bf.o, gold_f.O), 2, t, gold_f.O),
            rule("L", max_abs_error(f.lse, gold_f.L), max_abs_error(bf.lse, gold_f.L), 2,
                 DType::f32, gold_f.L),
            rule("dQ", max_abs_error(g.dq, gold_b.dQ), max_abs_error(bg.dq, gold_b.dQ), 3, t,
                 gold_b.dQ),
            rule("dK", max_abs_error(g.dk, gold_b.dK), max_abs_error(bg.dk, gold_b.dK), 3, t,
                 gold_b.dK),
            rule("dV", max_abs_error(g.dv, gold_b.dV), max_abs_error(bg.dv, gold_b.dV), 3, t,
                 gold_b.dV)}) {
        EXPECT_TRUE(r.pass()) << where << ": " << r.describe();
      }
    }
  }
}

}  // namespace
}  // namespace flashref::cputest

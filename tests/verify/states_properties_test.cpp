// Property: a correct tiled kernel (states_kernel.hpp) in a random convention (m's units, acc
// normalized or not, the conditional rescale or not), on a random
// awkward problem (partial tiles, S_q != S_k, every mask and dtype, GQA, large scores), never
// gets a first divergence, and its convention is found. docs/verification.md, "Judging states",
// reports the same property on 1500 cases (worst ratio 0.59); this samples it in CI.
#include <numbers>
#include <string>

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "flashref/verify/states.hpp"
#include "flashref/verify/sum_magnitude.hpp"
#include "states_kernel.hpp"

namespace {

using namespace flashref;
using namespace flashref::verify;

RC_GTEST_PROP(StatesProperties, CorrectKernelNeverDivergesInAnyConvention, ()) {
  const auto mask = *rc::gen::element(Mask::none, Mask::causal_top_left, Mask::causal_bottom_right);
  const auto dtype = *rc::gen::element(DType::f32, DType::f16, DType::bf16);
  const std::int64_t S_q = *rc::gen::inRange(1, 40), S_k = *rc::gen::inRange(1, 40);
  const std::int64_t d = *rc::gen::inRange(1, 33), H_kv = *rc::gen::inRange(1, 3);
  const std::int64_t H = H_kv * *rc::gen::inRange(1, 3);
  states_kernel::Kernel k;
  k.B_q = *rc::gen::inRange(1, 17);
  k.B_k = *rc::gen::inRange(1, 17);
  k.m_log2 = *rc::gen::arbitrary<bool>();
  k.acc_normalized = *rc::gen::arbitrary<bool>();
  // FlashAttention-4's conditional rescale (m kept until it grows by more than 8 ln 2).
  const bool deferred = *rc::gen::arbitrary<bool>();
  if (deferred)
    k.lazy_rescale =
        static_cast<float>(kConditionalRescale * (k.m_log2 ? std::numbers::log2e : 1.0));
  const bool large = *rc::gen::arbitrary<bool>();
  const auto seed = *rc::gen::inRange<std::uint64_t>(0, 1000);
  const Problem p = make_problem(1, H, H_kv, S_q, S_k, d, mask, dtype);
  const ProblemData data = make_problem_data(p, {seed, large, Layout::bhsd});
  const StatesReport r = judge_forward_states(data, {k.B_q, k.B_k}, states_kernel::run(data, k));
  RC_TAG(k.m_log2 ? "log2" : "natural", k.acc_normalized ? "normalized" : "unnormalized",
         deferred ? (r.conventions.m_deferred ? "deferred, found" : "deferred, never") : "plain");
  const std::string context = describe(p) + " tiles " + std::to_string(k.B_q) + "," +
                              std::to_string(k.B_k) + " seed " + std::to_string(seed) +
                              (large ? " large" : "");
  if (r.first) RC_FAIL(context + ": " + r.first->explanation);
  RC_ASSERT(r.conventions.m_log2 == k.m_log2);
  RC_ASSERT(deferred || !r.conventions.m_deferred);
}

}  // namespace

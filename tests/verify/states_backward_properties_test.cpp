// Property: a correct two-pass backward (states_kernel.hpp) in a random scale convention, on a
// random awkward problem (partial tiles, S_q != S_k, every mask and dtype, GQA, large scores),
// never gets a first divergence. docs/verification.md, "Judging states", reports the same
// property on many more cases; this samples it in CI.
#include <string>

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "flashref/verify/states.hpp"
#include "states_kernel.hpp"

namespace {

using namespace flashref;
using namespace flashref::verify;

RC_GTEST_PROP(BackwardStatesProperties, CorrectBackwardNeverDivergesInAnyConvention, ()) {
  const auto mask = *rc::gen::element(Mask::none, Mask::causal_top_left, Mask::causal_bottom_right);
  const auto dtype = *rc::gen::element(DType::f32, DType::f16, DType::bf16);
  const std::int64_t S_q = *rc::gen::inRange(1, 33), S_k = *rc::gen::inRange(1, 33);
  const std::int64_t d = *rc::gen::inRange(1, 33), H_kv = *rc::gen::inRange(1, 3);
  const std::int64_t H = H_kv * *rc::gen::inRange(1, 3);
  states_kernel::BackwardKernel k;
  k.B_q = *rc::gen::inRange(1, 17);
  k.B_k = *rc::gen::inRange(1, 17);
  const int convention = *rc::gen::inRange(0, 3);
  k.scale_in_dS = convention == 1;
  k.scale_in_acc = convention == 2;
  const bool large = *rc::gen::arbitrary<bool>();
  const auto seed = *rc::gen::inRange<std::uint64_t>(0, 1000000);
  const Problem p = make_problem(1, H, H_kv, S_q, S_k, d, mask, dtype);
  const ProblemData data = make_problem_data(p, {seed, large, Layout::bhsd});
  const BackwardStatesReport r =
      judge_backward_states(data, {k.B_q, k.B_k}, states_kernel::run_backward(data, k));
  RC_TAG(convention == 0 ? "unscaled" : convention == 1 ? "dS scaled" : "accumulators scaled");
  const std::string context = describe(p) + " tiles " + std::to_string(k.B_q) + "," +
                              std::to_string(k.B_k) + " seed " + std::to_string(seed) +
                              (large ? " large" : "") + " convention " +
                              std::to_string(convention);
  if (r.first) {
    RC_FAIL(context + ": " + std::string(state_name(r.first->step.quantity)) + " ratio " +
            std::to_string(r.first->step.ratio) + ": " + r.first->explanation);
  }
}

}  // namespace

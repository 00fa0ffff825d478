// The backward states' judge (states.hpp, "Backward states"): a correct Triton-style two-pass
// backward (states_kernel.hpp) in each scale convention passes on awkward shapes, every mask,
// GQA and large scores; each planted mistake is found at the step where it is made (computed
// here from the problem and the gold), with its quantity, line and cause. Also: the gold's last
// states against the reference's independent gold backward, the selection, wrong shapes.
#include <cmath>
#include <optional>
#include <string>
#include <tuple>

#include <gtest/gtest.h>
#include <xtensor/xview.hpp>

#include "flashref/error.hpp"
#include "flashref/reference/gold.hpp"
#include "flashref/verify/states.hpp"
#include "states_kernel.hpp"

namespace {

using namespace flashref;
using namespace flashref::verify;
using states_kernel::BackwardKernel;

std::size_t z(std::int64_t n) { return static_cast<std::size_t>(n); }

constexpr Mask kMasks[] = {Mask::none, Mask::causal_top_left, Mask::causal_bottom_right};

ProblemData data_for(const Problem& p, std::uint64_t seed = 3, bool large = false) {
  return make_problem_data(p, {seed, large, Layout::bhsd});
}

BackwardStatesReport judge(const ProblemData& data, const BackwardKernel& k) {
  return judge_backward_states(data, {k.B_q, k.B_k}, states_kernel::run_backward(data, k));
}

std::string where(const BackwardStatesReport& r) {
  if (!r.first) return "no divergence";
  const StepCheck& c = r.first->step;
  return std::string(state_name(c.quantity)) + " at b=" + std::to_string(c.b) + " h=" +
         std::to_string(c.h) + " i=" + std::to_string(c.i) + " j=" + std::to_string(c.j) +
         " ratio " + std::to_string(c.ratio) + " [" + r.first->cause + "] " +
         r.first->explanation;
}

// Partial tiles on both axes, S_q != S_k both ways, B_q != B_k, d odd.
struct Shape {
  std::int64_t S_q, S_k, d, B_q, B_k;
};
constexpr Shape kShapes[] = {{13, 21, 7, 4, 5}, {22, 9, 16, 8, 4}, {1, 5, 3, 3, 2}};

TEST(BackwardStates, CorrectKernelPassesEveryMaskShapeDtypeAndConvention) {
  for (int conv = 0; conv < 3; ++conv)
    for (const Mask mask : kMasks)
      for (const Shape& s : kShapes)
        for (const DType dtype : {DType::f32, DType::bf16}) {
          // GQA: two query heads share one key/value head.
          const Problem p = make_problem(1, 2, 1, s.S_q, s.S_k, s.d, mask, dtype);
          BackwardKernel k;
          k.B_q = s.B_q;
          k.B_k = s.B_k;
          k.scale_in_dS = conv == 1;
          k.scale_in_acc = conv == 2;
          const BackwardStatesReport r = judge(data_for(p), k);
          SCOPED_TRACE(describe(p) + " tiles " + std::to_string(s.B_q) + "," +
                       std::to_string(s.B_k) + " convention " + std::to_string(conv));
          EXPECT_TRUE(r.passed()) << where(r);
          // A single row that sees one key has dS = 0 exactly: no scale to find.
          if (!(s.S_q == 1 && mask == Mask::causal_top_left)) {
            EXPECT_EQ(r.conventions.dS_scaled, conv == 1) << r.conventions_note;
            EXPECT_EQ(r.conventions.dQ_scaled, conv != 0) << r.conventions_note;
            EXPECT_EQ(r.conventions.dK_scaled, conv != 0) << r.conventions_note;
          }
          ASSERT_EQ(r.quantities.size(), 7u);
          for (const QuantitySummary& q : r.quantities) EXPECT_GT(q.steps, 0) << state_name(q.quantity);
        }
}

TEST(BackwardStates, CorrectKernelPassesOnLargeScores) {
  // Scores of several hundred, nearly one-hot rows: the score-rounding noise and the rounding
  // of dP - D are what a correct kernel that sums in its own order needs.
  for (const Mask mask : kMasks)
    for (const DType dtype : {DType::f32, DType::f16}) {
      const Problem p = make_problem(1, 1, 1, 17, 23, 16, mask, dtype);
      BackwardKernel k;
      k.B_q = 8;
      k.B_k = 16;
      const BackwardStatesReport r = judge(data_for(p, 5, true), k);
      EXPECT_TRUE(r.passed()) << describe(p) << ": " << where(r);
    }
}

void expect_at(const BackwardStatesReport& r, std::int64_t i, std::int64_t j, StateQuantity q,
               const std::string& cause) {
  ASSERT_TRUE(r.first.has_value()) << "no divergence found";
  const StepCheck& c = r.first->step;
  EXPECT_EQ(c.i, i) << where(r);
  EXPECT_EQ(c.j, j) << where(r);
  EXPECT_EQ(c.quantity, q) << where(r);
  EXPECT_EQ(r.first->cause, cause) << where(r);
  EXPECT_FALSE(c.pass);
}

// The first tile pair in the dQ pass's order (i, then j) where `pred(q, key)` holds for some
// real entry the kernel visits.
template <class Pred>
std::optional<std::tuple<std::int64_t, std::int64_t>> first_pair(const Problem& p,
                                                                 const StatesGrid& g, Pred pred) {
  const StatesShape s = states_shape(p, g);
  for (std::int64_t i = 0; i < s.T_q; ++i)
    for (std::int64_t j = 0; j < s.T_k && visits(p, s, i, j); ++j)
      for (std::int64_t q = i * g.B_q; q < std::min(p.S_q, (i + 1) * g.B_q); ++q)
        for (std::int64_t key = j * g.B_k; key < std::min(p.S_k, (j + 1) * g.B_k); ++key)
          if (pred(q, key)) return {{i, j}};
  return std::nullopt;
}

TEST(BackwardStates, DsWithoutDIsFoundAtTheFirstVisibleEntryWithDNotZero) {
  for (const Mask mask : kMasks) {
    const Problem p = make_problem(1, 1, 1, 15, 11, 8, mask, DType::f32);
    const ProblemData data = data_for(p);
    BackwardKernel k;
    k.B_q = 4;
    k.B_k = 3;
    k.ds_without_D = true;
    // The mistake changes dS by P * D: where both are clearly not zero.
    const GoldBackwardStates gold = gold_backward_states(data, {k.B_q, k.B_k});
    const auto at = first_pair(p, {k.B_q, k.B_k}, [&](std::int64_t q, std::int64_t key) {
      const double P = gold.value.P(0, 0, z(q / k.B_q), z(key / k.B_k), z(q % k.B_q),
                                    z(key % k.B_k));
      return std::fabs(P * gold.value.D(0, 0, z(q / k.B_q), z(q % k.B_q))) > 1e-3;
    });
    ASSERT_TRUE(at.has_value());
    const BackwardStatesReport r = judge(data, k);
    expect_at(r, std::get<0>(*at), std::get<1>(*at), StateQuantity::dS, "ds_without_D");
    // P and dP were right at that step.
    for (const StepCheck& c : r.first->this_step)
      if (c.quantity == StateQuantity::P || c.quantity == StateQuantity::dP) {
        EXPECT_TRUE(c.pass) << state_name(c.quantity);
      }
    EXPECT_EQ(state_line(r.first->step.quantity), 15);
  }
}

TEST(BackwardStates, MissingScaleInTheRecomputedScoresIsFoundAtTheFirstStep) {
  const Problem p = make_problem(1, 2, 2, 10, 14, 16, Mask::causal_bottom_right, DType::f32);
  BackwardKernel k;
  k.B_q = 4;
  k.B_k = 4;
  k.p_missing_scale = true;
  const auto at = first_pair(p, {k.B_q, k.B_k}, [&](std::int64_t q, std::int64_t key) {
    return key <= p.last_visible_key(q);
  });
  ASSERT_TRUE(at.has_value());
  const BackwardStatesReport r = judge(data_for(p), k);
  expect_at(r, std::get<0>(*at), std::get<1>(*at), StateQuantity::P, "P_missing_scale");
  EXPECT_EQ(r.first->step.h, 0);
  // D, judged before the passes, came from the right forward.
  EXPECT_EQ(r.quantities.front().quantity, StateQuantity::D);
  EXPECT_EQ(r.quantities.front().failed, 0);
}

TEST(BackwardStates, LogsumexpReadInTheOtherBaseIsFoundAtTheFirstStep) {
  // exp2(S log2 e - L) with a natural-log L: P = exp(S - L ln 2), wrong wherever L != 0.
  const Problem p = make_problem(1, 1, 1, 9, 13, 8, Mask::causal_top_left, DType::f32);
  BackwardKernel k;
  k.B_q = 3;
  k.B_k = 5;
  k.lse_base_mismatch = true;
  const BackwardStatesReport r = judge(data_for(p), k);
  expect_at(r, 0, 0, StateQuantity::P, "P_lse_base_mismatch");
}

TEST(BackwardStates, UnmaskedRecomputationIsFoundOnTheFirstTileWithAMaskedEntry) {
  for (const Mask mask : {Mask::causal_top_left, Mask::causal_bottom_right}) {
    const Problem p = make_problem(1, 1, 1, 14, 17, 8, mask, DType::f32);
    BackwardKernel k;
    k.B_q = 4;
    k.B_k = 3;
    k.p_unmasked = true;
    const auto at = first_pair(p, {k.B_q, k.B_k}, [&](std::int64_t q, std::int64_t key) {
      return key > p.last_visible_key(q);
    });
    ASSERT_TRUE(at.has_value());
    const BackwardStatesReport r = judge(data_for(p), k);
    expect_at(r, std::get<0>(*at), std::get<1>(*at), StateQuantity::P, "P_unmasked");
    EXPECT_EQ(r.first->step.expected, 0.0);
  }
}

TEST(BackwardStates, DkAccumulatedWithPIsFoundAtTheFirstStepOfTheDkDvPass) {
  const Problem p = make_problem(1, 2, 1, 12, 10, 8, Mask::causal_top_left, DType::bf16);
  BackwardKernel k;
  k.B_q = 5;
  k.B_k = 4;
  k.dk_with_P = true;
  const BackwardStatesReport r = judge(data_for(p), k);
  // Every state of the dQ pass is right; the dK/dV pass starts at key tile 0 with the first
  // query tile that sees it.
  const StatesShape s = states_shape(p, {k.B_q, k.B_k});
  std::int64_t i0 = 0;
  while (!visits(p, s, i0, 0)) ++i0;
  expect_at(r, i0, 0, StateQuantity::dK, "");
  EXPECT_EQ(r.first->step.h, 0);
  for (const StepCheck& c : r.first->this_step)
    if (c.quantity != StateQuantity::dK) {
      EXPECT_TRUE(c.pass) << state_name(c.quantity);
    }
  EXPECT_NE(r.first->explanation.find("line 17"), std::string::npos) << r.first->explanation;
}

xt::xtensor<double, 4> as_double(const HostTensor& t) {
  xt::xtensor<double, 4> a = xt::xtensor<double, 4>::from_shape(
      {z(t.B()), z(t.H()), z(t.S()), z(t.d())});
  for (std::int64_t b = 0; b < t.B(); ++b)
    for (std::int64_t h = 0; h < t.H(); ++h)
      for (std::int64_t s = 0; s < t.S(); ++s)
        for (std::int64_t c = 0; c < t.d(); ++c) a(z(b), z(h), z(s), z(c)) = t.get(b, h, s, c);
  return a;
}

TEST(BackwardStates, GoldsLastStatesAreTheReferenceGradients) {
  // The reference's gold backward uses eq. (7)-(11), not the recomputation: the states' gold
  // after the last step (times the scale for dQ, dK; summed over the group for dK, dV) must
  // give its dQ, dK, dV, and D its rowsum(dO * O).
  for (const Mask mask : kMasks) {
    const Problem p = make_problem(1, 4, 2, 11, 7, 5, mask, DType::f32);
    const ProblemData data = data_for(p);
    const StatesGrid g{3, 4};
    const StatesShape s = states_shape(p, g);
    const GoldBackwardStates gold = gold_backward_states(data, g);
    const auto Q = as_double(data.q), K = as_double(data.k), V = as_double(data.v),
               dO = as_double(data.dO);
    const reference::GoldForward fwd = reference::gold_forward(p, Q, K, V);
    const reference::GoldBackward ref = reference::gold_backward(p, Q, K, V, dO);
    for (std::int64_t h = 0; h < p.H; ++h)
      for (std::int64_t q = 0; q < p.S_q; ++q) {
        const std::size_t i = z(q / g.B_q), r = z(q % g.B_q);
        double D = 0.0;
        for (std::int64_t c = 0; c < p.d; ++c) D += dO(0, z(h), z(q), z(c)) * fwd.O(0, z(h), z(q), z(c));
        EXPECT_NEAR(gold.value.D(0, z(h), i, r), D, 1e-12);
        for (std::int64_t c = 0; c < p.d; ++c)
          EXPECT_NEAR(p.scale * gold.value.dQ(0, z(h), i, z(s.T_k - 1), r, z(c)),
                      ref.dQ(0, z(h), z(q), z(c)), 1e-12);
      }
    for (std::int64_t hk = 0; hk < p.H_kv; ++hk)
      for (std::int64_t key = 0; key < p.S_k; ++key)
        for (std::int64_t c = 0; c < p.d; ++c) {
          double dK = 0.0, dV = 0.0;
          for (std::int64_t h = hk * p.group_size(); h < (hk + 1) * p.group_size(); ++h) {
            const auto at = [&](const xt::xtensor<double, 6>& a) {
              return a(0, z(h), z(key / g.B_k), z(s.T_q - 1), z(key % g.B_k), z(c));
            };
            dK += p.scale * at(gold.value.dK);
            dV += at(gold.value.dV);
          }
          EXPECT_NEAR(dK, ref.dK(0, z(hk), z(key), z(c)), 1e-12);
          EXPECT_NEAR(dV, ref.dV(0, z(hk), z(key), z(c)), 1e-12);
        }
  }
}

TEST(BackwardStates, SelectionJudgesOneQueryTileAndShapesAreNamed) {
  const Problem p = make_problem(2, 2, 1, 12, 12, 8, Mask::none, DType::f32);
  const ProblemData data = data_for(p);
  BackwardKernel k;
  k.B_q = 4;
  k.B_k = 4;
  k.ds_without_D = true;
  const CandidateBackwardStates full = states_kernel::run_backward(data, k);
  // Head (1, 1), query tile 2, cut out of the kernel's full arrays.
  const StatesGrid g{4, 4, 1, 1, 2};
  CandidateBackwardStates one;
  one.dS = xt::xtensor<double, 6>(xt::view(*full.dS, xt::range(1, 2), xt::range(1, 2),
                                           xt::range(2, 3), xt::all(), xt::all(), xt::all()));
  one.dV = xt::xtensor<double, 6>(xt::view(*full.dV, xt::range(1, 2), xt::range(1, 2), xt::all(),
                                           xt::range(2, 3), xt::all(), xt::all()));
  const BackwardStatesReport r = judge_backward_states(data, g, one);
  ASSERT_TRUE(r.first.has_value());
  EXPECT_EQ(r.first->step.b, 1);
  EXPECT_EQ(r.first->step.h, 1);
  EXPECT_EQ(r.first->step.i, 2);
  EXPECT_EQ(r.first->cause, "ds_without_D") << where(r);
  // dV after query tile 2 (the sum over tiles 0..2) is right: the mistake does not reach it.
  EXPECT_EQ(r.quantities.back().quantity, StateQuantity::dV);
  EXPECT_EQ(r.quantities.back().failed, 0);
  // The full arrays do not fit the selection, and the message names the file.
  CandidateBackwardStates wrong;
  wrong.dV = *full.dV;
  try {
    judge_backward_states(data, g, wrong);
    ADD_FAILURE() << "no error for a shape outside the layout";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("dV.npy"), std::string::npos) << e.what();
  }
  EXPECT_THROW(judge_backward_states(data, g, CandidateBackwardStates{}), InvalidArgument);
  ProblemData no_dO = data;
  no_dO.dO = HostTensor();
  EXPECT_THROW(gold_backward_states(no_dO, g), InvalidArgument);
}

TEST(BackwardStates, JsonNamesTheFirstDivergenceWithItsAlgorithm2Line) {
  const Problem p = make_problem(1, 1, 1, 8, 12, 8, Mask::none, DType::f32);
  BackwardKernel k;
  k.ds_without_D = true;
  const BackwardStatesReport r = judge(data_for(p), k);
  ASSERT_TRUE(r.first.has_value());
  const nlohmann::json j = to_json(r);
  const nlohmann::json& f = j.at("first_divergence");
  EXPECT_EQ(f.at("quantity"), "dS");
  EXPECT_EQ(f.at("line"), 15);
  EXPECT_EQ(f.at("algorithm"), 2);
  EXPECT_EQ(f.at("cause"), "ds_without_D");
  EXPECT_EQ(f.at("i"), r.first->step.i);
  EXPECT_EQ(f.at("j"), r.first->step.j);
  EXPECT_EQ(f.at("expected").get<double>(), r.first->step.expected);
  EXPECT_EQ(f.at("found").get<double>(), r.first->step.found);
  EXPECT_FALSE(j.at("passed").get<bool>());
}

}  // namespace

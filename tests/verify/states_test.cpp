// The states judge (states.hpp): a correct Triton-style kernel (states_kernel.hpp) in each
// convention passes on awkward shapes and every mask, and each planted mistake is found at the
// step where it is made, computed here from the gold states, with its cause. Also: the gold
// states against their closed form, the mirror's last state against its own outputs, the
// selection, and the errors for wrong shapes.
#include <cmath>
#include <numbers>
#include <optional>
#include <string>
#include <tuple>

#include <gtest/gtest.h>
#include <xtensor/xview.hpp>

#include "flashref/cpu/backend.hpp"
#include "flashref/error.hpp"
#include "flashref/verify/runner.hpp"
#include "flashref/verify/states.hpp"
#include "flashref/verify/sum_magnitude.hpp"
#include "states_kernel.hpp"

namespace {

using namespace flashref;
using namespace flashref::verify;
using states_kernel::Kernel;

std::size_t z(std::int64_t n) { return static_cast<std::size_t>(n); }

constexpr Mask kMasks[] = {Mask::none, Mask::causal_top_left, Mask::causal_bottom_right};

ProblemData data_for(const Problem& p, std::uint64_t seed = 3) {
  return make_problem_data(p, {seed, false, Layout::bhsd});
}

StatesReport judge(const ProblemData& data, const Kernel& k) {
  return judge_forward_states(data, {k.B_q, k.B_k}, states_kernel::run(data, k));
}

std::string where(const StatesReport& r) {
  if (!r.first) return "no divergence";
  const StepCheck& c = r.first->step;
  return std::string(state_name(c.quantity)) + " at b=" + std::to_string(c.b) + " h=" +
         std::to_string(c.h) + " i=" + std::to_string(c.i) + " j=" + std::to_string(c.j) +
         " ratio " + std::to_string(c.ratio) + " [" + r.first->cause + "] " +
         r.first->explanation;
}

// Awkward shapes: partial tiles on both axes, S_q != S_k both ways, B_q != B_k, GQA, d odd.
struct Shape {
  std::int64_t S_q, S_k, d, B_q, B_k;
};
constexpr Shape kShapes[] = {{13, 21, 7, 4, 5}, {22, 9, 16, 8, 4}, {1, 5, 3, 3, 2}};

TEST(States, CorrectKernelInEveryConventionPassesEveryMaskAndShape) {
  for (const bool log2 : {false, true})
    for (const bool normalized : {false, true})
      for (const Mask mask : kMasks)
        for (const Shape& s : kShapes)
          for (const DType dtype : {DType::f32, DType::bf16}) {
            const Problem p = make_problem(1, 2, 1, s.S_q, s.S_k, s.d, mask, dtype);
            Kernel k;
            k.B_q = s.B_q;
            k.B_k = s.B_k;
            k.m_log2 = log2;
            k.acc_normalized = normalized;
            const StatesReport r = judge(data_for(p), k);
            SCOPED_TRACE(describe(p) + " tiles " + std::to_string(s.B_q) + "," +
                         std::to_string(s.B_k) + " log2 " + std::to_string(log2) +
                         " normalized " + std::to_string(normalized));
            EXPECT_TRUE(r.passed()) << where(r);
            EXPECT_EQ(r.conventions.m_log2, log2) << r.conventions_note;
            // With one key per row so far acc = acc / l: a tiny problem may not tell them apart.
            if (s.S_k > 5) {
              EXPECT_EQ(r.conventions.acc_normalized, normalized) << r.conventions_note;
            }
            for (const QuantitySummary& q : r.quantities) EXPECT_GT(q.steps, 0);
          }
}

TEST(States, CorrectKernelPassesOnLargeScores) {
  // Scores of several hundred: the states' noise floor (score rounding) is what lets a
  // correct kernel that sums S in another order pass.
  for (const Mask mask : kMasks) {
    const Problem p = make_problem(1, 1, 1, 24, 40, 16, mask, DType::f32);
    const ProblemData data = make_problem_data(p, {5, true, Layout::bhsd});
    for (const bool log2 : {false, true}) {
      Kernel k;
      k.B_q = 8;
      k.B_k = 16;
      k.m_log2 = log2;
      const StatesReport r = judge(data, k);
      EXPECT_TRUE(r.passed()) << describe(p) << " log2 " << log2 << ": " << where(r);
    }
  }
}

// The first step, in the walk's order, at which some real row of query tile i has seen the
// max grow by more than `growth` (alpha = exp(m_old - m) < 1 - growth) at key tile j >= 1.
std::optional<std::tuple<std::int64_t, std::int64_t>> first_growth(const ProblemData& data,
                                                                    const StatesGrid& g) {
  const Problem& p = data.problem;
  const StatesShape s = states_shape(p, g);
  const GoldForwardStates gold = gold_forward_states(data, g);
  for (std::int64_t i = 0; i < s.T_q; ++i)
    for (std::int64_t j = 1; j < s.T_k && visits(p, s, i, j); ++j)
      for (std::int64_t r = 0; r < s.B_q && i * s.B_q + r < p.S_q; ++r) {
        const double m_old = gold.value.m(0, 0, z(i), z(j - 1), z(r));
        const double m_new = gold.value.m(0, 0, z(i), z(j), z(r));
        if (std::isfinite(m_old) && std::exp(m_old - m_new) < 1.0 - 1e-4) return {{i, j}};
      }
  return std::nullopt;
}

void expect_at(const StatesReport& r, std::int64_t i, std::int64_t j, StateQuantity q,
               const std::string& cause) {
  ASSERT_TRUE(r.first.has_value()) << "no divergence found";
  const StepCheck& c = r.first->step;
  EXPECT_EQ(c.i, i) << where(r);
  EXPECT_EQ(c.j, j) << where(r);
  EXPECT_EQ(c.quantity, q) << where(r);
  EXPECT_EQ(r.first->cause, cause) << where(r);
  EXPECT_FALSE(c.pass);
}

TEST(States, ForgottenRescaleOfLIsFoundWhereTheMaxFirstGrows) {
  for (const bool log2 : {false, true}) {
    const Problem p = make_problem(1, 1, 1, 19, 23, 8, Mask::none, DType::f32);
    const ProblemData data = data_for(p);
    Kernel k;
    k.B_q = 4;
    k.B_k = 5;
    k.m_log2 = log2;
    k.l_not_rescaled = true;
    const auto at = first_growth(data, {k.B_q, k.B_k});
    ASSERT_TRUE(at.has_value());
    const StatesReport r = judge(data, k);
    expect_at(r, std::get<0>(*at), std::get<1>(*at), StateQuantity::l, "l_not_rescaled");
    // m was right at that step, and every state one step before.
    for (const StepCheck& c : r.first->this_step)
      if (c.quantity == StateQuantity::m) {
        EXPECT_TRUE(c.pass);
      }
    for (const StepCheck& c : r.first->previous_step) EXPECT_TRUE(c.pass);
    EXPECT_FALSE(r.first->previous_step.empty());
  }
}

TEST(States, AccumulatorRescaledWithTheNewMaxIsFoundWhereTheMaxFirstGrows) {
  const Problem p = make_problem(1, 1, 1, 17, 30, 8, Mask::causal_bottom_right, DType::f32);
  const ProblemData data = data_for(p);
  Kernel k;
  k.B_q = 4;
  k.B_k = 4;
  k.acc_rescaled_new_max = true;
  const auto at = first_growth(data, {k.B_q, k.B_k});
  ASSERT_TRUE(at.has_value());
  const StatesReport r = judge(data, k);
  expect_at(r, std::get<0>(*at), std::get<1>(*at), StateQuantity::acc, "acc_not_rescaled");
  for (const StepCheck& c : r.first->this_step)
    if (c.quantity != StateQuantity::acc) {
      EXPECT_TRUE(c.pass);
    }
}

TEST(States, StrictDiagonalMaskIsFoundOnTheFirstDiagonalTile) {
  for (const Mask mask : {Mask::causal_top_left, Mask::causal_bottom_right}) {
    // Query tile 0, key tile 0 holds the diagonal in both alignments here (S_q = S_k).
    const Problem p = make_problem(1, 1, 1, 14, 14, 8, mask, DType::f32);
    Kernel k;
    k.B_q = 4;
    k.B_k = 3;
    k.diagonal_strict = true;
    const StatesReport r = judge(data_for(p), k);
    ASSERT_TRUE(r.first.has_value());
    EXPECT_EQ(r.first->step.i, 0) << where(r);
    EXPECT_EQ(r.first->step.j, 0) << where(r);
    EXPECT_EQ(r.first->cause, "diagonal_mask_strict") << where(r);
  }
}

TEST(States, RunningMaxStartedAtZeroIsFoundAtTheFirstRowWithNegativeScores) {
  const Problem p = make_problem(1, 1, 1, 16, 12, 8, Mask::none, DType::f32);
  const ProblemData data = data_for(p);
  Kernel k;
  k.B_q = 4;
  k.B_k = 3;
  k.max_init_zero = true;
  // Where the gold max first lies below 0: the walk's first such step.
  const StatesShape s = states_shape(p, {k.B_q, k.B_k});
  const GoldForwardStates gold = gold_forward_states(data, {k.B_q, k.B_k});
  std::optional<std::tuple<std::int64_t, std::int64_t>> at;
  for (std::int64_t i = 0; i < s.T_q && !at; ++i)
    for (std::int64_t j = 0; j < s.T_k && !at; ++j)
      for (std::int64_t r = 0; r < s.B_q && !at; ++r)
        if (gold.value.m(0, 0, z(i), z(j), z(r)) < -1e-3) at = {{i, j}};
  ASSERT_TRUE(at.has_value());
  expect_at(judge(data, k), std::get<0>(*at), std::get<1>(*at), StateQuantity::m,
            "max_init_zero");
}

TEST(States, ConditionalRescaleIsAConventionAndAMistakeOnTopOfItIsStillFound) {
  // FlashAttention-4's conditional rescale keeps m until a tile raises it by more than 8 ln 2,
  // with l and acc relative to the kept m: judged against the gold re-based to it, in every
  // other convention. A deferring kernel whose causal mask hides the diagonal is still found.
  const Problem p = make_problem(1, 2, 1, 13, 17, 8, Mask::causal_bottom_right, DType::f32);
  const ProblemData data = data_for(p, 5);
  for (const bool log2 : {false, true})
    for (const bool normalized : {false, true}) {
      Kernel k;
      k.B_q = 4;
      k.B_k = 3;
      k.m_log2 = log2;
      k.acc_normalized = normalized;
      k.lazy_rescale = static_cast<float>(kConditionalRescale * (log2 ? std::numbers::log2e : 1.0));
      const std::string label =
          std::string(log2 ? "log2" : "natural") + (normalized ? ", normalized" : ", unnormalized");
      const StatesReport r = judge(data, k);
      EXPECT_FALSE(r.first.has_value()) << label << ": " << where(r);
      EXPECT_TRUE(r.conventions.m_deferred) << label << ": " << r.conventions_note;
      EXPECT_EQ(r.conventions.m_log2, log2) << label << ": " << r.conventions_note;
      EXPECT_EQ(r.conventions.acc_normalized, normalized) << label << ": " << r.conventions_note;
      k.diagonal_strict = true;
      const StatesReport wrong = judge(data, k);
      EXPECT_TRUE(wrong.first.has_value()) << label << ": a strict diagonal not found";
    }
  // On scores of hundreds every step rescales: nothing to tell it from Algorithm 1, and a
  // forgotten factor of l is found as it is without the deferral.
  const ProblemData large = make_problem_data(p, {5, true, Layout::bhsd});
  Kernel k;
  k.B_q = 4;
  k.B_k = 3;
  k.lazy_rescale = static_cast<float>(kConditionalRescale);
  const StatesReport r = judge(large, k);
  EXPECT_FALSE(r.first.has_value()) << where(r);
  EXPECT_FALSE(r.conventions.m_deferred) << r.conventions_note;
  k.l_not_rescaled = true;
  const StatesReport wrong = judge(large, k);
  ASSERT_TRUE(wrong.first.has_value());
  EXPECT_EQ(wrong.first->step.quantity, StateQuantity::l) << where(wrong);
}

TEST(States, ForgottenRescaleUnderTheConditionalRescaleIsNamedInTheKeptMaxsFrame) {
  // Scores built per key tile: about 0 in tile 0, 3 to 4.5 in tile 1 (a growth under 8 ln 2: a
  // deferring kernel keeps tile 0's max), about 12 to 16 in tile 2 (it rescales), 11 in tile 3.
  // A deferring kernel that forgets l's factor, or acc's, at tile 2 is named as Algorithm 1's
  // kernel is: the hypothesis is formed from the gold states re-based to the kept max (l' =
  // e^(m - kept) l, the factor e^(kept_old - kept_new)). In Algorithm 1's frame it misses by
  // (e^(m_1 - m_0) - 1) l_1, 3 to 4.5 in log units, so the test fails without the re-basing.
  const Problem p = make_problem(1, 1, 1, 8, 16, 8, Mask::none, DType::f32);
  ProblemData data = data_for(p, 7);
  const double tile_score[4] = {0.0, 3.0, 12.0, 11.0};
  for (std::int64_t q = 0; q < p.S_q; ++q)
    for (std::int64_t c = 0; c < p.d; ++c)
      data.q.set(0, 0, q, c, c == 0 ? 1.0f + 0.05f * static_cast<float>(q) : 0.0f);
  for (std::int64_t key = 0; key < p.S_k; ++key)
    data.k.set(0, 0, key, 0,
               static_cast<float>((tile_score[key / 4] + 0.1 * static_cast<double>(key % 4)) *
                                  std::sqrt(static_cast<double>(p.d))));
  for (const bool log2 : {false, true}) {
    Kernel k;
    k.B_q = 4;
    k.B_k = 4;
    k.m_log2 = log2;
    k.lazy_rescale = static_cast<float>(kConditionalRescale * (log2 ? std::numbers::log2e : 1.0));
    const StatesReport right = judge(data, k);
    ASSERT_FALSE(right.first.has_value()) << where(right);
    ASSERT_TRUE(right.conventions.m_deferred) << right.conventions_note;
    k.l_not_rescaled = true;
    const StatesReport r = judge(data, k);
    expect_at(r, 0, 2, StateQuantity::l, "l_not_rescaled");
    EXPECT_NE(r.first->explanation.find("kept max grew"), std::string::npos)
        << r.first->explanation;
    k.l_not_rescaled = false;
    k.acc_rescaled_new_max = true;
    expect_at(judge(data, k), 0, 2, StateQuantity::acc, "acc_not_rescaled");
  }
}

TEST(States, LastKeyTileReadPastSkIsFoundAtTheLastKeyTile) {
  // The padded keys (indices S_k..) pass the index comparison for every row without a mask,
  // and under the top-left causal mask for rows q >= S_k (never under bottom-right, whose last
  // row's last key is S_k - 1).
  for (const Mask mask : {Mask::none, Mask::causal_top_left}) {
    const Problem p = make_problem(1, 1, 1, 14, 10, 8, mask, DType::f32);
    Kernel k;
    k.B_q = 4;
    k.B_k = 4;  // T_k = 3, the last tile holds 2 keys and 2 of padding
    k.read_past_S_k = true;
    const std::int64_t first_row = mask == Mask::none ? 0 : p.S_k;
    const StatesReport r = judge(data_for(p), k);
    ASSERT_TRUE(r.first.has_value());
    EXPECT_EQ(r.first->step.i, first_row / k.B_q) << where(r);
    EXPECT_EQ(r.first->step.j, 2) << where(r);
    EXPECT_EQ(r.first->cause, "key_padding_unmasked") << where(r);
  }
}

TEST(States, SelectionJudgesOneHeadAndQueryTile) {
  const Problem p = make_problem(2, 3, 3, 12, 12, 8, Mask::none, DType::f32);
  const ProblemData data = data_for(p);
  Kernel k;
  k.B_q = 4;
  k.B_k = 4;
  k.l_not_rescaled = true;
  const CandidateStates full = states_kernel::run(data, k);
  // Cut head (1, 2), query tile 1 out of the kernel's full arrays.
  const StatesGrid g{4, 4, 1, 2, 1};
  CandidateStates one;
  one.l = xt::xtensor<double, 5>(xt::view(*full.l, xt::range(1, 2), xt::range(2, 3),
                                          xt::range(1, 2), xt::all(), xt::all()));
  const StatesReport r = judge_forward_states(data, g, one);
  ASSERT_TRUE(r.first.has_value());
  EXPECT_EQ(r.first->step.b, 1);
  EXPECT_EQ(r.first->step.h, 2);
  EXPECT_EQ(r.first->step.i, 1);
  EXPECT_EQ(r.first->cause, "l_not_rescaled") << where(r);
  // The full arrays do not fit the selection's layout, and the message names the file.
  CandidateStates wrong;
  wrong.l = *full.l;
  EXPECT_THROW(judge_forward_states(data, g, wrong), InvalidArgument);
  EXPECT_THROW(judge_forward_states(data, g, CandidateStates{}), InvalidArgument);
  EXPECT_THROW(states_shape(p, {4, 4, -1, 0, -1}), InvalidArgument);
  EXPECT_THROW(states_shape(p, {4, 4, 2, 0, -1}), InvalidArgument);
  EXPECT_THROW(states_shape(p, {0, 4}), InvalidArgument);
}

TEST(States, GoldStatesAreTheClosedFormOfTheirDefinition) {
  // m = max of the visible scores of key tiles 0..j, l = sum exp(S - m), acc = sum exp(S - m) V.
  const Problem p = make_problem(1, 1, 1, 7, 11, 5, Mask::causal_bottom_right, DType::f32);
  const ProblemData data = data_for(p);
  const StatesGrid g{3, 4};
  const StatesShape s = states_shape(p, g);
  const GoldForwardStates gold = gold_forward_states(data, g);
  for (std::int64_t q = 0; q < p.S_q; ++q) {
    const std::int64_t i = q / g.B_q, r = q % g.B_q;
    for (std::int64_t j = 0; j < s.T_k; ++j) {
      const std::int64_t last = std::min((j + 1) * g.B_k, p.S_k) - 1;
      const std::int64_t seen = std::min(last, p.last_visible_key(q));
      std::vector<double> S;
      for (std::int64_t key = 0; key <= seen; ++key) {
        double dot = 0.0;
        for (std::int64_t c = 0; c < p.d; ++c)
          dot += double{data.q.get(0, 0, q, c)} * double{data.k.get(0, 0, key, c)};
        S.push_back(dot * p.scale);
      }
      const double m = S.empty() ? -INFINITY : *std::max_element(S.begin(), S.end());
      EXPECT_EQ(gold.value.m(0, 0, z(i), z(j), z(r)), m);
      double l = 0.0;
      for (double x : S) l += std::exp(x - m);
      EXPECT_NEAR(gold.value.l(0, 0, z(i), z(j), z(r)), l, 1e-12 * (1.0 + l));
      for (std::int64_t c = 0; c < p.d; ++c) {
        double acc = 0.0;
        for (std::size_t key = 0; key < S.size(); ++key)
          acc += std::exp(S[key] - m) * data.v.get(0, 0, static_cast<std::int64_t>(key), c);
        EXPECT_NEAR(gold.value.acc(0, 0, z(i), z(j), z(r), z(c)), acc, 1e-12 * (1.0 + l));
      }
    }
  }
}

TEST(States, MirrorsLastStateGivesItsOwnOutput) {
  // O = acc / l after the last visited key tile: the baseline states are the mirror's.
  const Problem p = make_problem(1, 2, 1, 10, 13, 6, Mask::causal_top_left, DType::f32);
  const ProblemData data = data_for(p);
  const StatesGrid g{4, 5};
  const StatesShape s = states_shape(p, g);
  const ForwardStates base = baseline_forward_states(data, g);
  RunOptions run;
  run.exec.tile_q = 4;
  run.exec.tile_k = 5;
  const RunOutputs out = run_backend(*cpu::make_backend(), data, run);
  for (std::int64_t h = 0; h < p.H; ++h)
    for (std::int64_t q = 0; q < p.S_q; ++q)
      for (std::int64_t c = 0; c < p.d; ++c) {
        const std::size_t i = z(q / g.B_q), r = z(q % g.B_q), last = z(s.T_k - 1);
        const double O = base.acc(0, z(h), i, last, r, z(c)) / base.l(0, z(h), i, last, r);
        EXPECT_NEAR(out.o.get(0, h, q, c), O, 1e-6 * (1.0 + std::fabs(O)));
      }
}

TEST(States, JsonNamesTheFirstDivergence) {
  const Problem p = make_problem(1, 1, 1, 8, 12, 8, Mask::none, DType::f32);
  Kernel k;
  k.l_not_rescaled = true;
  const StatesReport r = judge(data_for(p), k);
  const nlohmann::json j = to_json(r);
  ASSERT_TRUE(r.first.has_value());
  const nlohmann::json& f = j.at("first_divergence");
  EXPECT_EQ(f.at("quantity"), "l");
  EXPECT_EQ(f.at("line"), 12);
  EXPECT_EQ(f.at("j"), r.first->step.j);
  EXPECT_EQ(f.at("expected").get<double>(), r.first->step.expected);
  EXPECT_EQ(f.at("found").get<double>(), r.first->step.found);
  EXPECT_FALSE(j.at("passed").get<bool>());
}

}  // namespace

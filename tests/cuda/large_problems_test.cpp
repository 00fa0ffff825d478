// Scale: the leaderboard problem (B=1, H=16, S=16384, d=64, bf16, causal) run whole on the
// GPU and judged on slices small enough for the double-precision gold, a problem whose
// tensors span more than 2^31 elements (64-bit offsets), and a batch past 65,535.
//
// A slice of query rows [r0, r0 + n) of one head is itself an attention problem: those rows
// with keys [0, r0 + n) and the bottom-right causal mask (offset r0) see exactly what they see
// in the whole problem, so their O, L and dQ are the whole problem's. The keys of the last
// slice are seen by no other query, so its dK and dV rows are the whole problem's too. Each
// slice is judged under the rule (verification.hpp) against the gold, the baseline and the
// score-rounding noise computed on the slice, and the cpu backend is run on the same slice as a
// second candidate. As in `flashref verify` (the same judge and choose_gradient_baseline), each
// candidate's gradients are judged against the baseline backward run from that candidate's O
// and L when both passed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <xtensor/xview.hpp>

#include "cuda_test_support.hpp"
#include "flashref/verify/check.hpp"
#include "flashref/verify/check_report.hpp"
#include "flashref/verify/gold.hpp"
#include "flashref/verify/noise_floor.hpp"
#include "flashref/verify/problem_data.hpp"
#include "flashref/verify/rule.hpp"
#include "flashref/verify/runner.hpp"
#include "flashref/verify/stats.hpp"
#include "flashref/verify/verification.hpp"

namespace flashref {
namespace {

using verify::HostTensor;
using verify::Layout;
using verify::TensorId;

// Rows [s0, s0 + n) of head h of batch 0, as a one-head tensor (values copied exactly).
HostTensor slice_rows(const HostTensor& t, std::int64_t h, std::int64_t s0, std::int64_t n) {
  HostTensor out(t.dtype(), Layout::bshd, 1, 1, n, t.d());
  for (std::int64_t s = 0; s < n; ++s)
    for (std::int64_t i = 0; i < t.d(); ++i) out.set(0, 0, s, i, t.get(0, h, s0 + s, i));
  return out;
}

// Rows [s0, s0 + n) of head h of batch 0 of a canonical tensor (L: 3-D).
xt::xarray<double> rows_of(const xt::xarray<double>& t, std::int64_t h, std::int64_t s0,
                           std::int64_t n) {
  if (t.dimension() == 4) {
    return xt::view(t, xt::range(0, 1), xt::range(h, h + 1), xt::range(s0, s0 + n), xt::all());
  }
  return xt::view(t, xt::range(0, 1), xt::range(h, h + 1), xt::range(s0, s0 + n));
}

// The rule (verification.hpp), worst indices placed in tiles of 128 rows. `noise_sigma`:
// max_e sigma_T(e) over the elements judged (noise_floor.hpp).
verify::TensorReport judge(TensorId id, const Problem& p, const xt::xarray<double>& cand,
                           const xt::xarray<double>& gold, const xt::xarray<double>& base,
                           double noise_sigma) {
  return verify::judge(id, p, cand, base, gold, noise_sigma, 128);
}

// The gradients' baseline under the rule (verify::choose_gradient_baseline): the reference
// backward run from the candidate's O and L when both passed (the inputs the candidate's
// backward received), else the baseline's own. `forward` holds the candidate's O and L reports.
verify::RunOutputs gradient_baseline(const Backend& reference, const verify::ProblemData& sub,
                                     const verify::RunOptions& run, const verify::RunOutputs& base,
                                     const std::vector<verify::TensorReport>& forward,
                                     const HostTensor& o, const xt::xtensor<float, 3>& lse) {
  const verify::GradientBaseline choice = verify::choose_gradient_baseline(forward, "candidate");
  if (choice.inputs != verify::BackwardInputs::candidate) return base;
  return verify::run_backward_from(reference, sub, run, o, lse);
}

std::string describe(const verify::TensorReport& t) {
  const verify::RuleCheck& r = t.rule;
  return std::string(verify::tensor_name(r.tensor)) + ": error " + std::to_string(r.candidate_err) +
         " vs limit " + std::to_string(r.limit) + " (baseline " + std::to_string(r.baseline_err) +
         ") " + r.reason;
}

TEST(CudaLarge, LeaderboardProblemMatchesTheGoldOnSlices) {
  FLASHREF_REQUIRE_GPU();
  constexpr std::int64_t S = 16384, H = 16, d = 64, n = 192;
  const Problem big = make_problem(1, H, H, S, S, d, Mask::causal_top_left, DType::bf16);
  verify::InputOptions in;
  in.seed = 2025;
  const verify::ProblemData data = verify::make_problem_data(big, in);
  const std::unique_ptr<Backend> cuda = make_backend("cuda");
  verify::RunOptions run;
  run.backward = true;
  run.exec.deterministic = !cuda_test::nondeterministic_requested();
  const verify::RunOutputs gpu = verify::run_backend(*cuda, data, run);

  std::mt19937_64 rng(99);
  const std::int64_t h = static_cast<std::int64_t>(rng() % H);
  const std::int64_t r_mid = static_cast<std::int64_t>(rng() % (S - 2 * n)) + n;
  const std::unique_ptr<Backend> reference = make_backend("reference");
  const std::unique_ptr<Backend> cpu = make_backend("cpu");
  for (const std::int64_t r0 : {std::int64_t{0}, r_mid, S - n}) {
    SCOPED_TRACE("head " + std::to_string(h) + ", query rows [" + std::to_string(r0) + ", " +
                 std::to_string(r0 + n) + ")");
    verify::ProblemData sub;
    sub.problem = make_problem(1, 1, 1, n, r0 + n, d, Mask::causal_bottom_right, DType::bf16);
    sub.q = slice_rows(data.q, h, r0, n);
    sub.k = slice_rows(data.k, h, 0, r0 + n);
    sub.v = slice_rows(data.v, h, 0, r0 + n);
    sub.dO = slice_rows(data.dO, h, r0, n);
    const verify::TensorSet gold = verify::compute_gold(sub, true);
    // The rule's noise part: bf16, so with the P~ and dS operand terms (as verify computes it).
    const verify::ScoreNoise noise = verify::score_rounding_noise(
        sub, true, verify::product_operand_rounding(DType::bf16, false));
    const verify::RunOutputs base = verify::run_backend(*reference, sub, run);
    const verify::RunOutputs host = verify::run_backend(*cpu, sub, run);
    const Problem& p = sub.problem;
    const auto sigma = [&](TensorId id) { return noise.max_sigma(id); };
    // A tensor of the whole GPU run, of the slice's cpu run, of the gold, of a baseline.
    const auto gpu_rows = [&](TensorId id) { return rows_of(gpu.values.at(id), h, r0, n); };
    const auto cpu_of = [&](TensorId id) -> const xt::xarray<double>& {
      return host.values.at(id);
    };
    const auto gold_of = [&](TensorId id) -> const xt::xarray<double>& { return gold.at(id); };
    const auto base_of = [&](TensorId id) -> const xt::xarray<double>& {
      return base.values.at(id);
    };

    std::vector<verify::TensorReport> gpu_checks = {
        judge(TensorId::O, p, gpu_rows(TensorId::O), gold_of(TensorId::O), base_of(TensorId::O),
              sigma(TensorId::O)),
        judge(TensorId::L, p, gpu_rows(TensorId::L), gold_of(TensorId::L), base_of(TensorId::L),
              sigma(TensorId::L))};
    std::vector<verify::TensorReport> cpu_checks = {
        judge(TensorId::O, p, cpu_of(TensorId::O), gold_of(TensorId::O), base_of(TensorId::O),
              sigma(TensorId::O)),
        judge(TensorId::L, p, cpu_of(TensorId::L), gold_of(TensorId::L), base_of(TensorId::L),
              sigma(TensorId::L))};
    // cuda's O and L of these rows, as its backward received them.
    const xt::xtensor<float, 3> gpu_lse =
        xt::view(gpu.lse, xt::range(0, 1), xt::range(h, h + 1), xt::range(r0, r0 + n));
    const verify::RunOutputs gpu_base = gradient_baseline(*reference, sub, run, base, gpu_checks,
                                                          slice_rows(gpu.o, h, r0, n), gpu_lse);
    const verify::RunOutputs cpu_base =
        gradient_baseline(*reference, sub, run, base, cpu_checks, host.o, host.lse);
    gpu_checks.push_back(judge(TensorId::dQ, p, gpu_rows(TensorId::dQ), gold_of(TensorId::dQ),
                               gpu_base.values.at(TensorId::dQ), sigma(TensorId::dQ)));
    cpu_checks.push_back(judge(TensorId::dQ, p, cpu_of(TensorId::dQ), gold_of(TensorId::dQ),
                               cpu_base.values.at(TensorId::dQ), sigma(TensorId::dQ)));
    if (r0 == S - n) {
      // Keys [S - n, S): in the slice they are key rows [r0, r0 + n) too, seen by the same
      // queries, so their sigmas are the whole problem's. The floor takes the max over them.
      const auto key_rows = [&](const xt::xarray<double>& t, std::int64_t head) {
        return rows_of(t, head, r0, n);
      };
      const auto key_sigma = [&](const xt::xtensor<double, 4>& sigmas) {
        const xt::xarray<double> rows = key_rows(sigmas, 0);
        return *std::max_element(rows.begin(), rows.end());
      };
      gpu_checks.push_back(judge(TensorId::dK, p, key_rows(gpu.values.at(TensorId::dK), h),
                                 key_rows(gold_of(TensorId::dK), 0),
                                 key_rows(gpu_base.values.at(TensorId::dK), 0),
                                 key_sigma(noise.dK)));
      gpu_checks.push_back(judge(TensorId::dV, p, key_rows(gpu.values.at(TensorId::dV), h),
                                 key_rows(gold_of(TensorId::dV), 0),
                                 key_rows(gpu_base.values.at(TensorId::dV), 0),
                                 key_sigma(noise.dV)));
      cpu_checks.push_back(judge(
          TensorId::dK, p, key_rows(cpu_of(TensorId::dK), 0), key_rows(gold_of(TensorId::dK), 0),
          key_rows(cpu_base.values.at(TensorId::dK), 0), key_sigma(noise.dK)));
    }
    for (const verify::TensorReport& t : gpu_checks) {
      EXPECT_TRUE(t.rule.pass) << "cuda " << describe(t);
    }
    for (const verify::TensorReport& t : cpu_checks) {
      EXPECT_TRUE(t.rule.pass) << "cpu " << describe(t);
    }
  }
}

// Every tensor view has a batch stride of 2^31 + 64 elements, so batch 1 lives past element
// 2^31 of each buffer (8 buffers of 4.3 GB). The results must be bit-identical to the same
// problem in compact tensors: each (batch, head) is computed the same way wherever it lives.
TEST(CudaLarge, TensorsPast2To31ElementsUse64BitOffsets) {
  FLASHREF_REQUIRE_GPU();
  const std::unique_ptr<Backend> cuda = make_backend("cuda");
  const DeviceRuntime* rt = cuda->device_runtime();
  const Problem p = make_problem(2, 2, 1, 300, 300, 64, Mask::causal_top_left, DType::bf16);
  constexpr std::int64_t kBatchStride = (std::int64_t{1} << 31) + 64;
  const std::size_t span_bytes = static_cast<std::size_t>(kBatchStride + 300 * 2 * 64) * 2;

  verify::InputOptions in;
  in.seed = 5;
  in.layout = Layout::bshd;
  const verify::ProblemData data = verify::make_problem_data(p, in);
  verify::RunOptions run;
  run.backward = true;
  const verify::RunOutputs compact = verify::run_backend(*cuda, data, run);

  std::vector<void*> buffers;
  auto cleanup = [&] {
    for (void* b : buffers) rt->release(b);
  };
  // A (B, S, H, d) view whose batches are kBatchStride elements apart.
  auto spread = [&](const HostTensor* src, std::int64_t H) -> TensorView {
    void* base = rt->allocate(span_bytes);  // throws: the catch below releases the others
    buffers.push_back(base);
    rt->fill_bytes(base, 0xff, span_bytes);
    TensorView v{base, DType::bf16, 2, 300, H, 64, kBatchStride, H * 64, 64};
    if (src != nullptr) {
      const std::size_t batch_bytes = static_cast<std::size_t>(300 * H * 64) * 2;
      for (int b = 0; b < 2; ++b)
        rt->to_device(static_cast<char*>(base) + static_cast<std::size_t>(b * kBatchStride) * 2,
                      static_cast<const char*>(src->data()) + b * batch_bytes, batch_bytes);
    }
    return v;
  };
  try {
    ForwardParams f;
    f.problem = p;
    f.q = spread(&data.q, 2);
    f.k = spread(&data.k, 1);
    f.v = spread(&data.v, 1);
    f.o = spread(nullptr, 2);
    void* lse = rt->allocate(2 * 2 * 300 * sizeof(float));
    buffers.push_back(lse);
    f.lse = static_cast<float*>(lse);
    cuda->forward(f);
    BackwardParams g;
    g.problem = p;
    g.q = f.q;
    g.k = f.k;
    g.v = f.v;
    g.o = f.o;
    g.lse = f.lse;
    g.dO = spread(&data.dO, 2);
    g.dq = spread(nullptr, 2);
    g.dk = spread(nullptr, 1);
    g.dv = spread(nullptr, 1);
    cuda->backward(g);
    rt->synchronize();

    auto expect_same = [&](const TensorView& v, const HostTensor& expected, const char* name) {
      const std::size_t batch_bytes = static_cast<std::size_t>(300 * v.heads * 64) * 2;
      std::vector<char> got(batch_bytes);
      for (int b = 0; b < 2; ++b) {
        rt->to_host(
            got.data(),
            static_cast<const char*>(v.data) + static_cast<std::size_t>(b * kBatchStride) * 2,
            batch_bytes);
        EXPECT_EQ(
            std::memcmp(got.data(), static_cast<const char*>(expected.data()) + b * batch_bytes,
                        batch_bytes),
            0)
            << name << " batch " << b;
      }
    };
    expect_same(f.o, compact.o, "O");
    expect_same(g.dq, compact.dq, "dQ");
    expect_same(g.dk, compact.dk, "dK");
    expect_same(g.dv, compact.dv, "dV");
    std::vector<float> l(2 * 2 * 300);
    rt->to_host(l.data(), f.lse, l.size() * sizeof(float));
    EXPECT_EQ(std::memcmp(l.data(), compact.lse.data(), l.size() * sizeof(float)), 0) << "L";
  } catch (...) {
    cleanup();
    throw;
  }
  cleanup();
}

// A batch past 65,535, where a grid's y and z stop: every kernel numbers its blocks in x, the
// sm90 d = 64 forward's second kernel too, which computes again the rows past the fold's range
// after the forward at S_q > 1,024 (kernels/sm90/fwd_rows_unfolded.cuh). B = 65,537 and H = 1:
// 35 GB of Q, K, V and O. Each batch is a copy of one of the two batches of a small problem
// judged against the gold: batch 0 with rows past the fold's range planted (as CudaLargeScores
// plants them), batch 1 without. Each batch of the large run must be bit for bit what the small
// run gave its copy: a (batch, head) is computed the same way wherever it is numbered.
TEST(CudaLarge, BatchesPast65535ComputeTheirRowsPastTheFoldsRange) {
  FLASHREF_REQUIRE_GPU();
  constexpr std::int64_t kBatches = 65537, S = 1100, d = 64;
  const std::unique_ptr<Backend> cuda = make_backend("cuda");
  const DeviceRuntime* rt = cuda->device_runtime();
  const Problem small = make_problem(2, 1, 1, S, S, d, Mask::causal_top_left, DType::bf16);
  verify::InputOptions in;
  in.seed = 11;
  in.layout = Layout::bshd;
  verify::ProblemData data = verify::make_problem_data(small, in);
  const std::int64_t marked_rows[][2] = {{10, 3}, {600, 599}, {S - 1, S / 2}};  // (row, key)
  for (const auto& [r, j] : marked_rows)
    for (std::int64_t i = 0; i < 8; ++i) {
      data.q.set(0, 0, r, i, 6e4f);
      data.k.set(0, 0, j, i, 6e4f);
    }
  const verify::RunOutputs compact = verify::run_backend(*cuda, data, verify::RunOptions{});
  const verify::CheckResult judged = verify::check_candidate(data, compact.values, 64, 64);
  ASSERT_TRUE(judged.passed()) << verify::format_check(small, judged);
  for (const auto& [r, j] : marked_rows) ASSERT_TRUE(std::isfinite(compact.lse(0, 0, r)));

  // Which small batch each large one copies: batch 0 at both ends, in the middle, and at the
  // two batches past 65,535.
  const auto copy_of = [](std::int64_t b) {
    return b == 0 || b == 40000 || b == 65535 || b == 65536 ? 0 : 1;
  };
  const std::size_t batch_bytes = static_cast<std::size_t>(S * d) * 2;
  const Problem p = make_problem(kBatches, 1, 1, S, S, d, Mask::causal_top_left, DType::bf16);
  constexpr std::int64_t kChunk = 1024;  // batches a host transfer moves
  std::vector<char> staging(kChunk * batch_bytes);
  std::vector<void*> buffers;
  auto cleanup = [&] {
    for (void* b : buffers) rt->release(b);
  };
  // A packed (B, S, 1, d) tensor of the large problem, each batch copied from `src`.
  auto allocate = [&](std::size_t bytes) {
    void* ptr = rt->allocate(bytes);  // throws: the catch below releases the others
    buffers.push_back(ptr);
    return ptr;
  };
  auto tensor = [&](const HostTensor* src) {
    void* base = allocate(kBatches * batch_bytes);
    for (std::int64_t b0 = 0; src != nullptr && b0 < kBatches; b0 += kChunk) {
      const std::int64_t n = std::min(kChunk, kBatches - b0);
      for (std::int64_t b = 0; b < n; ++b)
        std::memcpy(staging.data() + b * batch_bytes,
                    static_cast<const char*>(src->data()) + copy_of(b0 + b) * batch_bytes,
                    batch_bytes);
      rt->to_device(static_cast<char*>(base) + b0 * batch_bytes, staging.data(), n * batch_bytes);
    }
    return TensorView{base, DType::bf16, kBatches, S, 1, d, S * d, d, d};
  };
  ForwardParams f;
  f.problem = p;
  try {
    f.q = tensor(&data.q);
    f.k = tensor(&data.k);
    f.v = tensor(&data.v);
    f.o = tensor(nullptr);
    f.lse = static_cast<float*>(allocate(kBatches * S * sizeof(float)));
  } catch (const std::runtime_error& e) {
    cleanup();
    GTEST_SKIP() << "skipped: needs 35 GB of device memory (" << e.what() << ")";
  }
  try {
    cuda->forward(f);
    rt->synchronize();
    const std::size_t lse_bytes = static_cast<std::size_t>(S) * sizeof(float);
    std::vector<float> lse(kChunk * S);
    int mismatched = 0;
    for (std::int64_t b0 = 0; b0 < kBatches; b0 += kChunk) {
      const std::int64_t n = std::min(kChunk, kBatches - b0);
      rt->to_host(staging.data(), static_cast<const char*>(f.o.data) + b0 * batch_bytes,
                  n * batch_bytes);
      rt->to_host(lse.data(), f.lse + b0 * S, n * lse_bytes);
      for (std::int64_t b = 0; b < n; ++b) {
        const int c = copy_of(b0 + b);
        const bool same_o =
            std::memcmp(staging.data() + b * batch_bytes,
                        static_cast<const char*>(compact.o.data()) + c * batch_bytes,
                        batch_bytes) == 0;
        const bool same_l =
            std::memcmp(lse.data() + b * S, compact.lse.data() + c * S, lse_bytes) == 0;
        if ((!same_o || !same_l) && ++mismatched <= 5)
          ADD_FAILURE() << "batch " << b0 + b << " (a copy of batch " << c
                        << "): " << (same_o ? "" : "O ") << (same_l ? "" : "L ")
                        << "differ from the small run's";
      }
    }
    EXPECT_EQ(mismatched, 0) << "batches whose O or L differ";
  } catch (...) {
    cleanup();
    throw;
  }
  cleanup();
}

}  // namespace
}  // namespace flashref

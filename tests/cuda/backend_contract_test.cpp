// The cuda backend's contract: what supports() says and why, errors that name the field,
// nothing written on bad input, and the DeviceRuntime the runner and bench use.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "cuda_test_support.hpp"
#include "flashref/error.hpp"

namespace flashref {
namespace {

using ::testing::HasSubstr;

TEST(CudaBackend, NameAndMemorySpace) {
  const std::unique_ptr<Backend> b = make_backend("cuda");
  EXPECT_EQ(b->name(), "cuda");
  EXPECT_EQ(b->memory_space(), MemorySpace::device);
  EXPECT_NE(b->device_runtime(), nullptr);
}

// CI has no GPU: there the backend must say so, and refuse to run, without crashing.
TEST(CudaBackend, WithoutAGpuSupportsSaysWhyAndForwardLaunchesNothing) {
  if (cuda_test::gpu_support().ok) GTEST_SKIP() << "skipped: a GPU is present";
  const std::unique_ptr<Backend> b = make_backend("cuda");
  const Problem p = make_problem(1, 1, 1, 4, 4, 8, Mask::none, DType::f32);
  const Support s = b->supports(p);
  EXPECT_FALSE(s.ok);
  EXPECT_THAT(s.reason, HasSubstr("no CUDA device"));
  std::vector<float> q(32, 1.0f), k(32, 1.0f), v(32, 1.0f), o(32, 7.0f), lse(4, 7.0f);
  ForwardParams f;
  f.problem = p;
  f.q = bsd_view(q.data(), DType::f32, 1, 4, 8);
  f.k = bsd_view(k.data(), DType::f32, 1, 4, 8);
  f.v = bsd_view(v.data(), DType::f32, 1, 4, 8);
  f.o = bsd_view(o.data(), DType::f32, 1, 4, 8);
  f.lse = lse.data();
  EXPECT_THROW(b->forward(f), Unsupported);
  for (float x : o) EXPECT_EQ(x, 7.0f);
}

// Device buffers for one small problem, filled with a sentinel byte, so a test can check that
// a rejected call wrote nothing.
struct DeviceProblem {
  static constexpr unsigned char kSentinel = 0x5a;
  const DeviceRuntime* rt;
  Problem p;
  std::vector<void*> buffers;
  ForwardParams fwd;
  BackwardParams bwd;

  DeviceProblem(const DeviceRuntime* runtime, const Problem& problem) : rt(runtime), p(problem) {
    auto view = [&](DType t, std::int64_t S, std::int64_t H) {
      const std::size_t bytes = static_cast<std::size_t>(p.B * S * H * p.d) * dtype_size(t);
      void* ptr = rt->allocate(bytes);
      rt->fill_bytes(ptr, kSentinel, bytes);
      buffers.push_back(ptr);
      return bshd_view(ptr, t, p.B, S, H, p.d);
    };
    fwd.problem = bwd.problem = p;
    fwd.q = bwd.q = view(p.dtype, p.S_q, p.H);
    fwd.k = bwd.k = view(p.dtype, p.S_k, p.H_kv);
    fwd.v = bwd.v = view(p.dtype, p.S_k, p.H_kv);
    fwd.o = bwd.o = view(p.dtype, p.S_q, p.H);
    bwd.dO = view(p.dtype, p.S_q, p.H);
    bwd.dq = view(p.grad_dtype, p.S_q, p.H);
    bwd.dk = view(p.grad_dtype, p.S_k, p.H_kv);
    bwd.dv = view(p.grad_dtype, p.S_k, p.H_kv);
    const std::size_t lse_bytes = static_cast<std::size_t>(p.B * p.H * p.S_q) * sizeof(float);
    void* lse = rt->allocate(lse_bytes);
    rt->fill_bytes(lse, kSentinel, lse_bytes);
    buffers.push_back(lse);
    fwd.lse = static_cast<float*>(lse);
    bwd.lse = fwd.lse;
  }
  ~DeviceProblem() {
    for (void* b : buffers) rt->release(b);
  }
  // Every output buffer still holds only the sentinel.
  bool outputs_untouched() const {
    auto untouched = [&](const void* ptr, std::size_t bytes) {
      std::vector<unsigned char> host(bytes);
      rt->to_host(host.data(), ptr, bytes);
      for (unsigned char c : host)
        if (c != kSentinel) return false;
      return true;
    };
    const std::size_t q_bytes = static_cast<std::size_t>(p.B * p.S_q * p.H * p.d);
    const std::size_t k_bytes = static_cast<std::size_t>(p.B * p.S_k * p.H_kv * p.d);
    return untouched(fwd.o.data, q_bytes * dtype_size(p.dtype)) &&
           untouched(fwd.lse, static_cast<std::size_t>(p.B * p.H * p.S_q) * sizeof(float)) &&
           untouched(bwd.dq.data, q_bytes * dtype_size(p.grad_dtype)) &&
           untouched(bwd.dk.data, k_bytes * dtype_size(p.grad_dtype)) &&
           untouched(bwd.dv.data, k_bytes * dtype_size(p.grad_dtype));
  }
};

template <typename E, typename F>
std::string thrown_message(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "(nothing thrown)";
}

TEST(CudaBackend, InvalidInputIsRejectedNamingTheFieldAndNothingIsWritten) {
  FLASHREF_REQUIRE_GPU();
  const std::unique_ptr<Backend> b = make_backend("cuda");
  DeviceProblem dp(b->device_runtime(),
                   make_problem(1, 4, 2, 40, 40, 64, Mask::causal_top_left, DType::bf16));
  {
    ForwardParams f = dp.fwd;
    f.problem.H_kv = 3;  // does not divide H = 4
    EXPECT_THAT(thrown_message<InvalidArgument>([&] { b->forward(f); }), HasSubstr("problem.H_kv"));
  }
  {
    ForwardParams f = dp.fwd;
    f.k.data = nullptr;
    EXPECT_THAT(thrown_message<InvalidArgument>([&] { b->forward(f); }), HasSubstr("params.k"));
  }
  {
    ForwardParams f = dp.fwd;
    f.o = f.q;  // output aliasing an input
    EXPECT_THAT(thrown_message<InvalidArgument>([&] { b->forward(f); }), HasSubstr("params.o"));
  }
  {
    BackwardParams g = dp.bwd;
    g.dv.seq = 39;  // wrong shape
    EXPECT_THAT(thrown_message<InvalidArgument>([&] { b->backward(g); }), HasSubstr("params.dv"));
  }
  {
    BackwardParams g = dp.bwd;
    g.problem.scale = std::numeric_limits<double>::infinity();
    EXPECT_THAT(thrown_message<InvalidArgument>([&] { b->backward(g); }),
                HasSubstr("problem.scale"));
  }
  {
    // Host memory where device memory is required.
    std::vector<std::uint16_t> host(40 * 4 * 64);
    ForwardParams f = dp.fwd;
    f.q = bshd_view(host.data(), DType::bf16, 1, 40, 4, 64);
    EXPECT_THAT(thrown_message<InvalidArgument>([&] { b->forward(f); }), HasSubstr("params.q"));
  }
  EXPECT_TRUE(dp.outputs_untouched());
}

TEST(CudaBackend, MisalignedViewsAreUnsupportedSayingWhyAndNothingIsWritten) {
  FLASHREF_REQUIRE_GPU();
  const std::unique_ptr<Backend> b = make_backend("cuda");
  DeviceProblem dp(b->device_runtime(), make_problem(1, 2, 2, 20, 20, 64, Mask::none, DType::f16));
  {
    ForwardParams f = dp.fwd;
    f.q.data = static_cast<char*>(f.q.data) + 2;  // 2-byte aligned only
    f.q.seq = 19;
    f.q.seq_stride = f.q.seq_stride;
    f.problem.S_q = 19;
    f.o.seq = 19;
    const std::string why = thrown_message<Unsupported>([&] { b->forward(f); });
    EXPECT_THAT(why, HasSubstr("params.q"));
    EXPECT_THAT(why, HasSubstr("16-byte"));
  }
  {
    BackwardParams g = dp.bwd;
    g.dO.seq_stride = 2 * 64 + 4;  // rows not 16-byte multiples apart
    g.dO.batch_stride = 20 * g.dO.seq_stride;
    g.dO.seq = 19;
    g.problem.S_q = 19;
    g.q.seq = g.o.seq = g.dq.seq = 19;
    EXPECT_THAT(thrown_message<Unsupported>([&] { b->backward(g); }), HasSubstr("params.dO"));
  }
  EXPECT_TRUE(dp.outputs_untouched());
}

TEST(CudaBackend, SupportsExplainsHeadDimsItCannotLoad) {
  FLASHREF_REQUIRE_GPU();
  const std::unique_ptr<Backend> b = make_backend("cuda");
  const Support s = b->supports(make_problem(1, 1, 1, 10, 10, 59, Mask::none, DType::bf16));
  EXPECT_FALSE(s.ok);
  EXPECT_THAT(s.reason, HasSubstr("59"));
  EXPECT_TRUE(b->supports(make_problem(1, 1, 1, 10, 10, 8, Mask::none, DType::bf16)).ok);
  EXPECT_TRUE(b->supports(make_problem(1, 1, 1, 10, 10, 12, Mask::none, DType::f32)).ok);
  EXPECT_TRUE(b->supports(make_problem(1, 1, 1, 10, 10, 256, Mask::none, DType::f16)).ok);
}

// plan() names the family that runs a problem and why (family.cpp's family_choice): d = 256 runs
// its forward on the wgmma kernels and its backward on mma.sync on a Hopper GPU, and on the
// mma.sync kernels elsewhere, whose reason names the arch. Without a GPU there is no choice to
// explain.
TEST(CudaBackend, PlanNamesTheFamilyAndWhy) {
  const std::unique_ptr<Backend> b = make_backend("cuda");
  const Problem d256 = make_problem(1, 1, 1, 10, 10, 256, Mask::none, DType::bf16);
  if (!cuda_test::gpu_support().ok) {
    EXPECT_EQ(b->plan(d256, {}), "");
    return;
  }
  const std::string plan = b->plan(d256, {});
  if (plan.rfind("sm90: ", 0) == 0) {
    EXPECT_THAT(plan, HasSubstr("the backward on mma.sync"));
  } else {
    EXPECT_EQ(plan.rfind("sm80: ", 0), 0u) << plan;
    EXPECT_THAT(plan, HasSubstr("compute capability"));
  }
  ExecutionOptions tf32;
  tf32.allow_tf32 = true;
  EXPECT_EQ(b->plan(make_problem(1, 1, 1, 10, 10, 64, Mask::none, DType::f32), tf32)
                .rfind("sm80_tf32: ", 0),
            0u);
}

TEST(CudaRuntime, MovesBytesAndTimesLaunches) {
  FLASHREF_REQUIRE_GPU();
  const std::unique_ptr<Backend> b = make_backend("cuda");
  const DeviceRuntime* rt = b->device_runtime();
  std::vector<unsigned char> in(1000), out(1000, 0);
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<unsigned char>(i * 7 + 1);
  void* d = rt->allocate(in.size());
  rt->to_device(d, in.data(), in.size());
  rt->to_host(out.data(), d, out.size());
  EXPECT_EQ(in, out);
  rt->fill_bytes(d, 0x33, 10);
  rt->to_host(out.data(), d, 10);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(out[i], 0x33);
  EXPECT_EQ(out[10], in[10]);
  int launches = 0;
  const std::vector<double> t = rt->time_ms(
      [&] {
        ++launches;
        rt->fill_bytes(d, 0x11, in.size());
      },
      2, 5, true);
  EXPECT_EQ(launches, 7);
  ASSERT_EQ(t.size(), 5u);
  for (double ms : t) EXPECT_GE(ms, 0.0);
  EXPECT_GT(rt->bytes_in_use(), 0u);
  EXPECT_FALSE(rt->device_name().empty());
  rt->release(d);
}

}  // namespace
}  // namespace flashref

// The runner on fake backends: what a backend writes comes back exactly, in either layout and
// through a (fake) device runtime; what it does not write comes back as NaN; a backward run
// from a given O and L gets exactly those.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>

#include "flashref/error.hpp"
#include "flashref/verify/runner.hpp"
#include "flashref/verify/stats.hpp"

namespace flashref::verify {
namespace {

// Host memory posing as a device: tracks every allocation and copy, so a test can see that
// the runner moved the data through it and released everything.
class FakeDevice : public DeviceRuntime {
 public:
  void* allocate(std::size_t bytes) const override {
    void* p = ::operator new(bytes);
    live_[p] = bytes;
    return p;
  }
  void release(void* p) const override {
    live_.erase(p);
    ::operator delete(p);
  }
  void to_device(void* dst, const void* src, std::size_t bytes) const override {
    ++uploads_;
    std::memcpy(dst, src, bytes);
  }
  void to_host(void* dst, const void* src, std::size_t bytes) const override {
    ++downloads_;
    std::memcpy(dst, src, bytes);
  }
  void fill_bytes(void* dst, unsigned char value, std::size_t bytes) const override {
    fills_.push_back(value);
    std::memset(dst, value, bytes);
  }
  void synchronize() const override {}
  std::vector<double> time_ms(const std::function<void()>& launch, int warmup, int reps,
                              bool) const override {
    for (int i = 0; i < warmup + reps; ++i) launch();
    return std::vector<double>(static_cast<std::size_t>(reps), 1.0);
  }
  std::size_t bytes_in_use() const override {
    std::size_t n = 0;
    for (const auto& [p, b] : live_) n += b;
    return n;
  }
  std::string device_name() const override { return "fake device"; }

  bool owns(const void* p) const { return live_.count(const_cast<void*>(p)) > 0; }
  mutable std::map<void*, std::size_t> live_;
  mutable int uploads_ = 0, downloads_ = 0;
  mutable std::vector<unsigned char> fills_;
};

// Writes O = 2 Q + V(row min(s, S_k - 1)) and L = Q[..., 0] + s, and in backward dQ = O (its
// own O, as handed back), dK = K, dV = V. Can leave the last query row unwritten.
class FakeBackend : public Backend {
 public:
  std::string name() const override { return "fake"; }
  MemorySpace memory_space() const override {
    return device_ ? MemorySpace::device : MemorySpace::host;
  }
  const DeviceRuntime* device_runtime() const override { return device_; }
  Support supports(const Problem&) const override { return {}; }

  void forward(const ForwardParams& p) const override {
    validate(p);
    seen_forward = p;
    if (device_) {
      EXPECT_TRUE(device_->owns(p.q.data));
      EXPECT_TRUE(device_->owns(p.o.data));
      EXPECT_TRUE(device_->owns(p.lse));
    }
    const Problem& pr = p.problem;
    const std::int64_t rows = skip_last_row ? pr.S_q - 1 : pr.S_q;
    for (std::int64_t b = 0; b < pr.B; ++b)
      for (std::int64_t h = 0; h < pr.H; ++h)
        for (std::int64_t s = 0; s < rows; ++s) {
          const std::int64_t key = std::min(s, pr.S_k - 1);
          for (std::int64_t i = 0; i < pr.d; ++i) {
            p.o.store(b, s, h, i,
                      2.0f * p.q.load(b, s, h, i) + p.v.load(b, key, h / pr.group_size(), i));
          }
          p.lse[(b * pr.H + h) * pr.S_q + s] = p.q.load(b, s, h, 0) + static_cast<float>(s);
        }
  }

  void backward(const BackwardParams& p) const override {
    validate(p);
    seen_backward = p;
    const Problem& pr = p.problem;
    for (std::int64_t b = 0; b < pr.B; ++b) {
      for (std::int64_t h = 0; h < pr.H; ++h)
        for (std::int64_t s = 0; s < pr.S_q; ++s)
          for (std::int64_t i = 0; i < pr.d; ++i) p.dq.store(b, s, h, i, p.o.load(b, s, h, i));
      for (std::int64_t h = 0; h < pr.H_kv; ++h)
        for (std::int64_t s = 0; s < pr.S_k; ++s)
          for (std::int64_t i = 0; i < pr.d; ++i) {
            p.dk.store(b, s, h, i, p.k.load(b, s, h, i));
            p.dv.store(b, s, h, i, p.v.load(b, s, h, i));
          }
    }
  }

  const FakeDevice* device_ = nullptr;
  bool skip_last_row = false;
  mutable ForwardParams seen_forward;
  mutable BackwardParams seen_backward;
};

Problem small_problem() {
  return make_problem(2, 4, 2, 5, 3, 6, Mask::none, DType::bf16);
}

// What FakeBackend's forward computes, from the inputs, in double (canonical layout).
xt::xtensor<double, 4> expected_o(const ProblemData& data) {
  const Problem& p = data.problem;
  const auto q = data.q.to_double(), v = data.v.to_double();
  auto o = q;
  for (std::int64_t b = 0; b < p.B; ++b)
    for (std::int64_t h = 0; h < p.H; ++h)
      for (std::int64_t s = 0; s < p.S_q; ++s)
        for (std::int64_t i = 0; i < p.d; ++i) {
          const float exact =
              2.0f * static_cast<float>(q(b, h, s, i)) +
              static_cast<float>(v(b, h / p.group_size(), std::min(s, p.S_k - 1), i));
          o(b, h, s, i) = round_to(p.dtype, exact);
        }
  return o;
}

TEST(Runner, HostOutputsComeBackExactlyInEitherLayout) {
  const ProblemData data = make_problem_data(small_problem(), {});
  FakeBackend fake;
  RunOptions bshd;
  bshd.layout = Layout::bshd;
  RunOptions bhsd = bshd;
  bhsd.layout = Layout::bhsd;
  const RunOutputs a = run_backend(fake, data, bshd);
  EXPECT_EQ(fake.seen_forward.q.head_stride, data.problem.d);  // (B, S, H, d)
  EXPECT_EQ(fake.seen_forward.o.seq_stride, data.problem.H * data.problem.d);
  const RunOutputs b = run_backend(fake, data, bhsd);
  EXPECT_EQ(fake.seen_forward.q.seq_stride, data.problem.d);  // (B, H, S, d)
  EXPECT_EQ(fake.seen_forward.o.head_stride, data.problem.S_q * data.problem.d);

  EXPECT_EQ(a.values.at(TensorId::O), expected_o(data));
  EXPECT_EQ(b.values.at(TensorId::O), a.values.at(TensorId::O));
  EXPECT_EQ(b.values.at(TensorId::L), a.values.at(TensorId::L));
  EXPECT_EQ(a.o.layout(), Layout::bshd);
  EXPECT_EQ(b.o.layout(), Layout::bhsd);
  const auto q = data.q.to_double();
  EXPECT_EQ(a.values.at(TensorId::L)(1, 3, 4),
            static_cast<double>(static_cast<float>(q(1, 3, 4, 0)) + 4.0f));
  EXPECT_EQ(a.lse(1, 3, 4), static_cast<float>(a.values.at(TensorId::L)(1, 3, 4)));
  EXPECT_FALSE(a.has_backward());
  EXPECT_TRUE(a.dq.empty());
}

TEST(Runner, BackwardGetsTheBackendsOwnOAndL) {
  const ProblemData data = make_problem_data(small_problem(), {});
  FakeBackend fake;
  RunOptions opt;
  opt.backward = true;
  const RunOutputs out = run_backend(fake, data, opt);
  ASSERT_TRUE(out.has_backward());
  EXPECT_EQ(fake.seen_backward.o.data, fake.seen_forward.o.data);
  EXPECT_EQ(fake.seen_backward.lse, fake.seen_forward.lse);
  EXPECT_EQ(out.values.at(TensorId::dQ), out.values.at(TensorId::O));
  EXPECT_EQ(out.values.at(TensorId::dK), data.k.to_double());
  EXPECT_EQ(out.values.at(TensorId::dV), data.v.to_double());
  EXPECT_EQ(out.values.at(TensorId::dK).shape(1), 2u);  // H_kv heads
}

// L values that no forward would write, so the test sees they are the ones handed over.
xt::xtensor<float, 3> given_lse(const Problem& p) {
  xt::xtensor<float, 3> lse(std::array{static_cast<std::size_t>(p.B), static_cast<std::size_t>(p.H),
                                       static_cast<std::size_t>(p.S_q)});
  for (std::size_t e = 0; e < lse.size(); ++e) lse.flat(e) = 0.25f * static_cast<float>(e) - 3.0f;
  return lse;
}

TEST(Runner, BackwardFromAGivenOAndLHandsExactlyThoseToTheBackend) {
  const ProblemData data = make_problem_data(small_problem(), {});
  // Any tensor of O's dtype and shape will do as "the candidate's O": Q has both.
  const HostTensor o = data.q.with_layout(Layout::bhsd);
  const xt::xtensor<float, 3> lse = given_lse(data.problem);
  FakeBackend fake;
  RunOptions opt;
  opt.layout = Layout::bshd;  // O arrives in bhsd and is copied into the run's layout
  const RunOutputs out = run_backward_from(fake, data, opt, o, lse);
  ASSERT_TRUE(out.has_backward());
  EXPECT_EQ(out.values.at(TensorId::dQ),
            data.q.to_double());  // the fake's dQ is the O it was handed
  EXPECT_EQ(out.values.at(TensorId::dK), data.k.to_double());
  EXPECT_EQ(out.values.at(TensorId::dV), data.v.to_double());
  EXPECT_EQ(out.values.at(TensorId::O), data.q.to_double());
  EXPECT_EQ(out.values.at(TensorId::L), xt::cast<double>(lse));
  EXPECT_EQ(fake.seen_backward.o.head_stride, data.problem.d);  // (B, S, H, d)
  for (std::size_t e = 0; e < lse.size(); ++e) EXPECT_EQ(fake.seen_backward.lse[e], lse.flat(e));
}

TEST(Runner, BackwardFromAGivenOAndLGoesThroughTheDevice) {
  const ProblemData data = make_problem_data(small_problem(), {});
  const xt::xtensor<float, 3> lse = given_lse(data.problem);
  FakeDevice device;
  FakeBackend fake;
  fake.device_ = &device;
  const RunOutputs out = run_backward_from(fake, data, {}, data.q, lse);
  EXPECT_EQ(out.values.at(TensorId::dQ), data.q.to_double());
  EXPECT_EQ(device.uploads_, 6);    // Q, K, V, O, L, dO
  EXPECT_EQ(device.downloads_, 3);  // dQ, dK, dV
  EXPECT_EQ(device.fills_.size(), 3u);
  EXPECT_TRUE(device.live_.empty());
}

TEST(Runner, BackwardFromAnOOrLOfTheWrongShapeIsRejected) {
  const ProblemData data = make_problem_data(small_problem(), {});
  FakeBackend fake;
  const auto field_of = [&](const HostTensor& o, const xt::xtensor<float, 3>& lse) {
    try {
      run_backward_from(fake, data, {}, o, lse);
    } catch (const InvalidArgument& e) {
      return e.field();
    }
    return std::string("no error");
  };
  EXPECT_EQ(field_of(data.k, given_lse(data.problem)), "o");  // (B, H_kv, S_k, d)
  HostTensor f32(DType::f32, Layout::bshd, 2, 4, 5, 6);
  EXPECT_EQ(field_of(f32, given_lse(data.problem)), "o");  // the problem is bf16
  Problem fewer = data.problem;
  fewer.S_q = 4;
  EXPECT_EQ(field_of(data.q, given_lse(fewer)), "lse");
}

TEST(Runner, UnwrittenElementsAreNaNAndFailTheStatistics) {
  const ProblemData data = make_problem_data(small_problem(), {});
  FakeBackend fake;
  fake.skip_last_row = true;
  const RunOutputs out = run_backend(fake, data, {});
  const std::int64_t last = data.problem.S_q - 1;
  for (std::int64_t i = 0; i < data.problem.d; ++i)
    EXPECT_TRUE(std::isnan(out.values.at(TensorId::O)(1, 2, last, i)));
  EXPECT_TRUE(std::isnan(out.values.at(TensorId::L)(0, 0, last)));
  EXPECT_FALSE(std::isnan(out.values.at(TensorId::O)(1, 2, last - 1, 0)));
  const ErrorStats s = compute_stats(TensorId::O, out.values.at(TensorId::O), expected_o(data), 2);
  EXPECT_EQ(s.nan, data.problem.B * data.problem.H * data.problem.d);  // one row per (b, h)
  EXPECT_EQ(s.worst.s, last);
  EXPECT_EQ(s.max_abs, 0.0);  // every written element is right
}

TEST(Runner, DeviceBackendsGetDeviceCopiesAndEverythingIsReleased) {
  const ProblemData data = make_problem_data(small_problem(), {});
  FakeBackend host_fake;
  RunOptions opt;
  opt.backward = true;
  opt.layout = Layout::bhsd;
  const RunOutputs host = run_backend(host_fake, data, opt);

  FakeDevice device;
  FakeBackend device_fake;
  device_fake.device_ = &device;
  const RunOutputs dev = run_backend(device_fake, data, opt);
  EXPECT_EQ(dev.values.at(TensorId::O), host.values.at(TensorId::O));
  EXPECT_EQ(dev.values.at(TensorId::L), host.values.at(TensorId::L));
  EXPECT_EQ(dev.values.at(TensorId::dQ), host.values.at(TensorId::dQ));
  EXPECT_EQ(dev.values.at(TensorId::dK), host.values.at(TensorId::dK));
  EXPECT_EQ(dev.values.at(TensorId::dV), host.values.at(TensorId::dV));
  EXPECT_EQ(device.uploads_, 4);        // Q, K, V, dO
  EXPECT_EQ(device.downloads_, 5);      // O, L, dQ, dK, dV
  ASSERT_EQ(device.fills_.size(), 5u);  // every output poisoned on the device
  for (unsigned char f : device.fills_) EXPECT_EQ(f, kPoisonByte);
  EXPECT_TRUE(device.live_.empty());
}

TEST(Runner, UnwrittenDeviceOutputsComeBackAsNaN) {
  const ProblemData data = make_problem_data(small_problem(), {});
  FakeDevice device;
  FakeBackend fake;
  fake.device_ = &device;
  fake.skip_last_row = true;
  const RunOutputs out = run_backend(fake, data, {});
  EXPECT_TRUE(std::isnan(out.values.at(TensorId::O)(0, 0, data.problem.S_q - 1, 0)));
  EXPECT_TRUE(std::isnan(out.values.at(TensorId::L)(1, 1, data.problem.S_q - 1)));
}

TEST(Runner, ADeviceBackendWithoutARuntimeIsAnError) {
  class NoRuntime : public FakeBackend {
    MemorySpace memory_space() const override { return MemorySpace::device; }
  } broken;
  const ProblemData data = make_problem_data(small_problem(), {});
  EXPECT_THROW(run_backend(broken, data, {}), std::runtime_error);
}

TEST(Runner, AnInvalidProblemIsRejectedBeforeAnythingRuns) {
  ProblemData data = make_problem_data(small_problem(), {});
  data.problem.H_kv = 3;
  FakeBackend fake;
  try {
    run_backend(fake, data, {});
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.field(), "problem.H_kv");
  }
}

}  // namespace
}  // namespace flashref::verify

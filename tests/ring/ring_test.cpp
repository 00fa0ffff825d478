// Ring attention through the in-process transport: R = 1..4 ranks judged against the gold of
// the whole problem under the library's rule (causal and not, forward and backward), the same
// bits on every run for a fixed R, zigzag's shards and balance, and failures that reach the
// caller instead of hanging the other ranks.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <array>
#include <atomic>
#include <cstring>
#include <functional>
#include <memory>
#include <set>
#include <stdexcept>
#include <thread>

#include "flashref/error.hpp"
#include "flashref/ring/in_process_transport.hpp"
#include "flashref/ring/ring_backend.hpp"
#include "flashref/ring/zigzag.hpp"
#include "flashref/verify/report.hpp"
#include "flashref/verify/verification.hpp"
#include "property_support.hpp"

namespace flashref::ring {
namespace {

using verify::VerifyCase;

VerifyCase gen_ring_case() {
  verify::CaseBounds bounds;
  bounds.max_work = std::int64_t{1} << 20;
  return *verify::gen_case(bounds);
}

RC_GTEST_PROP(Ring, RanksOneToFourPassTheRuleAgainstTheGold, ()) {
  const VerifyCase c = gen_ring_case();
  verify::testing::classify(c);
  const int ranks = *rc::gen::inRange(1, 5);
  RC_TAG(ranks);
  const bool on_cpu = *rc::gen::arbitrary<bool>();
  const auto ring = make_ring_backend(make_backend(on_cpu ? "cpu" : "reference"), ranks);
  const verify::VerifyReport report = verify::verify_backends(c, {ring.get()});
  if (!report.passed()) RC_FAIL(verify::format_table(report));
}

bool same_bits(const verify::HostTensor& a, const verify::HostTensor& b) {
  return a.bytes() == b.bytes() && std::memcmp(a.data(), b.data(), a.bytes()) == 0;
}

// Each rank's sums run in ring order, whatever order the threads run in.
RC_GTEST_PROP(Ring, FixedRankCountGivesIdenticalBits, ()) {
  const VerifyCase c = gen_ring_case();
  const int ranks = *rc::gen::inRange(2, 5);
  const auto ring = make_ring_backend(make_backend("cpu"), ranks);
  const verify::ProblemData data = verify::make_problem_data(c.problem, verify::input_options(c));
  verify::RunOptions run;
  run.exec = verify::exec_options(c);
  run.layout = c.layout;
  run.backward = true;
  const verify::RunOutputs a = verify::run_backend(*ring, data, run);
  const verify::RunOutputs b = verify::run_backend(*ring, data, run);
  RC_ASSERT(same_bits(a.o, b.o));
  RC_ASSERT(std::memcmp(a.lse.data(), b.lse.data(), a.lse.size() * sizeof(float)) == 0);
  RC_ASSERT(same_bits(a.dq, b.dq));
  RC_ASSERT(same_bits(a.dk, b.dk));
  RC_ASSERT(same_bits(a.dv, b.dv));
}

RC_GTEST_PROP(Zigzag, ChunksTileTheSequenceAndRanksHoldTwoEach, ()) {
  const std::int64_t S = *rc::gen::inRange<std::int64_t>(1, 300);
  const int R = *rc::gen::inRange(1, 9);
  const Zigzag z(S, R);
  RC_ASSERT(z.chunk_begin(0) == 0);
  RC_ASSERT(z.chunk_end(z.chunk_count() - 1) == S);
  std::set<int> held;
  std::int64_t total = 0;
  for (int c = 0; c < z.chunk_count(); ++c) {
    RC_ASSERT(z.chunk_end(c) >= z.chunk_begin(c));
    RC_ASSERT(z.chunk_length(c) == S / (2 * R) || z.chunk_length(c) == S / (2 * R) + 1);
  }
  for (int r = 0; r < R; ++r) {
    for (int c : z.chunks_of(r)) held.insert(c);
    total += z.length_of(r);
  }
  RC_ASSERT(static_cast<int>(held.size()) == 2 * R);
  RC_ASSERT(total == S);
}

// Under a causal mask (S_q = S_k = S, a multiple of 2R) every rank attends the same number of
// (query, key) pairs: the point of zigzag.
TEST(Zigzag, CausalWorkIsTheSameOnEveryRank) {
  for (int R = 1; R <= 8; ++R) {
    const std::int64_t S = 2 * R * 5;
    const Zigzag z(S, R);
    const Problem p = make_problem(1, 1, 1, S, S, 8, Mask::causal_top_left);
    std::set<std::int64_t> work;
    for (int r = 0; r < R; ++r) {
      std::int64_t pairs = 0;
      for (int c : z.chunks_of(r))
        for (std::int64_t q = z.chunk_begin(c); q < z.chunk_end(c); ++q)
          pairs += p.last_visible_key(q) + 1;
      work.insert(pairs);
    }
    EXPECT_EQ(work.size(), 1u) << "R = " << R;
  }
}

// A backend that fails on the calls of one rank's queries: the ring must rethrow its error,
// with every other rank released from its wait.
class FailsOnRows final : public Backend {
 public:
  std::string name() const override { return "fails"; }
  Support supports(const Problem&) const override { return {}; }
  void forward(const ForwardParams& p) const override {
    if (p.problem.placement.q_offset == 0) throw std::runtime_error("planted failure");
    const auto inner = make_backend("reference");
    inner->forward(p);
  }
  void backward(const BackwardParams&) const override {
    throw std::runtime_error("planted failure");
  }
};

// A backend with more than one way to run a problem: its plan says which, from the options.
class Planned final : public Backend {
 public:
  std::string name() const override { return "planned"; }
  Support supports(const Problem&) const override { return {}; }
  std::string plan(const Problem& p, const ExecutionOptions& o) const override {
    return "kernel " + std::to_string(p.d) + (o.allow_tf32 ? " on tf32" : "");
  }
  void forward(const ForwardParams&) const override {}
  void backward(const BackwardParams&) const override {}
};

// The ring's ranks run their blocks on the inner backend: its plan is the inner's, said per
// rank; a backend with one way (the cpu) has none.
TEST(Ring, PlanIsTheInnerBackendsForEachRank) {
  const Problem p = make_problem(1, 2, 1, 24, 24, 8, Mask::causal_top_left);
  ExecutionOptions tf32;
  tf32.allow_tf32 = true;
  EXPECT_EQ(make_ring_backend(std::make_shared<Planned>(), 3)->plan(p, tf32),
            "each rank on planned: kernel 8 on tf32");
  EXPECT_EQ(make_ring_backend(make_backend("cpu"), 2)->plan(p, {}), "");
}

TEST(Ring, FailureOnOneRankReachesTheCallerWithoutHanging) {
  const auto ring = make_ring_backend(std::make_shared<FailsOnRows>(), 3);
  const VerifyCase c = [] {
    VerifyCase v = verify::default_case();
    v.problem = make_problem(1, 2, 1, 24, 24, 8, Mask::causal_top_left);
    v.backward = false;
    return v;
  }();
  const verify::VerifyReport report = verify::verify_backends(c, {ring.get()});
  ASSERT_EQ(report.backends.size(), 1u);
  EXPECT_FALSE(report.passed());
  EXPECT_NE(report.backends[0].error.find("planted failure"), std::string::npos)
      << report.backends[0].error;
}

TEST(Ring, RefusesDeviceBackendsPlacedProblemsAndBadRankCounts) {
  EXPECT_THROW(make_ring_backend(make_backend("cpu"), 0), InvalidArgument);
  EXPECT_THROW(make_ring_backend(nullptr, 2), InvalidArgument);
  const auto ring = make_ring_backend(make_backend("cpu"), 2);
  Problem placed = make_problem(1, 1, 1, 4, 4, 8);
  placed.placement = Placement{2, 0, 6, 4};
  EXPECT_FALSE(ring->supports(placed).ok);
  EXPECT_EQ(ring->name(), "ring2(cpu)");
}

TEST(InProcessTransport, MessagesArriveInOrderAndSizesMustAgree) {
  InProcessHub hub(2);
  int a = 1, b = 2, got0 = 0, got1 = 0;
  std::thread other([&] {
    Transport& t = hub.rank(1);
    t.start_exchange(&b, sizeof b, 0, &got1, sizeof got1, 0);
    t.wait();
  });
  Transport& t = hub.rank(0);
  t.start_exchange(&a, sizeof a, 1, &got0, sizeof got0, 1);
  t.wait();
  other.join();
  EXPECT_EQ(got0, 2);
  EXPECT_EQ(got1, 1);
  // A receive of another size than the send is an error, not a silent truncation.
  double big = 0;
  hub.rank(0).start_exchange(&a, sizeof a, 0, &big, sizeof big, 0);
  EXPECT_THROW(hub.rank(0).wait(), std::runtime_error);
}

TEST(InProcessTransport, AbortReleasesAWaitingRank) {
  InProcessHub hub(2);
  int x = 0, y = 0;
  std::thread waiter([&] {
    hub.rank(0).start_exchange(&x, sizeof x, 1, &y, sizeof y, 1);
    EXPECT_THROW(hub.rank(0).wait(), std::runtime_error);
  });
  hub.abort();
  waiter.join();
}

// The hub's copies are its store's: a store that keeps each message reversed and delivers it
// reversed back sees every message once each way, and the bytes arrive as sent.
class ReversingStore final : public MessageStore {
 public:
  std::shared_ptr<void> keep(const void* data, std::size_t bytes) const override {
    std::shared_ptr<std::byte[]> copy(new std::byte[bytes > 0 ? bytes : 1]);
    const auto* in = static_cast<const std::byte*>(data);
    for (std::size_t i = 0; i < bytes; ++i) copy[i] = in[bytes - 1 - i];
    ++kept;
    return copy;
  }
  void deliver(void* dst, const void* kept_bytes, std::size_t bytes) const override {
    const auto* in = static_cast<const std::byte*>(kept_bytes);
    auto* out = static_cast<std::byte*>(dst);
    for (std::size_t i = 0; i < bytes; ++i) out[i] = in[bytes - 1 - i];
    ++delivered;
  }
  mutable std::atomic<int> kept{0}, delivered{0};
};

TEST(InProcessTransport, EveryMessageGoesThroughTheHubsStore) {
  const auto store = std::make_shared<ReversingStore>();
  InProcessHub hub(2, store);
  const std::array<int, 3> a{1, 2, 3}, b{4, 5, 6};
  std::array<int, 3> got0{}, got1{};
  std::thread other([&] {
    hub.rank(1).start_exchange(b.data(), sizeof b, 0, got1.data(), sizeof got1, 0);
    hub.rank(1).wait();
  });
  hub.rank(0).start_exchange(a.data(), sizeof a, 1, got0.data(), sizeof got0, 1);
  hub.rank(0).wait();
  other.join();
  EXPECT_EQ(got0, b);
  EXPECT_EQ(got1, a);
  EXPECT_EQ(store->kept.load(), 2);
  EXPECT_EQ(store->delivered.load(), 2);
  EXPECT_THROW(InProcessHub(2, nullptr), InvalidArgument);
}

#ifndef FLASHREF_HAVE_CUDA
// A device backend (here a stand-in) needs the ring's device side, which a build without CUDA
// lacks: the ring says so instead of touching device pointers as host memory.
class StandInRuntime final : public DeviceRuntime {
 public:
  void* allocate(std::size_t) const override { return nullptr; }
  void release(void*) const override {}
  void to_device(void*, const void*, std::size_t) const override {}
  void to_host(void*, const void*, std::size_t) const override {}
  void fill_bytes(void*, unsigned char, std::size_t) const override {}
  void synchronize() const override {}
  std::vector<double> time_ms(const std::function<void()>&, int, int, bool) const override {
    return {};
  }
  std::size_t bytes_in_use() const override { return 0; }
  std::string device_name() const override { return "stand-in"; }
};
class StandInDeviceBackend final : public Backend {
 public:
  std::string name() const override { return "stand-in"; }
  MemorySpace memory_space() const override { return MemorySpace::device; }
  const DeviceRuntime* device_runtime() const override { return &runtime_; }
  Support supports(const Problem&) const override { return {}; }
  void forward(const ForwardParams&) const override {}
  void backward(const BackwardParams&) const override {}

 private:
  StandInRuntime runtime_;
};

TEST(Ring, ADeviceBackendWithoutCudaIsUnsupportedNamingWhy) {
  const auto ring = make_ring_backend(std::make_shared<StandInDeviceBackend>(), 2);
  EXPECT_EQ(ring->memory_space(), MemorySpace::device);
  const Problem p = make_problem(1, 1, 1, 8, 8, 8);
  std::vector<float> q(64), o(64), lse(8);
  ForwardParams f;
  f.problem = p;
  f.q = f.k = f.v = bshd_view(q.data(), DType::f32, 1, 8, 1, 8);
  f.o = bshd_view(o.data(), DType::f32, 1, 8, 1, 8);
  f.lse = lse.data();
  try {
    ring->forward(f);
    ADD_FAILURE() << "the ring ran a device backend without CUDA";
  } catch (const Unsupported& e) {
    EXPECT_NE(std::string(e.what()).find("no CUDA"), std::string::npos) << e.what();
  }
}
#endif

}  // namespace
}  // namespace flashref::ring

// Bad input gets InvalidArgument naming the field, before anything is written; supports()
// accepts exactly what validate() accepts.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>

#include "cpu_test_support.hpp"
#include "flashref/cpu/faults.hpp"

namespace flashref::cputest {
namespace {

constexpr unsigned char kSentinel = 0xA5;

struct Fixture {
  Problem p = make_problem(1, 4, 2, 20, 24, 16, Mask::causal_top_left, DType::bf16);
  Inputs in = make_inputs(p, 31);
  ForwardResult fwd = empty_forward(in);
  BackwardResult grads = empty_backward(in);
  Fixture() { fill_sentinel(); }
  void fill_sentinel() {
    std::memset(fwd.o.bytes.data(), kSentinel, fwd.o.bytes.size());
    std::memset(fwd.lse.data(), kSentinel, fwd.lse.size() * sizeof(float));
    for (HostTensor* t : {&grads.dq, &grads.dk, &grads.dv}) {
      std::memset(t->bytes.data(), kSentinel, t->bytes.size());
    }
  }
  bool untouched() const {
    auto clean = [](const unsigned char* b, std::size_t n) {
      for (std::size_t i = 0; i < n; ++i)
        if (b[i] != kSentinel) return false;
      return true;
    };
    return clean(fwd.o.bytes.data(), fwd.o.bytes.size()) &&
           clean(reinterpret_cast<const unsigned char*>(fwd.lse.data()),
                 fwd.lse.size() * sizeof(float)) &&
           clean(grads.dq.bytes.data(), grads.dq.bytes.size()) &&
           clean(grads.dk.bytes.data(), grads.dk.bytes.size()) &&
           clean(grads.dv.bytes.data(), grads.dv.bytes.size());
  }
};

// Runs forward (or backward) with one field broken; expects InvalidArgument naming `field`
// and no byte of any output changed.
void expect_rejected(const std::string& field,
                     const std::function<void(ForwardParams&)>& breaks_forward,
                     const std::function<void(BackwardParams&)>& breaks_backward) {
  const auto cpu = flashref::cpu::make_backend();
  if (breaks_forward) {
    Fixture f;
    ForwardParams fp = forward_params(f.in, f.fwd);
    breaks_forward(fp);
    try {
      cpu->forward(fp);
      ADD_FAILURE() << "forward accepted a bad " << field;
    } catch (const InvalidArgument& e) {
      EXPECT_EQ(e.field(), field);
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
    EXPECT_TRUE(f.untouched()) << "forward wrote output before rejecting " << field;
  }
  if (breaks_backward) {
    Fixture f;
    // A valid L for the backward to read.
    for (float& x : f.fwd.lse) x = 0.0f;
    BackwardParams bp = backward_params(f.in, f.fwd, f.grads);
    breaks_backward(bp);
    try {
      cpu->backward(bp);
      ADD_FAILURE() << "backward accepted a bad " << field;
    } catch (const InvalidArgument& e) {
      EXPECT_EQ(e.field(), field);
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
    std::memset(f.fwd.lse.data(), kSentinel, f.fwd.lse.size() * sizeof(float));
    EXPECT_TRUE(f.untouched()) << "backward wrote output before rejecting " << field;
  }
}

TEST(Validation, EveryBadFieldIsNamedAndNothingIsWritten) {
  expect_rejected(
      "params.q", [](ForwardParams& p) { p.q.data = nullptr; },
      [](BackwardParams& p) { p.q.data = nullptr; });
  expect_rejected(
      "params.k", [](ForwardParams& p) { p.k.seq = 23; }, [](BackwardParams& p) { p.k.seq = 23; });
  expect_rejected(
      "params.v", [](ForwardParams& p) { p.v.dtype = DType::f32; },
      [](BackwardParams& p) { p.v.dtype = DType::f32; });
  expect_rejected(
      "params.o", [](ForwardParams& p) { p.o = p.q; }, [](BackwardParams& p) { p.o.heads = 3; });
  expect_rejected(
      "params.lse", [](ForwardParams& p) { p.lse = nullptr; },
      [](BackwardParams& p) { p.lse = nullptr; });
  expect_rejected("params.dO", nullptr, [](BackwardParams& p) { p.dO.dim = 8; });
  expect_rejected("params.dq", nullptr, [](BackwardParams& p) { p.dq = p.dk; });
  expect_rejected("params.dk", nullptr, [](BackwardParams& p) { p.dk.data = p.k.data; });
  expect_rejected("params.dv", nullptr, [](BackwardParams& p) { p.dv.seq_stride = 0; });
  expect_rejected(
      "problem.H_kv", [](ForwardParams& p) { p.problem.H_kv = 3; },
      [](BackwardParams& p) { p.problem.H_kv = 3; });
  expect_rejected(
      "problem.d", [](ForwardParams& p) { p.problem.d = 300; },
      [](BackwardParams& p) { p.problem.d = 0; });
  expect_rejected(
      "problem.scale",
      [](ForwardParams& p) { p.problem.scale = std::numeric_limits<double>::infinity(); },
      [](BackwardParams& p) { p.problem.scale = std::nan(""); });
  expect_rejected(
      "problem.S_q", [](ForwardParams& p) { p.problem.S_q = 0; },
      [](BackwardParams& p) { p.problem.S_q = -1; });
  expect_rejected(
      "params.options.tile_q/tile_k", [](ForwardParams& p) { p.options.tile_q = -1; },
      [](BackwardParams& p) { p.options.tile_k = -5; });
  expect_rejected(
      "params.options.num_threads", [](ForwardParams& p) { p.options.num_threads = -2; },
      [](BackwardParams& p) { p.options.num_threads = -2; });
}

// Fault bits that name no Fault are refused when the backend is made, before any call.
TEST(Validation, UnknownFaultBitsAreNamedByTheFactory) {
  for (std::uint32_t bits : {1u << 31, 1u << 30}) {
    try {
      flashref::cpu::make_backend({.faults = bits});
      ADD_FAILURE() << "make_backend accepted fault bits " << bits;
    } catch (const InvalidArgument& e) {
      EXPECT_EQ(e.field(), "options.faults");
      EXPECT_NE(std::string(e.what()).find("options.faults"), std::string::npos) << e.what();
    }
  }
  const auto known = static_cast<std::uint32_t>(cpu::Fault::gqa_reduction);
  EXPECT_EQ(flashref::cpu::make_backend({.faults = known})->name(), "cpu");
}

TEST(Validation, SupportsAcceptsWhatValidateAccepts) {
  const auto cpu = flashref::cpu::make_backend();
  EXPECT_EQ(cpu->name(), "cpu");
  EXPECT_EQ(cpu->memory_space(), MemorySpace::host);
  EXPECT_EQ(cpu->device_runtime(), nullptr);
  for (std::int64_t d : {1, 7, 64, 255, 256}) {
    EXPECT_TRUE(cpu->supports(make_problem(1, 2, 1, 1, 1, d)).ok) << "d = " << d;
  }
  const Support bad = cpu->supports(make_problem(1, 3, 2, 4, 4, 16));
  EXPECT_FALSE(bad.ok);
  EXPECT_NE(bad.reason.find("H_kv"), std::string::npos) << bad.reason;
  EXPECT_FALSE(cpu->supports(make_problem(1, 1, 1, 4, 4, 257)).ok);
}

// The largest allowed head dim and tiny tiles run (and agree with the gold elsewhere: see
// the accuracy tests); the registry hands out this backend under "cpu".
TEST(Validation, RegistryMakesTheCpuBackend) {
  const auto b = make_backend("cpu");
  EXPECT_EQ(b->name(), "cpu");
}

}  // namespace
}  // namespace flashref::cputest

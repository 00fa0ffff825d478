// That allow_tf32 really runs the TF32 tensor-core kernels, and how they round:
// - on random inputs the TF32 path's error is TF32-sized (a sizeable part of the TF32
//   baseline's) while the exact path's is orders of magnitude smaller;
// - with one key per query the softmax is exactly 1, so O is V rounded to TF32 and dV is dO
//   rounded to TF32, bit for bit as reference::round_to_tf32 (cvt.rna: ties away from zero)
//   rounds them, on values chosen to be ties;
// - two runs give identical bits (no atomics);
// - a head dim the TF32 kernels are not compiled for is refused, nothing written.
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda_test_support.hpp"
#include "flashref/error.hpp"
#include "flashref/reference/tf32.hpp"
#include "flashref/verify/host_tensor.hpp"
#include "flashref/verify/problem_data.hpp"
#include "flashref/verify/runner.hpp"

namespace flashref {
namespace {

using verify::TensorId;

const verify::TensorReport& tensor(const verify::VerifyReport& r, TensorId id) {
  for (const verify::TensorReport& t : r.backends.at(0).tensors)
    if (t.tensor == id) return t;
  throw std::runtime_error("tensor missing from the report");
}

TEST(CudaTf32Path, ErrorsAreTf32SizedAndTheExactPathIsFarMoreAccurate) {
  FLASHREF_REQUIRE_GPU();
  verify::VerifyCase c;
  c.problem = make_problem(1, 2, 2, 200, 200, 64, Mask::causal_top_left, DType::f32);
  c.seed = 5;
  c.backward = true;
  c.allow_tf32 = true;
  const verify::VerifyReport tf32 = verify::run_verification(c, {"cuda"});
  c.allow_tf32 = false;
  const verify::VerifyReport exact = verify::run_verification(c, {"cuda"});
  ASSERT_TRUE(tf32.passed()) << verify::format_table(tf32);
  ASSERT_TRUE(exact.passed()) << verify::format_table(exact);
  for (TensorId id : {TensorId::O, TensorId::L, TensorId::dQ, TensorId::dK, TensorId::dV}) {
    SCOPED_TRACE(verify::tensor_name(id));
    const verify::TensorReport& t = tensor(tf32, id);
    const verify::TensorReport& e = tensor(exact, id);
    // The premise: TF32 operands cost far more accuracy than float32 ones.
    ASSERT_GT(t.baseline.max_abs, 16.0 * e.baseline.max_abs);
    // The TF32 path's error is of the TF32 baseline's size: the exact kernels run under the
    // allow_tf32 flag would be a small fraction of it.
    EXPECT_GT(t.candidate.max_abs, 0.25 * t.baseline.max_abs);
    // And the exact path stays exact.
    EXPECT_LT(16.0 * e.candidate.max_abs, t.candidate.max_abs);
  }
}

std::uint32_t bits(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

// Values on which round-to-nearest-ties-away, round-to-nearest-even and truncation to TF32
// (10 explicit mantissa bits) disagree: exact ties (the 13 dropped bits 0x1000), just below
// and above a tie, negative ties, and ordinary values.
float crafted(std::int64_t i) {
  const float kTieUp = 1.0f + std::ldexp(1.0f, -11);           // tie: away 1 + 2^-10, even 1
  const float kTieEven = 1.0f + 3.0f * std::ldexp(1.0f, -11);  // tie: away and even agree
  const float kBelow = std::nextafter(kTieUp, 0.0f);           // rounds down
  const float kAbove = std::nextafter(kTieUp, 2.0f);           // rounds up, truncation does not
  const float values[] = {kTieUp,  -kTieUp,    kTieEven,       kBelow,    kAbove,
                          -kAbove, 0.7853981f, -3.1415927e-3f, 1234.5677f};
  return values[i % 9] * (i % 2 == 0 ? 1.0f : 0.5f);
}

TEST(CudaTf32Path, OneKeyGivesOAndDvRoundedToNearestTiesAway) {
  FLASHREF_REQUIRE_GPU();
  // One query and one key per head: P = 1, so O = tf32(V), dV = tf32(dO), dQ = dK = 0. One
  // query head per key/value head, so dV is a single rounded term (a sum of several would
  // also test how the tensor cores round their float32 accumulation).
  const Problem p = make_problem(2, 4, 4, 1, 1, 64, Mask::none, DType::f32);
  verify::InputOptions in;
  in.seed = 9;
  verify::ProblemData data = verify::make_problem_data(p, in);
  for (std::int64_t b = 0; b < p.B; ++b)
    for (std::int64_t h = 0; h < p.H_kv; ++h)
      for (std::int64_t i = 0; i < p.d; ++i) data.v.set(b, h, 0, i, crafted(b * 131 + h * 17 + i));
  for (std::int64_t b = 0; b < p.B; ++b)
    for (std::int64_t h = 0; h < p.H; ++h)
      for (std::int64_t i = 0; i < p.d; ++i)
        data.dO.set(b, h, 0, i, -crafted(b * 71 + h * 29 + i + 3));
  verify::RunOptions run;
  run.backward = true;
  run.exec.allow_tf32 = true;
  const verify::RunOutputs out = verify::run_backend(*make_backend("cuda"), data, run);

  int ties_seen = 0;
  for (std::int64_t b = 0; b < p.B; ++b)
    for (std::int64_t h = 0; h < p.H; ++h)
      for (std::int64_t i = 0; i < p.d; ++i) {
        const float v = data.v.get(b, h, 0, i);
        const float dO = data.dO.get(b, h, 0, i);
        ties_seen += (bits(v) & 0x1fffu) == 0x1000u;
        ASSERT_EQ(bits(out.o.get(b, h, 0, i)), bits(reference::round_to_tf32(v)))
            << "O(" << b << ", " << h << ", 0, " << i << ") from V = " << v;
        ASSERT_EQ(bits(out.dv.get(b, h, 0, i)), bits(reference::round_to_tf32(dO)))
            << "dV(" << b << ", " << h << ", 0, " << i << ") from dO = " << dO;
        ASSERT_EQ(out.dq.get(b, h, 0, i), 0.0f) << "dQ(" << b << ", " << h << ", 0, " << i << ")";
        ASSERT_EQ(out.dk.get(b, h, 0, i), 0.0f) << "dK(" << b << ", " << h << ", 0, " << i << ")";
      }
  EXPECT_GT(ties_seen, 0) << "the crafted V holds no exact tie";
}

bool same_bits(const verify::HostTensor& a, const verify::HostTensor& b) {
  return a.bytes() == b.bytes() && std::memcmp(a.data(), b.data(), a.bytes()) == 0;
}

TEST(CudaTf32Path, TwoRunsGiveIdenticalBits) {
  FLASHREF_REQUIRE_GPU();
  const std::vector<Problem> problems = {
      make_problem(1, 6, 3, 513, 513, 40, Mask::causal_top_left, DType::f32),
      make_problem(1, 4, 4, 700, 333, 128, Mask::causal_bottom_right, DType::f32),
  };
  const std::unique_ptr<Backend> cuda = make_backend("cuda");
  for (const Problem& p : problems) {
    SCOPED_TRACE(describe(p));
    verify::InputOptions in;
    in.seed = 11;
    const verify::ProblemData data = verify::make_problem_data(p, in);
    verify::RunOptions run;
    run.backward = true;
    run.exec.allow_tf32 = true;
    const verify::RunOutputs a = verify::run_backend(*cuda, data, run);
    const verify::RunOutputs b = verify::run_backend(*cuda, data, run);
    EXPECT_TRUE(same_bits(a.o, b.o)) << "O";
    EXPECT_EQ(std::memcmp(a.lse.data(), b.lse.data(), a.lse.size() * sizeof(float)), 0) << "L";
    EXPECT_TRUE(same_bits(a.dq, b.dq)) << "dQ";
    EXPECT_TRUE(same_bits(a.dk, b.dk)) << "dK";
    EXPECT_TRUE(same_bits(a.dv, b.dv)) << "dV";
    EXPECT_TRUE(std::isfinite(a.values.at(TensorId::dQ)(0, 0, p.S_q - 1, 0)));
    EXPECT_TRUE(std::isfinite(a.values.at(TensorId::dK)(0, 0, 0, 0)));
  }
}

// Device buffers for one problem's tensors, outputs poisoned, freed on scope exit.
struct DeviceBuffers {
  const DeviceRuntime& rt;
  std::vector<void*> owned;
  void* make(std::size_t bytes, unsigned char fill) {
    owned.push_back(rt.allocate(bytes));
    rt.fill_bytes(owned.back(), fill, bytes);
    return owned.back();
  }
  std::vector<unsigned char> read(const void* p, std::size_t bytes) const {
    std::vector<unsigned char> host(bytes);
    rt.to_host(host.data(), p, bytes);
    return host;
  }
  ~DeviceBuffers() {
    for (void* p : owned) rt.release(p);
  }
};

bool all_poison(const std::vector<unsigned char>& bytes) {
  for (unsigned char c : bytes)
    if (c != verify::kPoisonByte) return false;
  return true;
}

TEST(CudaTf32Path, HeadDimAbove128IsRefusedAndNothingIsWritten) {
  FLASHREF_REQUIRE_GPU();
  const Problem p = make_problem(1, 1, 1, 20, 20, 256, Mask::none, DType::f32);
  const std::unique_ptr<Backend> cuda = make_backend("cuda");
  DeviceBuffers buf{*cuda->device_runtime(), {}};
  const std::size_t bytes = static_cast<std::size_t>(p.S_q * p.d) * sizeof(float);
  const std::size_t lse_bytes = static_cast<std::size_t>(p.S_q) * sizeof(float);
  auto view = [&](void* data) { return bshd_view(data, DType::f32, 1, p.S_q, 1, p.d); };
  ForwardParams fwd;
  fwd.problem = p;
  fwd.q = view(buf.make(bytes, 0));
  fwd.k = view(buf.make(bytes, 0));
  fwd.v = view(buf.make(bytes, 0));
  fwd.o = view(buf.make(bytes, verify::kPoisonByte));
  fwd.lse = static_cast<float*>(buf.make(lse_bytes, verify::kPoisonByte));
  fwd.options.allow_tf32 = true;
  auto expect_refused = [](const auto& call) {
    try {
      call();
      ADD_FAILURE() << "allow_tf32 with d = 256 ran";
    } catch (const Unsupported& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("allow_tf32"), std::string::npos) << what;
      EXPECT_NE(what.find("d = 256"), std::string::npos) << what;
    }
  };
  expect_refused([&] { cuda->forward(fwd); });
  EXPECT_TRUE(all_poison(buf.read(fwd.o.data, bytes))) << "O was written";
  EXPECT_TRUE(all_poison(buf.read(fwd.lse, lse_bytes))) << "L was written";

  BackwardParams bwd;
  bwd.problem = p;
  bwd.q = fwd.q;
  bwd.k = fwd.k;
  bwd.v = fwd.v;
  bwd.o = view(buf.make(bytes, 0));
  bwd.dO = view(buf.make(bytes, 0));
  bwd.lse = static_cast<float*>(buf.make(lse_bytes, 0));
  bwd.dq = view(buf.make(bytes, verify::kPoisonByte));
  bwd.dk = view(buf.make(bytes, verify::kPoisonByte));
  bwd.dv = view(buf.make(bytes, verify::kPoisonByte));
  bwd.options.allow_tf32 = true;
  expect_refused([&] { cuda->backward(bwd); });
  EXPECT_TRUE(all_poison(buf.read(bwd.dq.data, bytes))) << "dQ was written";
  EXPECT_TRUE(all_poison(buf.read(bwd.dk.data, bytes))) << "dK was written";
  EXPECT_TRUE(all_poison(buf.read(bwd.dv.data, bytes))) << "dV was written";

  // Without allow_tf32 the exact float32 kernels run the same problem.
  fwd.options.allow_tf32 = false;
  cuda->forward(fwd);
  cuda->device_runtime()->synchronize();
  EXPECT_FALSE(all_poison(buf.read(fwd.o.data, bytes)));
}

}  // namespace
}  // namespace flashref

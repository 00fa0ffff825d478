// The ring with its buffers on the device: ring/cuda's kernels against the host functions they
// replace (gathers, scatters, sums and L copies bit for bit; the merge bit for bit in its fully
// masked cases and within one float32 rounding step otherwise, docs/ring.md), the in-process
// transport's device-to-device messages, and ring<R>(cuda), whose ranks keep everything on the
// GPU, judged against the gold (R = 1..4, forward and backward, random awkward problems) and
// giving the same bits twice for a fixed R.
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <rapidcheck.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "cuda_test_support.hpp"
#include "device_ops.hpp"
#include "flashref/merge.hpp"
#include "flashref/ring/in_process_transport.hpp"
#include "flashref/ring/ring_backend.hpp"
#include "flashref/verify/generators.hpp"
#include "flashref/verify/runner.hpp"
#include "shard.hpp"

namespace flashref {
namespace {

// Unless RC_PARAMS is set (a replay), 100 cases per property.
const bool kDefaultCaseCount = [] {
  setenv("RC_PARAMS", "max_success=100", /*overwrite=*/0);
  return true;
}();

void cuda_ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

// A device copy of a host buffer, freed when it goes.
class DeviceBytes {
 public:
  explicit DeviceBytes(const std::vector<std::byte>& host) : bytes_(host.size()) {
    cuda_ok(cudaMalloc(&data_, bytes_ > 0 ? bytes_ : 1), "cudaMalloc");
    if (bytes_ > 0)
      cuda_ok(cudaMemcpy(data_, host.data(), bytes_, cudaMemcpyHostToDevice), "to device");
  }
  ~DeviceBytes() { cudaFree(data_); }
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;
  void* get() const { return data_; }
  std::vector<std::byte> to_host() const {
    cuda_ok(cudaDeviceSynchronize(), "the ops under test");
    std::vector<std::byte> host(bytes_);
    if (bytes_ > 0)
      cuda_ok(cudaMemcpy(host.data(), data_, bytes_, cudaMemcpyDeviceToHost), "to host");
    return host;
  }

 private:
  void* data_ = nullptr;
  std::size_t bytes_;
};

// The bulk values of a case come from a generator seeded by the case, so a failure replays
// and shrinks over the shapes, not over thousands of elements.
std::mt19937 gen_engine() {
  return std::mt19937(*rc::gen::arbitrary<std::uint32_t>());
}

// Random bit patterns: every float, subnormals, infinities and NaN payloads included.
std::vector<std::byte> random_bits(std::size_t bytes, std::mt19937& rng) {
  std::vector<std::byte> b(bytes);
  for (std::size_t i = 0; i < bytes; ++i) b[i] = static_cast<std::byte>(rng() & 0xffu);
  return b;
}

DType gen_dtype() {
  return *rc::gen::element(DType::f32, DType::f16, DType::bf16);
}

struct Shape {
  std::int64_t B, S, H, d;
};
Shape gen_shape() {
  return Shape{*rc::gen::inRange<std::int64_t>(1, 4), *rc::gen::inRange<std::int64_t>(1, 40),
               *rc::gen::inRange<std::int64_t>(1, 5), *rc::gen::inRange<std::int64_t>(1, 24)};
}

// The whole problem's tensor: (B, S, H, d) or (B, H, S, d) in memory (strided rows).
TensorView global_view(void* data, DType t, const Shape& s, bool bhsd) {
  return bhsd ? bhsd_view(data, t, s.B, s.H, s.S, s.d) : bshd_view(data, t, s.B, s.S, s.H, s.d);
}
std::size_t elements(const Shape& s) {
  return static_cast<std::size_t>(s.B * s.S * s.H * s.d);
}

bool same(const std::vector<std::byte>& a, const std::vector<std::byte>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size()) == 0;
}

TEST(RingDeviceOps, GatherAndScatterMatchTheHostBitForBit) {
  FLASHREF_REQUIRE_GPU();
  (void)kDefaultCaseCount;
  const bool ok = rc::check("gather_rows, scatter_rows: the host's bits", [] {
    const Shape g = gen_shape();
    const DType global_t = gen_dtype(), local_t = gen_dtype();
    const bool bhsd = *rc::gen::arbitrary<bool>();
    const std::int64_t begin = *rc::gen::inRange<std::int64_t>(0, g.S);
    const std::int64_t rows = *rc::gen::inRange<std::int64_t>(1, g.S - begin + 1);
    RC_TAG(std::string(dtype_name(global_t)) + "->" + std::string(dtype_name(local_t)));
    const Shape l{g.B, rows, g.H, g.d};
    std::mt19937 rng = gen_engine();

    // Gather: local = global's rows, converted.
    std::vector<std::byte> global = random_bits(elements(g) * dtype_size(global_t), rng);
    std::vector<std::byte> host_local(elements(l) * dtype_size(local_t));
    ring::detail::gather_rows(global_view(global.data(), global_t, g, bhsd), begin,
                              global_view(host_local.data(), local_t, l, false));
    const DeviceBytes d_global(global), d_local(std::vector<std::byte>(host_local.size()));
    ring::device::gather_rows(global_view(d_global.get(), global_t, g, bhsd), begin,
                              global_view(d_local.get(), local_t, l, false), nullptr);
    RC_ASSERT(same(d_local.to_host(), host_local));

    // Scatter: the global's rows = local, rounded; every other byte unchanged.
    const std::vector<std::byte> local = random_bits(elements(l) * dtype_size(local_t), rng);
    const DeviceBytes d_local2(local), d_global2(global);
    ring::detail::scatter_rows(global_view(const_cast<std::byte*>(local.data()), local_t, l, false),
                               global_view(global.data(), global_t, g, bhsd), begin);
    ring::device::scatter_rows(global_view(d_local2.get(), local_t, l, false),
                               global_view(d_global2.get(), global_t, g, bhsd), begin, nullptr);
    RC_ASSERT(same(d_global2.to_host(), global));
  });
  EXPECT_TRUE(ok);
}

// Float32 values that an accumulator and a partial gradient hold: mostly ordinary ones of any
// sign and size, sometimes zero, infinite or NaN.
std::vector<std::byte> gradient_values(std::size_t count, DType t, std::mt19937& rng) {
  std::vector<std::byte> b(count * dtype_size(t));
  std::uniform_int_distribution<int> kinds(0, 19), exponents(-30, 30);
  std::uniform_real_distribution<float> mantissas(-1.0f, 1.0f);
  for (std::size_t i = 0; i < count; ++i) {
    const int kind = kinds(rng);
    float v = std::ldexp(mantissas(rng), exponents(rng));
    if (kind == 0) v = 0.0f;
    if (kind == 1) v = std::numeric_limits<float>::infinity();
    if (kind == 2) v = std::numeric_limits<float>::quiet_NaN();
    store_from_float(b.data(), t, static_cast<std::int64_t>(i), v);
  }
  return b;
}

// Same bits, or both NaN: x86 and the GPU give a NaN sum different payloads (the GPU's is
// canonical), and flashref reads any NaN as NaN.
bool same_floats(const std::vector<std::byte>& a, const std::vector<std::byte>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size() / 4; ++i) {
    float x, y;
    std::memcpy(&x, a.data() + 4 * i, 4);
    std::memcpy(&y, b.data() + 4 * i, 4);
    if (std::memcmp(&x, &y, 4) != 0 && !(std::isnan(x) && std::isnan(y))) return false;
  }
  return true;
}

TEST(RingDeviceOps, AddRowsMatchesTheHostBitForBit) {
  FLASHREF_REQUIRE_GPU();
  const bool ok = rc::check("add_rows: the host's bits", [] {
    const Shape s = gen_shape();
    const DType part_t = gen_dtype();
    // Dense views of float32 take the flat path, the others the strided one.
    const bool acc_bhsd = *rc::gen::arbitrary<bool>(), part_bhsd = *rc::gen::arbitrary<bool>();
    RC_TAG(std::string(dtype_name(part_t)), acc_bhsd || part_bhsd ? "strided" : "dense");
    std::mt19937 rng = gen_engine();
    std::vector<std::byte> acc = gradient_values(elements(s), DType::f32, rng);
    const std::vector<std::byte> part = gradient_values(elements(s), part_t, rng);
    const DeviceBytes d_acc(acc), d_part(part);
    ring::detail::add_rows(global_view(acc.data(), DType::f32, s, acc_bhsd),
                           global_view(const_cast<std::byte*>(part.data()), part_t, s, part_bhsd));
    ring::device::add_rows(global_view(d_acc.get(), DType::f32, s, acc_bhsd),
                           global_view(d_part.get(), part_t, s, part_bhsd), nullptr);
    RC_ASSERT(same_floats(d_acc.to_host(), acc));
  });
  EXPECT_TRUE(ok);
}

TEST(RingDeviceOps, LseGatherAndScatterMatchTheHostBitForBit) {
  FLASHREF_REQUIRE_GPU();
  const bool ok = rc::check("gather_lse, scatter_lse: the host's bits", [] {
    const Shape g = gen_shape();
    const std::int64_t begin = *rc::gen::inRange<std::int64_t>(0, g.S);
    const std::int64_t rows = *rc::gen::inRange<std::int64_t>(1, g.S - begin + 1);
    std::mt19937 rng = gen_engine();
    std::vector<std::byte> global = random_bits(static_cast<std::size_t>(g.B * g.H * g.S) * 4, rng);
    std::vector<std::byte> local(static_cast<std::size_t>(g.B * g.H * rows) * 4);
    const DeviceBytes d_global(global), d_local(local);
    ring::detail::gather_lse(reinterpret_cast<const float*>(global.data()), g.B, g.H, g.S, begin,
                             rows, reinterpret_cast<float*>(local.data()));
    ring::device::gather_lse(static_cast<const float*>(d_global.get()), g.B, g.H, g.S, begin, rows,
                             static_cast<float*>(d_local.get()), nullptr);
    RC_ASSERT(same(d_local.to_host(), local));

    const std::vector<std::byte> back = random_bits(local.size(), rng);
    const DeviceBytes d_back(back);
    ring::detail::scatter_lse(reinterpret_cast<const float*>(back.data()), rows,
                              reinterpret_cast<float*>(global.data()), g.B, g.H, g.S, begin);
    ring::device::scatter_lse(static_cast<const float*>(d_back.get()), rows,
                              static_cast<float*>(d_global.get()), g.B, g.H, g.S, begin, nullptr);
    RC_ASSERT(same(d_global.to_host(), global));
  });
  EXPECT_TRUE(ok);
}

float as_float(const std::vector<std::byte>& b, std::size_t i) {
  float x;
  std::memcpy(&x, b.data() + 4 * i, 4);
  return x;
}

// One float32 rounding step at x's magnitude.
float ulp(float x) {
  const float a = std::fabs(x);
  return std::nextafter(a, std::numeric_limits<float>::infinity()) - a;
}

// A logsumexp of a block: mostly finite, sometimes the fully masked -inf, rarely broken.
float random_lse(std::mt19937& rng) {
  const int kind = std::uniform_int_distribution<int>(0, 23)(rng);
  if (kind < 6) return -std::numeric_limits<float>::infinity();
  if (kind == 6) return std::numeric_limits<float>::quiet_NaN();
  if (kind == 7) return std::numeric_limits<float>::infinity();
  return std::uniform_real_distribution<float>(-40.0f, 40.0f)(rng);
}

// Merges 1..4 blocks into a cleared target, on the host and on the device from the same state
// at every step. Rows whose block or target is fully masked must give the host's bits; the
// others may differ by one float32 rounding step (the double exp and log, device_ops.hpp).
TEST(RingDeviceOps, MergeMatchesTheHostWithinOneRoundingStep) {
  FLASHREF_REQUIRE_GPU();
  const bool ok = rc::check("merge_into: the host's result", [] {
    const Shape s = gen_shape();
    const std::size_t n = elements(s), rows = static_cast<std::size_t>(s.B * s.S * s.H);
    std::mt19937 rng = gen_engine();
    std::vector<std::byte> O(n * 4), L(rows * 4);
    const TensorView O_host = bshd_view(O.data(), DType::f32, s.B, s.S, s.H, s.d);
    clear_merge(MergeTarget{O_host, reinterpret_cast<float*>(L.data())});
    {  // the device's clear gives the same bits
      const DeviceBytes d_O(random_bits(O.size(), rng)), d_L(random_bits(L.size(), rng));
      ring::device::clear_merge(MergeTarget{bshd_view(d_O.get(), DType::f32, s.B, s.S, s.H, s.d),
                                            static_cast<float*>(d_L.get())},
                                nullptr);
      RC_ASSERT(same(d_O.to_host(), O));
      RC_ASSERT(same(d_L.to_host(), L));
    }
    const int blocks = *rc::gen::inRange(1, 5);
    for (int blk = 0; blk < blocks; ++blk) {
      const DType part_t = gen_dtype();
      RC_TAG(std::string(dtype_name(part_t)));
      const std::vector<std::byte> part = gradient_values(n, part_t, rng);
      std::vector<std::byte> L_part(rows * 4);
      for (std::size_t r = 0; r < rows; ++r) {
        const float l = random_lse(rng);
        std::memcpy(L_part.data() + 4 * r, &l, 4);
      }
      const std::vector<std::byte> L_before = L;
      const DeviceBytes d_O(O), d_L(L), d_part(part), d_L_part(L_part);
      merge_into(MergeTarget{O_host, reinterpret_cast<float*>(L.data())},
                 bshd_view(const_cast<std::byte*>(part.data()), part_t, s.B, s.S, s.H, s.d),
                 reinterpret_cast<const float*>(L_part.data()));
      ring::device::merge_into(MergeTarget{bshd_view(d_O.get(), DType::f32, s.B, s.S, s.H, s.d),
                                           static_cast<float*>(d_L.get())},
                               bshd_view(d_part.get(), part_t, s.B, s.S, s.H, s.d),
                               static_cast<const float*>(d_L_part.get()), nullptr);
      const std::vector<std::byte> dev_O = d_O.to_host(), dev_L = d_L.to_host();
      for (std::int64_t b = 0; b < s.B; ++b)
        for (std::int64_t q = 0; q < s.S; ++q)
          for (std::int64_t h = 0; h < s.H; ++h) {
            const std::size_t li = static_cast<std::size_t>((b * s.H + h) * s.S + q);
            const float l_a = as_float(L_before, li), l_b = as_float(L_part, li);
            const bool exact = (std::isinf(l_a) && l_a < 0) || (std::isinf(l_b) && l_b < 0);
            const auto close = [&](float host, float dev) {
              if (std::memcmp(&host, &dev, 4) == 0) return true;
              if (std::isnan(host) && std::isnan(dev)) return true;
              return !exact && std::fabs(host - dev) <= ulp(host);
            };
            RC_ASSERT(close(as_float(L, li), as_float(dev_L, li)));
            for (std::int64_t i = 0; i < s.d; ++i) {
              const auto e = static_cast<std::size_t>(O_host.offset(b, q, h, i));
              if (!close(as_float(O, e), as_float(dev_O, e))) {
                RC_FAIL("O(" + std::to_string(b) + "," + std::to_string(q) + "," +
                        std::to_string(h) + "," + std::to_string(i) + "): host " +
                        std::to_string(as_float(O, e)) + ", device " +
                        std::to_string(as_float(dev_O, e)) + ", L_a " + std::to_string(l_a) +
                        ", L_b " + std::to_string(l_b));
              }
            }
          }
    }
  });
  EXPECT_TRUE(ok);
}

TEST(RingDeviceTransport, MessagesArriveInOrderBitForBit) {
  FLASHREF_REQUIRE_GPU();
  constexpr int kRanks = 3, kSteps = 4;
  constexpr std::size_t kBytes = 1 << 16;
  ring::InProcessHub hub(kRanks, ring::device_messages());
  std::vector<std::string> errors(kRanks);
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      try {
        ring::Transport& t = hub.rank(r);
        void *send = nullptr, *recv = nullptr;
        cuda_ok(cudaMalloc(&send, kBytes), "cudaMalloc");
        cuda_ok(cudaMalloc(&recv, kBytes), "cudaMalloc");
        const int from = (r + kRanks - 1) % kRanks;
        for (int step = 0; step < kSteps; ++step) {
          // Each message carries its sender and step in every byte.
          cuda_ok(cudaMemset(send, 16 * r + step, kBytes), "cudaMemset");
          cuda_ok(cudaDeviceSynchronize(), "cudaMemset");
          t.start_exchange(send, kBytes, (r + 1) % kRanks, recv, kBytes, from);
          t.wait();
          std::vector<unsigned char> got(kBytes);
          cuda_ok(cudaMemcpy(got.data(), recv, kBytes, cudaMemcpyDeviceToHost), "to host");
          for (unsigned char c : got) {
            if (c != 16 * from + step) {
              errors[static_cast<std::size_t>(r)] =
                  "step " + std::to_string(step) + ": byte " + std::to_string(c);
              break;
            }
          }
        }
        cudaFree(send);
        cudaFree(recv);
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
        hub.abort();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < kRanks; ++r)
    EXPECT_EQ(errors[static_cast<std::size_t>(r)], "") << "rank " << r;
}

TEST(RingDeviceTransport, AReceiveOfTheWrongSizeIsAnErrorNamingBoth) {
  FLASHREF_REQUIRE_GPU();
  ring::InProcessHub hub(1, ring::device_messages());
  void* buf = nullptr;
  ASSERT_EQ(cudaMalloc(&buf, 64), cudaSuccess);
  ring::Transport& t = hub.rank(0);
  t.start_exchange(buf, 64, 0, buf, 32, 0);
  try {
    t.wait();
    ADD_FAILURE() << "a 64-byte message was received into 32 bytes";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("expected 32"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("got 64"), std::string::npos) << e.what();
  }
  cudaFree(buf);
}

TEST(RingDevice, TheRingOfACudaBackendTakesDevicePointers) {
  const std::shared_ptr<const Backend> cuda = make_backend("cuda");
  const auto ring = ring::make_ring_backend(cuda, 2);
  EXPECT_EQ(ring->memory_space(), MemorySpace::device);
  EXPECT_EQ(ring->device_runtime(), cuda->device_runtime());
}

verify::CaseBounds device_bounds() {
  verify::CaseBounds b;
  b.max_seq = 300;  // past the largest tile (128): chunks cut tiles anywhere
  b.max_d = 128;
  b.d_multiple = 8;
  return b;
}

TEST(RingDevice, OneToFourRanksPassTheRuleAgainstTheGold) {
  FLASHREF_REQUIRE_GPU();
  const std::shared_ptr<const Backend> cuda = make_backend("cuda");
  const bool ok = rc::check("ring<R>(cuda), buffers on the device, passes the rule", [&] {
    const verify::VerifyCase c = *verify::gen_case(device_bounds());
    const int ranks = *rc::gen::inRange(1, 5);
    RC_TAG(ranks, std::string(mask_name(c.problem.mask)), std::string(dtype_name(c.problem.dtype)));
    const auto ring = ring::make_ring_backend(cuda, ranks);
    const verify::VerifyReport report = verify::verify_backends(c, {ring.get()});
    if (!report.passed()) RC_FAIL(verify::format_table(report));
  });
  EXPECT_TRUE(ok);
}

bool same_bits(const verify::HostTensor& a, const verify::HostTensor& b) {
  return a.bytes() == b.bytes() && std::memcmp(a.data(), b.data(), a.bytes()) == 0;
}

TEST(RingDevice, FixedRankCountGivesIdenticalBits) {
  FLASHREF_REQUIRE_GPU();
  const std::shared_ptr<const Backend> cuda = make_backend("cuda");
  const bool ok = rc::check("ring<R>(cuda) twice: the same bits", [&] {
    const verify::VerifyCase c = *verify::gen_case(device_bounds());
    const auto ring = ring::make_ring_backend(cuda, *rc::gen::inRange(2, 5));
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
  });
  EXPECT_TRUE(ok);
}

}  // namespace
}  // namespace flashref

// The "reference" backend's contract: the Backend interface, fully masked rows, nothing
// written on invalid input, results independent of layout and thread count, TF32.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "attention_data.hpp"
#include "flashref/error.hpp"
#include "flashref/reference/backend.hpp"
#include "flashref/reference/gold.hpp"

namespace flashref {
namespace {

using test::AttentionData;
using test::Layout;

TEST(ReferenceBackend, Interface) {
  const auto backend = reference::make_backend();
  EXPECT_EQ(backend->name(), "reference");
  EXPECT_EQ(backend->memory_space(), MemorySpace::host);
  EXPECT_EQ(backend->device_runtime(), nullptr);
  for (const Problem& p :
       {make_problem(1, 1, 1, 1, 1, 1), make_problem(2, 8, 1, 5, 700, 256),
        make_problem(1, 6, 3, 9, 2, 59, Mask::causal_bottom_right, DType::bf16)}) {
    EXPECT_TRUE(backend->supports(p).ok) << describe(p);
  }
  Problem bad = make_problem(1, 4, 3, 8, 8, 64);
  const Support s = backend->supports(bad);
  EXPECT_FALSE(s.ok);
  EXPECT_NE(s.reason.find("problem.H_kv"), std::string::npos) << s.reason;
}

// Bottom-right with S_q > S_k: rows that see no key get O = 0 and L = -inf exactly, and zero
// dQ; no output anywhere is NaN. For every dtype.
TEST(ReferenceBackend, FullyMaskedRows) {
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {
    const Problem p = make_problem(2, 4, 2, 9, 4, 24, Mask::causal_bottom_right, t);
    AttentionData data = test::random_data(p, Layout::bshd, 6);
    const auto backend = reference::make_backend();
    backend->forward(data.forward_params());
    backend->backward(data.backward_params());
    const xt::xtensor<double, 4> O = test::to_bhsd(data.o.view), dQ = test::to_bhsd(data.dq.view);
    const xt::xtensor<double, 3> L = test::lse_tensor(data);
    int masked = 0;
    for (std::size_t b = 0; b < 2; ++b) {
      for (std::size_t h = 0; h < 4; ++h) {
        for (std::int64_t i = 0; i < p.S_q; ++i) {
          const auto I = static_cast<std::size_t>(i);
          if (p.last_visible_key(i) >= 0) {
            EXPECT_TRUE(std::isfinite(L(b, h, I)));
            continue;
          }
          ++masked;
          EXPECT_EQ(L(b, h, I), -std::numeric_limits<double>::infinity());
          for (std::size_t c = 0; c < 24; ++c) {
            EXPECT_EQ(O(b, h, I, c), 0.0) << dtype_name(t);
            EXPECT_EQ(dQ(b, h, I, c), 0.0) << dtype_name(t);
          }
        }
      }
    }
    EXPECT_EQ(masked, 2 * 4 * 5);
    for (const auto& t4 : {O, dQ, test::to_bhsd(data.dk.view), test::to_bhsd(data.dv.view)}) {
      for (double x : t4) ASSERT_TRUE(std::isfinite(x)) << dtype_name(t);
    }
  }
}

constexpr unsigned char kPoison = 0xab;

// Invalid input: InvalidArgument, and every output byte is as it was before the call.
TEST(ReferenceBackend, WritesNothingOnInvalidInput) {
  const Problem p = make_problem(2, 4, 2, 10, 12, 16, Mask::causal_top_left, DType::bf16);
  AttentionData data = test::random_data(p, Layout::bshd, 9);
  const auto backend = reference::make_backend();
  auto poison = [&] {
    for (test::HostTensor* t : {&data.o, &data.dq, &data.dk, &data.dv}) t->fill_bytes(kPoison);
    std::fill(reinterpret_cast<unsigned char*>(data.lse.data()),
              reinterpret_cast<unsigned char*>(data.lse.data() + data.lse.size()), kPoison);
  };
  auto intact = [&] {
    for (const test::HostTensor* t : {&data.o, &data.dq, &data.dk, &data.dv}) {
      if (!t->all_bytes_are(kPoison)) return false;
    }
    const auto* l = reinterpret_cast<const unsigned char*>(data.lse.data());
    return std::all_of(l, l + data.lse.size() * sizeof(float),
                       [](unsigned char x) { return x == kPoison; });
  };

  poison();
  ForwardParams f = data.forward_params();
  f.k.seq += 1;  // K's shape no longer matches S_k
  EXPECT_THROW(backend->forward(f), InvalidArgument);
  EXPECT_TRUE(intact());
  f = data.forward_params();
  f.options.tile_q = -1;  // the last check validation makes
  EXPECT_THROW(backend->forward(f), InvalidArgument);
  EXPECT_TRUE(intact());

  BackwardParams b = data.backward_params();
  b.dO.dtype = DType::f16;
  EXPECT_THROW(backend->backward(b), InvalidArgument);
  EXPECT_TRUE(intact());
  b = data.backward_params();
  b.dv.data = b.dk.data;  // gradients aliasing each other
  EXPECT_THROW(backend->backward(b), InvalidArgument);
  EXPECT_TRUE(intact());

  // The same calls with valid params do write.
  backend->forward(data.forward_params());
  backend->backward(data.backward_params());
  EXPECT_FALSE(data.o.all_bytes_are(kPoison));
  EXPECT_FALSE(data.dv.all_bytes_are(kPoison));
}

// Every layout, and padding between rows, gives bit-identical outputs; padding is untouched.
TEST(ReferenceBackend, EveryLayoutGivesIdenticalResults) {
  const Problem p = make_problem(2, 4, 2, 13, 9, 12, Mask::causal_bottom_right, DType::bf16);
  AttentionData base = test::random_data(p, Layout::bshd, 31);
  const auto backend = reference::make_backend();
  backend->forward(base.forward_params());
  backend->backward(base.backward_params());
  for (Layout layout : {Layout::bhsd, Layout::padded}) {
    AttentionData data = test::random_data(p, layout, 31);
    data.o.fill_bytes(kPoison);
    data.dk.fill_bytes(kPoison);
    backend->forward(data.forward_params());
    backend->backward(data.backward_params());
    EXPECT_TRUE(test::identical(test::to_bhsd(data.o.view), test::to_bhsd(base.o.view)));
    EXPECT_TRUE(test::identical(test::lse_tensor(data), test::lse_tensor(base)));
    EXPECT_TRUE(test::identical(test::to_bhsd(data.dq.view), test::to_bhsd(base.dq.view)));
    EXPECT_TRUE(test::identical(test::to_bhsd(data.dk.view), test::to_bhsd(base.dk.view)));
    EXPECT_TRUE(test::identical(test::to_bhsd(data.dv.view), test::to_bhsd(base.dv.view)));
    if (layout == Layout::padded) {
      // Only the logical elements were written: every padding byte still holds the poison.
      const test::HostTensor& o = data.o;
      std::vector<bool> logical(o.storage.size() * sizeof(float), false);
      o.for_each([&](auto b, auto s, auto h, auto c) {
        const auto first =
            static_cast<std::size_t>(o.view.offset(b, s, h, c)) * dtype_size(p.dtype);
        for (std::size_t i = 0; i < dtype_size(p.dtype); ++i) logical[first + i] = true;
      });
      const auto* bytes = reinterpret_cast<const unsigned char*>(o.storage.data());
      for (std::size_t i = 0; i < logical.size(); ++i) {
        if (!logical[i]) {
          ASSERT_EQ(bytes[i], kPoison) << "padding byte " << i << " was written";
        }
      }
    }
  }
  const Problem one_head = make_problem(2, 1, 1, 16, 16, 8, Mask::causal_top_left, DType::f16);
  AttentionData bshd = test::random_data(one_head, Layout::bshd, 2);
  AttentionData bsd = test::random_data(one_head, Layout::bsd, 2);
  for (AttentionData* d : {&bshd, &bsd}) {
    backend->forward(d->forward_params());
    backend->backward(d->backward_params());
  }
  EXPECT_TRUE(test::identical(test::to_bhsd(bsd.o.view), test::to_bhsd(bshd.o.view)));
  EXPECT_TRUE(test::identical(test::to_bhsd(bsd.dq.view), test::to_bhsd(bshd.dq.view)));
}

TEST(ReferenceBackend, ResultsDoNotDependOnTheThreadCount) {
  const Problem p = make_problem(2, 6, 2, 21, 17, 8, Mask::none, DType::f16);
  const auto backend = reference::make_backend();
  AttentionData one = test::random_data(p, Layout::bshd, 12);
  AttentionData four = test::random_data(p, Layout::bshd, 12);
  one.options.num_threads = 1;
  four.options.num_threads = 4;
  for (AttentionData* d : {&one, &four}) {
    backend->forward(d->forward_params());
    backend->backward(d->backward_params());
  }
  EXPECT_TRUE(test::identical(test::to_bhsd(one.o.view), test::to_bhsd(four.o.view)));
  EXPECT_TRUE(test::identical(test::lse_tensor(one), test::lse_tensor(four)));
  EXPECT_TRUE(test::identical(test::to_bhsd(one.dq.view), test::to_bhsd(four.dq.view)));
  EXPECT_TRUE(test::identical(test::to_bhsd(one.dk.view), test::to_bhsd(four.dk.view)));
  EXPECT_TRUE(test::identical(test::to_bhsd(one.dv.view), test::to_bhsd(four.dv.view)));
}

// With allow_tf32, float32 matmuls see 10-bit mantissas: errors grow from float32 rounding
// (~1e-7) to about TF32's unit roundoff 2^-11 ~ 5e-4, within the f16 bound. For 16-bit inputs
// the option changes nothing.
TEST(ReferenceBackend, Tf32ModelsTensorCoreRounding) {
  const Problem p = make_problem(1, 4, 4, 40, 40, 32, Mask::causal_top_left, DType::f32);
  const auto backend = reference::make_backend();
  AttentionData exact = test::random_data(p, Layout::bshd, 44);
  AttentionData tf32 = test::random_data(p, Layout::bshd, 44);
  tf32.options.allow_tf32 = true;
  for (AttentionData* d : {&exact, &tf32}) {
    backend->forward(d->forward_params());
    backend->backward(d->backward_params());
  }
  const reference::GoldForward gold_fwd = reference::gold_forward(exact.forward_params());
  const reference::GoldBackward gold_bwd = reference::gold_backward(exact.backward_params());
  struct Pair {
    const char* name;
    const test::HostTensor& exact;
    const test::HostTensor& tf32;
    const xt::xtensor<double, 4>& gold;
  };
  for (const Pair& t :
       {Pair{"O", exact.o, tf32.o, gold_fwd.O}, Pair{"dQ", exact.dq, tf32.dq, gold_bwd.dQ},
        Pair{"dK", exact.dk, tf32.dk, gold_bwd.dK}, Pair{"dV", exact.dv, tf32.dv, gold_bwd.dV}}) {
    const double exact_error = test::relative_l2(test::to_bhsd(t.exact.view), t.gold);
    const double tf32_error = test::relative_l2(test::to_bhsd(t.tf32.view), t.gold);
    EXPECT_LT(exact_error, 1e-5) << t.name;
    EXPECT_GT(tf32_error, 5e-5) << t.name;
    EXPECT_LT(tf32_error, 2e-3) << t.name;
  }

  const Problem half = make_problem(1, 2, 2, 20, 20, 16, Mask::none, DType::bf16);
  AttentionData plain = test::random_data(half, Layout::bshd, 3);
  AttentionData flagged = test::random_data(half, Layout::bshd, 3);
  flagged.options.allow_tf32 = true;
  for (AttentionData* d : {&plain, &flagged}) {
    backend->forward(d->forward_params());
    backend->backward(d->backward_params());
  }
  EXPECT_TRUE(test::identical(test::to_bhsd(plain.o.view), test::to_bhsd(flagged.o.view)));
  EXPECT_TRUE(test::identical(test::to_bhsd(plain.dk.view), test::to_bhsd(flagged.dk.view)));
}

}  // namespace
}  // namespace flashref

// Tensor views: the three standard layouts' offsets, arbitrary strides, element_span.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <set>
#include <vector>

#include "flashref/tensor.hpp"

namespace flashref {
namespace {

constexpr std::int64_t B = 2, S = 5, H = 3, d = 4;

// Calls f(b, s, h, i) for every element of a (B, S, H, d) view.
template <class F>
void for_each_index(const TensorView& v, F f) {
  for (std::int64_t b = 0; b < v.batch; ++b)
    for (std::int64_t s = 0; s < v.seq; ++s)
      for (std::int64_t h = 0; h < v.heads; ++h)
        for (std::int64_t i = 0; i < v.dim; ++i) f(b, s, h, i);
}

TEST(TensorView, BshdOffsets) {
  const TensorView v = bshd_view(nullptr, DType::bf16, B, S, H, d);
  EXPECT_EQ(v.dtype, DType::bf16);
  EXPECT_EQ(v.batch, B);
  EXPECT_EQ(v.seq, S);
  EXPECT_EQ(v.heads, H);
  EXPECT_EQ(v.dim, d);
  for_each_index(v, [&](auto b, auto s, auto h, auto i) {
    ASSERT_EQ(v.offset(b, s, h, i), ((b * S + s) * H + h) * d + i);
  });
}

TEST(TensorView, BhsdOffsets) {
  const TensorView v = bhsd_view(nullptr, DType::f32, B, H, S, d);
  EXPECT_EQ(v.seq, S);
  EXPECT_EQ(v.heads, H);
  for_each_index(v, [&](auto b, auto s, auto h, auto i) {
    ASSERT_EQ(v.offset(b, s, h, i), ((b * H + h) * S + s) * d + i);
  });
}

TEST(TensorView, BsdIsOneHead) {
  const TensorView v = bsd_view(nullptr, DType::f16, B, S, d);
  EXPECT_EQ(v.heads, 1);
  for_each_index(v, [&](auto b, auto s, auto, auto i) {
    ASSERT_EQ(v.offset(b, s, 0, i), (b * S + s) * d + i);
  });
}

// Each standard layout is a bijection onto [0, B*S*H*d): no gaps, no aliasing.
TEST(TensorView, StandardLayoutsAreDenseBijections) {
  for (const TensorView& v :
       {bshd_view(nullptr, DType::f32, B, S, H, d), bhsd_view(nullptr, DType::f32, B, H, S, d),
        bsd_view(nullptr, DType::f32, B, S, d)}) {
    std::set<std::int64_t> seen;
    for_each_index(v, [&](auto b, auto s, auto h, auto i) { seen.insert(v.offset(b, s, h, i)); });
    const std::int64_t count = v.batch * v.seq * v.heads * v.dim;
    ASSERT_EQ(static_cast<std::int64_t>(seen.size()), count);
    EXPECT_EQ(*seen.begin(), 0);
    EXPECT_EQ(*seen.rbegin(), count - 1);
    const ElementSpan span = element_span(v);
    EXPECT_EQ(span.lo, 0);
    EXPECT_EQ(span.hi, count);
  }
}

// element_span is the smallest and one-past-largest offset any element has, for any strides
// (padded, zero, negative, out of the usual order).
TEST(TensorView, ElementSpanMatchesBruteForceForRandomStrides) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<std::int64_t> extent(1, 4), stride(-40, 40);
  for (int trial = 0; trial < 500; ++trial) {
    TensorView v;
    v.batch = extent(rng);
    v.seq = extent(rng);
    v.heads = extent(rng);
    v.dim = extent(rng);
    v.batch_stride = stride(rng);
    v.seq_stride = stride(rng);
    v.head_stride = stride(rng);
    std::int64_t lo = INT64_MAX, hi = INT64_MIN;
    for_each_index(v, [&](auto b, auto s, auto h, auto i) {
      lo = std::min(lo, v.offset(b, s, h, i));
      hi = std::max(hi, v.offset(b, s, h, i) + 1);
    });
    const ElementSpan span = element_span(v);
    ASSERT_EQ(span.lo, lo) << trial;
    ASSERT_EQ(span.hi, hi) << trial;
  }
}

TEST(TensorView, ElementSpanOfAnEmptyViewIsEmpty) {
  TensorView v = bshd_view(nullptr, DType::f32, B, S, H, d);
  for (auto member : {&TensorView::batch, &TensorView::seq, &TensorView::heads, &TensorView::dim}) {
    TensorView empty = v;
    empty.*member = 0;
    const ElementSpan span = element_span(empty);
    EXPECT_EQ(span.lo, 0);
    EXPECT_EQ(span.hi, 0);
  }
}

TEST(TensorView, LoadAndStoreGoThroughTheStrides) {
  // A (B, S, H, d) tensor stored (B, H, S, d) with padding after every row and head.
  const std::int64_t row = d + 3, head = S * row + 2, batch = H * head + 5;
  std::vector<std::uint16_t> buffer(static_cast<std::size_t>(B * batch), 0xffff);
  const TensorView v{buffer.data(), DType::bf16, B, S, H, d, batch, row, head};
  for_each_index(v, [&](auto b, auto s, auto h, auto i) {
    v.store(b, s, h, i, static_cast<float>(((b * S + s) * H + h) * d + i));
  });
  for_each_index(v, [&](auto b, auto s, auto h, auto i) {
    const float expected = round_to(DType::bf16, static_cast<float>(((b * S + s) * H + h) * d + i));
    ASSERT_EQ(v.load(b, s, h, i), expected);
    ASSERT_EQ(buffer[static_cast<std::size_t>(b * batch + h * head + s * row + i)],
              float_to_bf16_bits(expected));
  });
  // The padding was never written.
  std::size_t untouched = 0;
  for (std::uint16_t x : buffer) untouched += x == 0xffff;
  EXPECT_EQ(untouched, buffer.size() - static_cast<std::size_t>(B * S * H * d));
}

}  // namespace
}  // namespace flashref

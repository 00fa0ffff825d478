// validate(ForwardParams) and validate_inputs(ForwardParams): every rule, one broken field at a
// time, with the field and the values in the message.
#include <gtest/gtest.h>

#include <string>

#include "validate_support.hpp"

namespace flashref {
namespace {

using test::expect_invalid;
using test::ParamsBuffers;

// Each input and output view of the forward, by name.
struct ViewField {
  TensorView ForwardParams::*member;
  const char* name;
};
const ViewField kViews[] = {{&ForwardParams::q, "params.q"},
                            {&ForwardParams::k, "params.k"},
                            {&ForwardParams::v, "params.v"},
                            {&ForwardParams::o, "params.o"}};

TEST(ValidateForward, AcceptsValidParams) {
  ParamsBuffers buffers;
  EXPECT_NO_THROW(validate(buffers.forward()));
  EXPECT_NO_THROW(validate_inputs(buffers.forward()));
}

TEST(ValidateForward, NullPointers) {
  ParamsBuffers buffers;
  for (const ViewField& f : kViews) {
    ForwardParams p = buffers.forward();
    (p.*f.member).data = nullptr;
    expect_invalid([&] { validate(p); }, f.name, {"null"});
  }
  ForwardParams p = buffers.forward();
  p.lse = nullptr;
  expect_invalid([&] { validate(p); }, "params.lse", {"null"});
}

TEST(ValidateForward, WrongDtype) {
  ParamsBuffers buffers;
  for (const ViewField& f : kViews) {
    ForwardParams p = buffers.forward();
    (p.*f.member).dtype = DType::bf16;
    expect_invalid([&] { validate(p); }, f.name, {"dtype is bf16", "needs f32"});
  }
}

TEST(ValidateForward, WrongShapeInEachDimension) {
  ParamsBuffers buffers;
  for (const ViewField& f : kViews) {
    for (std::int64_t TensorView::*dim :
         {&TensorView::batch, &TensorView::seq, &TensorView::heads, &TensorView::dim}) {
      ForwardParams p = buffers.forward();
      TensorView& v = p.*f.member;
      const std::string needed = test::shape_string(v);
      v.*dim += 1;
      const std::string got = test::shape_string(v);
      expect_invalid([&] { validate(p); }, f.name, {"is " + got, "needs " + needed});
    }
  }
}

// K and V have H_kv heads and S_k rows: passing a Q-shaped view for K is caught.
TEST(ValidateForward, KWithQueryHeadsIsRejected) {
  ParamsBuffers buffers;
  ForwardParams p = buffers.forward();
  p.k = buffers.q_view(buffers.q);
  expect_invalid([&] { validate(p); }, "params.k", {"(2, 5, 4, 8)", "(2, 6, 2, 8)"});
}

TEST(ValidateForward, NegativeStrides) {
  ParamsBuffers buffers;
  for (const ViewField& f : kViews) {
    for (std::int64_t TensorView::*stride :
         {&TensorView::batch_stride, &TensorView::seq_stride, &TensorView::head_stride}) {
      ForwardParams p = buffers.forward();
      p.*f.member.*stride = -(p.*f.member.*stride);
      const TensorView& v = p.*f.member;
      expect_invalid([&] { validate(p); }, f.name,
                     {"non-negative", "batch_stride=" + std::to_string(v.batch_stride),
                      "seq_stride=" + std::to_string(v.seq_stride),
                      "head_stride=" + std::to_string(v.head_stride)});
    }
  }
}

TEST(ValidateForward, InputsOnlyValidationIgnoresTheOutputs) {
  ParamsBuffers buffers;
  ForwardParams p = buffers.forward();
  p.o = TensorView{};
  p.lse = nullptr;
  EXPECT_NO_THROW(validate_inputs(p));
  p.v.dtype = DType::f16;
  expect_invalid([&] { validate_inputs(p); }, "params.v", {"dtype is f16"});
}

TEST(ValidateForward, OutputOverlappingAnInput) {
  ParamsBuffers buffers;
  for (const ViewField& input : {kViews[0], kViews[1], kViews[2]}) {
    // The input and O share one buffer, O starting a few elements into the input.
    std::vector<float> shared(buffers.q.size() + 16, 0.0f);
    ForwardParams p = buffers.forward();
    (p.*input.member).data = shared.data();
    p.o.data = shared.data() + 3;
    expect_invalid([&] { validate(p); }, "params.o", {std::string("overlaps ") + input.name});
  }
}

TEST(ValidateForward, LogsumexpOverlappingAnInput) {
  ParamsBuffers buffers;
  ForwardParams p = buffers.forward();
  p.lse = static_cast<float*>(p.k.data) + 1;
  expect_invalid([&] { validate(p); }, "params.lse", {"overlaps params.k"});
}

TEST(ValidateForward, OutputsOverlappingEachOther) {
  ParamsBuffers buffers;
  ForwardParams p = buffers.forward();
  p.lse = static_cast<float*>(p.o.data) + 10;
  expect_invalid([&] { validate(p); }, "params.o", {"overlaps params.lse"});
}

TEST(ValidateForward, OutputWithAZeroStrideOverlapsItself) {
  ParamsBuffers buffers;
  for (std::int64_t TensorView::*stride :
       {&TensorView::batch_stride, &TensorView::seq_stride, &TensorView::head_stride}) {
    ForwardParams p = buffers.forward();
    p.o.*stride = 0;
    expect_invalid([&] { validate(p); }, "params.o", {"overlap each other", "strides"});
  }
  // Rows that are closer than d apart overlap too.
  ForwardParams p = buffers.forward();
  p.o.head_stride = p.o.dim - 1;
  expect_invalid([&] { validate(p); }, "params.o", {"overlap each other"});
}

// Inputs may alias each other (self-attention with K = V) and use stride 0 (broadcast).
TEST(ValidateForward, InputsMayAliasAndBroadcast) {
  ParamsBuffers buffers;
  ForwardParams p = buffers.forward();
  p.v = p.k;
  p.q.batch_stride = 0;
  EXPECT_NO_THROW(validate(p));
}

// Q and O interleaved row by row in one buffer: their byte spans overlap, their rows do not.
TEST(ValidateForward, InterleavedOutputAndInputAreAccepted) {
  ParamsBuffers buffers;
  const Problem& pr = buffers.problem;
  std::vector<float> packed(static_cast<std::size_t>(2 * pr.B * pr.S_q * pr.H * pr.d), 0.0f);
  ForwardParams p = buffers.forward();
  const std::int64_t row = pr.H * pr.d;
  p.q = TensorView{packed.data(), DType::f32,       pr.B,    pr.S_q, pr.H,
                   pr.d,          2 * pr.S_q * row, 2 * row, pr.d};
  p.o = p.q;
  p.o.data = packed.data() + row;
  EXPECT_NO_THROW(validate(p));
  p.o.data = packed.data() + row - 1;  // one element into Q's last head of the first row
  expect_invalid([&] { validate(p); }, "params.o", {"overlaps params.q"});
}

TEST(ValidateForward, NegativeTilesAndThreads) {
  ParamsBuffers buffers;
  ForwardParams p = buffers.forward();
  p.options.tile_q = -1;
  p.options.tile_k = 16;
  expect_invalid([&] { validate(p); }, "params.options.tile_q/tile_k", {">= 1", "-1,16"});
  p.options.tile_q = 16;
  p.options.tile_k = -4;
  expect_invalid([&] { validate(p); }, "params.options.tile_q/tile_k", {"16,-4"});
  p.options.tile_k = 0;  // zero: the backend's default
  EXPECT_NO_THROW(validate(p));
  p.options.num_threads = -2;
  expect_invalid([&] { validate(p); }, "params.options.num_threads", {"got -2"});
}

}  // namespace
}  // namespace flashref

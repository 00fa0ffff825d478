// validate(BackwardParams) and validate_inputs(BackwardParams): every rule, one broken field at
// a time, with the field and the values in the message.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "validate_support.hpp"

namespace flashref {
namespace {

using test::expect_invalid;
using test::ParamsBuffers;

struct ViewField {
  TensorView BackwardParams::*member;
  const char* name;
  bool gradient;  // dtype is problem.grad_dtype
};
const ViewField kViews[] = {
    {&BackwardParams::q, "params.q", false},   {&BackwardParams::k, "params.k", false},
    {&BackwardParams::v, "params.v", false},   {&BackwardParams::o, "params.o", false},
    {&BackwardParams::dO, "params.dO", false}, {&BackwardParams::dq, "params.dq", true},
    {&BackwardParams::dk, "params.dk", true},  {&BackwardParams::dv, "params.dv", true}};

TEST(ValidateBackward, AcceptsValidParams) {
  ParamsBuffers buffers;
  EXPECT_NO_THROW(validate(buffers.backward()));
  EXPECT_NO_THROW(validate_inputs(buffers.backward()));
}

TEST(ValidateBackward, NullPointers) {
  ParamsBuffers buffers;
  for (const ViewField& f : kViews) {
    BackwardParams p = buffers.backward();
    (p.*f.member).data = nullptr;
    expect_invalid([&] { validate(p); }, f.name, {"null"});
  }
  BackwardParams p = buffers.backward();
  p.lse = nullptr;
  expect_invalid([&] { validate(p); }, "params.lse", {"null"});
}

// Inputs must have problem.dtype and gradients problem.grad_dtype.
TEST(ValidateBackward, WrongDtype) {
  ParamsBuffers buffers;
  for (const ViewField& f : kViews) {
    BackwardParams p = buffers.backward();
    (p.*f.member).dtype = DType::f16;
    expect_invalid([&] { validate(p); }, f.name, {"dtype is f16", "needs f32"});
  }
  BackwardParams p = buffers.backward();
  p.problem.grad_dtype = DType::bf16;  // the views still say f32
  expect_invalid([&] { validate(p); }, "params.dq", {"dtype is f32", "needs bf16"});
}

TEST(ValidateBackward, WrongShape) {
  ParamsBuffers buffers;
  for (const ViewField& f : kViews) {
    BackwardParams p = buffers.backward();
    const std::string needed = test::shape_string(p.*f.member);
    (p.*f.member).seq += 2;
    expect_invalid([&] { validate(p); }, f.name,
                   {"is " + test::shape_string(p.*f.member), "needs " + needed});
  }
  // dK with the query heads instead of the kv heads.
  BackwardParams p = buffers.backward();
  p.dk.heads = p.problem.H;
  expect_invalid([&] { validate(p); }, "params.dk", {"(2, 6, 4, 8)", "needs (2, 6, 2, 8)"});
}

TEST(ValidateBackward, NegativeStrides) {
  ParamsBuffers buffers;
  for (const ViewField& f : kViews) {
    BackwardParams p = buffers.backward();
    (p.*f.member).head_stride = -8;
    expect_invalid([&] { validate(p); }, f.name, {"non-negative", "head_stride=-8"});
  }
}

TEST(ValidateBackward, InputsOnlyValidationChecksDOButNotTheOutputs) {
  ParamsBuffers buffers;
  BackwardParams p = buffers.backward();
  p.dq = p.dk = p.dv = TensorView{};
  p.o = TensorView{};
  p.lse = nullptr;
  EXPECT_NO_THROW(validate_inputs(p));
  p.dO.dim = 7;
  expect_invalid([&] { validate_inputs(p); }, "params.dO", {"(2, 5, 4, 7)", "(2, 5, 4, 8)"});
}

TEST(ValidateBackward, GradientOverlappingAnInput) {
  ParamsBuffers buffers;
  struct Case {
    TensorView BackwardParams::*output;
    const char* output_name;
    TensorView BackwardParams::*input;
    const char* input_name;
  };
  for (const Case& c : {Case{&BackwardParams::dq, "params.dq", &BackwardParams::dO, "params.dO"},
                        Case{&BackwardParams::dq, "params.dq", &BackwardParams::q, "params.q"},
                        Case{&BackwardParams::dq, "params.dq", &BackwardParams::o, "params.o"},
                        Case{&BackwardParams::dk, "params.dk", &BackwardParams::k, "params.k"},
                        Case{&BackwardParams::dv, "params.dv", &BackwardParams::v, "params.v"}}) {
    BackwardParams p = buffers.backward();
    (p.*c.output).data = (p.*c.input).data;
    expect_invalid([&] { validate(p); }, c.output_name, {std::string("overlaps ") + c.input_name});
  }
  // L is an input of the backward. L and dV share one buffer sized for dV, so dV overlaps L
  // and nothing else, wherever the allocator put the other buffers.
  BackwardParams p = buffers.backward();
  std::vector<float> shared(buffers.dv.size(), 0.0f);
  p.lse = shared.data();
  p.dv.data = shared.data();
  expect_invalid([&] { validate(p); }, "params.dv", {"overlaps params.lse"});
}

TEST(ValidateBackward, GradientsOverlappingEachOther) {
  ParamsBuffers buffers;
  BackwardParams p = buffers.backward();
  p.dv.data = static_cast<float*>(p.dk.data) + 5;
  expect_invalid([&] { validate(p); }, "params.dk", {"overlaps params.dv"});
  p = buffers.backward();
  p.dk.data = p.dq.data;
  expect_invalid([&] { validate(p); }, "params.dq", {"overlaps params.dk"});
}

TEST(ValidateBackward, GradientWithAZeroStrideOverlapsItself) {
  ParamsBuffers buffers;
  for (TensorView BackwardParams::*g :
       {&BackwardParams::dq, &BackwardParams::dk, &BackwardParams::dv}) {
    BackwardParams p = buffers.backward();
    (p.*g).seq_stride = 0;
    expect_invalid([&] { validate(p); },
                   g == &BackwardParams::dq   ? "params.dq"
                   : g == &BackwardParams::dk ? "params.dk"
                                              : "params.dv",
                   {"overlap each other", "0"});
  }
}

// dQ, dK, dV side by side in one (B, S, 3, H, d) buffer, as a fused QKV projection's gradient
// is laid out: byte spans overlap, rows do not. Accepted; shifted by one element, rejected.
TEST(ValidateBackward, InterleavedGradientsInOneBufferAreAccepted) {
  const Problem pr = make_problem(2, 3, 3, 5, 5, 8);
  ParamsBuffers buffers(pr);
  const std::int64_t row = pr.H * pr.d, packed_row = 3 * row;
  std::vector<float> packed(static_cast<std::size_t>(pr.B * pr.S_q * packed_row), 0.0f);
  BackwardParams p = buffers.backward();
  const TensorView base{packed.data(), DType::f32,          pr.B,       pr.S_q, pr.H,
                        pr.d,          pr.S_q * packed_row, packed_row, pr.d};
  p.dq = p.dk = p.dv = base;
  p.dk.data = packed.data() + row;
  p.dv.data = packed.data() + 2 * row;
  EXPECT_NO_THROW(validate(p));
  p.dv.data = packed.data() + 2 * row - 1;
  expect_invalid([&] { validate(p); }, "params.dk", {"overlaps params.dv"});
}

TEST(ValidateBackward, NegativeTilesAndThreads) {
  ParamsBuffers buffers;
  BackwardParams p = buffers.backward();
  p.options.tile_k = -1;
  expect_invalid([&] { validate(p); }, "params.options.tile_q/tile_k", {"0,-1"});
  p.options.tile_k = 3;
  p.options.num_threads = -1;
  expect_invalid([&] { validate(p); }, "params.options.num_threads", {"got -1"});
}

}  // namespace
}  // namespace flashref

// Precision modes: the precision a candidate was written for, so it is judged as its author
// meant it (docs/verification.md, "Precision modes"). The same three settings in `check`,
// `run`, `verify` and `fuzz`, in the report's header and in the JSON:
//   --allow-tf32   a float32 candidate whose products take TF32 inputs is judged against the
//                  TF32 baseline (the reference backend with ExecutionOptions::allow_tf32);
//   --lse-dtype    the dtype the candidate stored L in (f32, bf16, f16): the floor of L is two
//                  rounding steps of that dtype at max|L| instead of float32's;
//   --grad-dtype   the dtype of dQ, dK, dV (Problem::grad_dtype): their floor follows it.
// And in `check` only (a user's kernel; flashref's own float32 backends claim float32):
//   --three-tf32   a float32 candidate whose products are 3xTF32 (each operand split into two
//                  TF32 halves, the small x small term dropped) is judged against the float32
//                  baseline with each product's own error in the noise floor
//                  (kThreeTf32ProductSigma, noise_floor.hpp).
// The rule itself is the same in every mode.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "flashref/problem.hpp"

namespace flashref::verify {

struct Precision {
  bool allow_tf32 = false;       // float32 products' inputs rounded to TF32
  DType lse_dtype = DType::f32;  // what L was stored in; FlashAttention's contract is f32
  bool three_tf32 = false;       // float32 products made as 3xTF32; not with allow_tf32
};

// Throws InvalidArgument naming --three-tf32 when it is asked with --allow-tf32: they name two
// different precisions of the same products.
void validate(const Precision& precision);

// "f32", "bf16", "f16" (also "float32", "bfloat16", "float16"); anything else throws
// InvalidArgument naming `option` ("--lse-dtype").
DType parse_lse_dtype(std::string_view text, const std::string& option = "--lse-dtype");

// "products float32, L f32, gradients bf16" or "products TF32 (--allow-tf32), L bf16, ...".
// TF32 and 3xTF32 apply to float32 inputs only; for 16-bit inputs they change nothing.
std::string describe(const Precision& precision, const Problem& problem);
// {"allow_tf32", "tf32_applies", "three_tf32", "products", "lse_dtype", "grad_dtype"}
nlohmann::json to_json(const Precision& precision, const Problem& problem);

}  // namespace flashref::verify

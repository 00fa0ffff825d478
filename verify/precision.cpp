#include "flashref/verify/precision.hpp"

#include "flashref/error.hpp"

namespace flashref::verify {

DType parse_lse_dtype(std::string_view text, const std::string& option) {
  if (text == "f32" || text == "float32") return DType::f32;
  if (text == "bf16" || text == "bfloat16") return DType::bf16;
  if (text == "f16" || text == "float16") return DType::f16;
  throw InvalidArgument(option, "must be f32, bf16 or f16 (the dtype L was stored in), got '" +
                                    std::string(text) + "'");
}

namespace {

bool tf32_applies(const Precision& pr, const Problem& p) {
  return pr.allow_tf32 && p.dtype == DType::f32;
}

bool three_tf32_applies(const Precision& pr, const Problem& p) {
  return pr.three_tf32 && p.dtype == DType::f32;
}

}  // namespace

void validate(const Precision& pr) {
  if (pr.three_tf32 && pr.allow_tf32) {
    throw InvalidArgument(
        "--three-tf32",
        "names 3xTF32 products and --allow-tf32 names TF32 products: give one "
        "(3xTF32 products err by a few float32 roundings, TF32 ones by about 2^-10)");
  }
}

std::string describe(const Precision& pr, const Problem& p) {
  std::string products = tf32_applies(pr, p)         ? "TF32 (--allow-tf32)"
                         : three_tf32_applies(pr, p) ? "3xTF32 (--three-tf32)"
                                                     : std::string(dtype_name(p.dtype)) + " inputs";
  return "products " + products + ", L " + std::string(dtype_name(pr.lse_dtype)) + ", gradients " +
         std::string(dtype_name(p.grad_dtype));
}

nlohmann::json to_json(const Precision& pr, const Problem& p) {
  return {{"allow_tf32", pr.allow_tf32},
          {"tf32_applies", tf32_applies(pr, p)},
          {"three_tf32", pr.three_tf32},
          {"products", tf32_applies(pr, p)         ? "tf32"
                       : three_tf32_applies(pr, p) ? "3xtf32"
                                                   : std::string(dtype_name(p.dtype))},
          {"lse_dtype", std::string(dtype_name(pr.lse_dtype))},
          {"grad_dtype", std::string(dtype_name(p.grad_dtype))}};
}

}  // namespace flashref::verify

// The five tensors a backend is judged on, and what each one's rows index.
#pragma once

#include <cstdint>
#include <string_view>

#include "flashref/problem.hpp"

namespace flashref::verify {

enum class TensorId : std::uint8_t { O, L, dQ, dK, dV };

inline constexpr TensorId kForwardTensors[] = {TensorId::O, TensorId::L};
inline constexpr TensorId kBackwardTensors[] = {TensorId::dQ, TensorId::dK, TensorId::dV};

std::string_view tensor_name(TensorId t);  // "O", "L", "dQ", "dK", "dV"

// Which sequence a tensor's rows run over: query rows (O, L, dQ) or key rows (dK, dV). A
// worst index is placed in a query tile of B_q rows or a key tile of B_k rows accordingly.
enum class SeqAxis : std::uint8_t { query, key };
SeqAxis seq_axis(TensorId t);

// The dtype the tensor is stored in: problem.dtype for O, float32 for L, grad_dtype for the
// gradients. The rule's floor is a rounding step of this dtype.
DType output_dtype(TensorId t, const Problem& p);
// The same, with L stored in `lse_dtype` (--lse-dtype: a kernel that keeps L in bf16 or f16).
DType output_dtype(TensorId t, const Problem& p, DType lse_dtype);

}  // namespace flashref::verify

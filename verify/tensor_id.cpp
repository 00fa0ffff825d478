#include "flashref/verify/tensor_id.hpp"

namespace flashref::verify {

std::string_view tensor_name(TensorId t) {
  switch (t) {
    case TensorId::O:
      return "O";
    case TensorId::L:
      return "L";
    case TensorId::dQ:
      return "dQ";
    case TensorId::dK:
      return "dK";
    case TensorId::dV:
      return "dV";
  }
  return "?";
}

SeqAxis seq_axis(TensorId t) {
  return t == TensorId::dK || t == TensorId::dV ? SeqAxis::key : SeqAxis::query;
}

DType output_dtype(TensorId t, const Problem& p) {
  switch (t) {
    case TensorId::O:
      return p.dtype;
    case TensorId::L:
      return DType::f32;
    default:
      return p.grad_dtype;
  }
}

DType output_dtype(TensorId t, const Problem& p, DType lse_dtype) {
  return t == TensorId::L ? lse_dtype : output_dtype(t, p);
}

}  // namespace flashref::verify

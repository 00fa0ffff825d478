#include "flashref/verify/tensor_set.hpp"

#include <stdexcept>
#include <string>

#include "flashref/error.hpp"
#include "flashref/verify/npy.hpp"

namespace flashref::verify {

bool TensorSet::has_backward() const {
  return has(TensorId::dQ) && has(TensorId::dK) && has(TensorId::dV);
}

const xt::xarray<double>& TensorSet::at(TensorId id) const {
  const auto it = tensors_.find(id);
  if (it == tensors_.end()) {
    throw std::out_of_range("the tensor set has no " + std::string(tensor_name(id)));
  }
  return it->second;
}

std::vector<std::size_t> canonical_shape(TensorId id, const Problem& p) {
  auto n = [](std::int64_t x) { return static_cast<std::size_t>(x); };
  switch (id) {
    case TensorId::O:
    case TensorId::dQ:
      return {n(p.B), n(p.H), n(p.S_q), n(p.d)};
    case TensorId::L:
      return {n(p.B), n(p.H), n(p.S_q)};
    case TensorId::dK:
    case TensorId::dV:
      return {n(p.B), n(p.H_kv), n(p.S_k), n(p.d)};
  }
  return {};
}

void require_canonical_shapes(const TensorSet& set, const Problem& problem,
                              std::string_view role) {
  for (const auto& [id, values] : set) {
    const std::vector<std::size_t> want = canonical_shape(id, problem);
    const std::vector<std::size_t> got(values.shape().begin(), values.shape().end());
    if (got != want) {
      throw InvalidArgument(
          std::string(role) + " " + std::string(tensor_name(id)),
          "shape is " + shape_string(got) + " but the problem needs " + shape_string(want));
    }
  }
}

}  // namespace flashref::verify

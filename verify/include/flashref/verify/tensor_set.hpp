// Some of the five tensors (O, L, dQ, dK, dV) as double in the canonical layout, keyed by their
// id: what the gold computes, what a backend wrote (runner.hpp), the candidate `flashref check`
// reads, and what the diagnosis recomputes under each hypothesis.
//
// Canonical shapes (canonical_shape): O, dQ (B, H, S_q, d); L (B, H, S_q); dK, dV
// (B, H_kv, S_k, d). Iteration runs in TensorId order: O and L before the gradients.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <map>
#include <string_view>
#include <utility>
#include <vector>

#include <xtensor/xarray.hpp>

#include "flashref/problem.hpp"
#include "flashref/verify/tensor_id.hpp"

namespace flashref::verify {

class TensorSet {
 public:
  using Map = std::map<TensorId, xt::xarray<double>>;

  TensorSet() = default;
  TensorSet(std::initializer_list<Map::value_type> tensors) : tensors_(tensors) {}

  bool has(TensorId id) const { return tensors_.count(id) > 0; }
  // dQ, dK and dV are all present.
  bool has_backward() const;
  bool empty() const { return tensors_.empty(); }

  // Throws std::out_of_range naming the tensor when it is absent.
  const xt::xarray<double>& at(TensorId id) const;
  // Inserts an empty tensor when absent.
  xt::xarray<double>& operator[](TensorId id) { return tensors_[id]; }
  void erase(TensorId id) { tensors_.erase(id); }

  Map::const_iterator begin() const { return tensors_.begin(); }
  Map::const_iterator end() const { return tensors_.end(); }
  Map::iterator begin() { return tensors_.begin(); }
  Map::iterator end() { return tensors_.end(); }

 private:
  Map tensors_;
};

// The canonical shape of tensor `id` for `problem` (see above).
std::vector<std::size_t> canonical_shape(TensorId id, const Problem& problem);

// Throws InvalidArgument("<role> O", "shape is (...) but the problem needs (...)") for the first
// tensor of `set` whose shape is not canonical_shape(id, problem).
void require_canonical_shapes(const TensorSet& set, const Problem& problem, std::string_view role);

}  // namespace flashref::verify

// A backend for the property tests of partial attention and the merge: it splits the keys into
// the given blocks, runs the inner backend's partial attention (a placed Problem) of all the
// queries against each block, and merges the blocks' O and L by logsumexp in the given order.
// Its backward runs the inner backward on each block with the merged O and L (so P and D are
// the whole problem's), sums the blocks' dQ in float32 in the same order, and writes each
// block's dK, dV rows. It is judged by verify_backends like any backend. gen_split draws the
// blocks and the order for the property tests (the cpu ones and tests/cuda/ring_test.cpp).
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include <rapidcheck.h>

#include "flashref/backend.hpp"
#include "flashref/merge.hpp"

namespace flashref::ring::testing {

struct KeySplit {
  std::vector<std::int64_t> bounds;  // 0 = b_0 < b_1 < ... < b_n = S_k: block r is [b_r, b_r+1)
  std::vector<std::size_t> order;    // a permutation of 0..n-1: the merge order
};

// "key blocks at 0,3,7, merged in order 1,0"
inline std::string describe(const KeySplit& s) {
  std::ostringstream o;
  o << "key blocks at";
  for (std::size_t i = 0; i < s.bounds.size(); ++i) o << (i ? "," : " ") << s.bounds[i];
  o << ", merged in order";
  for (std::size_t i = 0; i < s.order.size(); ++i) o << (i ? "," : " ") << s.order[i];
  return o.str();
}

// 1..6 blocks of random sizes (cut points drawn in 1..S_k-1), and a random merge order.
KeySplit gen_split(std::int64_t S_k) {
  const int cuts = *rc::gen::inRange<int>(0, static_cast<int>(std::min<std::int64_t>(S_k, 6)));
  std::vector<std::int64_t> bounds{0, S_k};
  for (int c = 0; c < cuts; ++c) bounds.push_back(*rc::gen::inRange<std::int64_t>(1, S_k));
  std::sort(bounds.begin(), bounds.end());
  bounds.erase(std::unique(bounds.begin(), bounds.end()), bounds.end());
  const std::size_t n = bounds.size() - 1;
  const auto keys = *rc::gen::container<std::vector<int>>(n, rc::gen::arbitrary<int>());
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return keys[a] < keys[b]; });
  return KeySplit{bounds, order};
}

class SplitKeysBackend final : public Backend {
 public:
  SplitKeysBackend(const Backend& inner, KeySplit split)
      : inner_(inner), split_(std::move(split)) {}
  std::string name() const override { return "split-keys(" + inner_.name() + ")"; }
  Support supports(const Problem& p) const override { return inner_.supports(p); }

  void forward(const ForwardParams& params) const override {
    validate(params);
    const Problem& p = params.problem;
    std::vector<float> O_acc(static_cast<std::size_t>(p.B * p.S_q * p.H * p.d));
    std::vector<float> L_acc(static_cast<std::size_t>(p.B * p.H * p.S_q));
    const MergeTarget target{bshd_view(O_acc.data(), DType::f32, p.B, p.S_q, p.H, p.d),
                             L_acc.data()};
    clear_merge(target);
    for (std::size_t r : split_.order) {
      ForwardParams block = block_params(params, r);
      std::vector<std::byte> O_part(static_cast<std::size_t>(p.B * p.S_q * p.H * p.d) *
                                    dtype_size(p.dtype));
      std::vector<float> L_part(L_acc.size());
      block.o = bshd_view(O_part.data(), p.dtype, p.B, p.S_q, p.H, p.d);
      block.lse = L_part.data();
      inner_.forward(block);
      merge_into(target, block.o, L_part.data());
    }
    store_merged(target, params.o);
    for (std::size_t i = 0; i < L_acc.size(); ++i) params.lse[i] = L_acc[i];
  }

  void backward(const BackwardParams& params) const override {
    validate(params);
    const Problem& p = params.problem;
    std::vector<float> dQ_acc(static_cast<std::size_t>(p.B * p.S_q * p.H * p.d), 0.0f);
    const TensorView acc = bshd_view(dQ_acc.data(), DType::f32, p.B, p.S_q, p.H, p.d);
    for (std::size_t r : split_.order) {
      BackwardParams block = block_params(params, r);
      block.problem.grad_dtype = DType::f32;  // partial gradients stay in float32
      const std::int64_t n = block.problem.S_k;
      std::vector<float> dQ(dQ_acc.size()), dK(static_cast<std::size_t>(p.B * n * p.H_kv * p.d)),
          dV(dK.size());
      block.dq = bshd_view(dQ.data(), DType::f32, p.B, p.S_q, p.H, p.d);
      block.dk = bshd_view(dK.data(), DType::f32, p.B, n, p.H_kv, p.d);
      block.dv = bshd_view(dV.data(), DType::f32, p.B, n, p.H_kv, p.d);
      inner_.backward(block);
      for (std::size_t i = 0; i < dQ_acc.size(); ++i) dQ_acc[i] += dQ[i];
      copy_rows(block.dk, params.dk, split_.bounds[r]);
      copy_rows(block.dv, params.dv, split_.bounds[r]);
    }
    copy_rows(acc, params.dq, 0);
  }

 private:
  // Keys [b_r, b_r+1) as views into the whole K and V, placed at their global positions.
  template <class Params>
  Params block_params(const Params& whole, std::size_t r) const {
    Params block = whole;
    const std::int64_t begin = split_.bounds[r], end = split_.bounds[r + 1];
    block.problem.S_k = end - begin;
    block.problem.placement = Placement{0, begin, whole.problem.S_q, whole.problem.S_k};
    block.k = rows_from(whole.k, begin, end - begin);
    block.v = rows_from(whole.v, begin, end - begin);
    return block;
  }
  static TensorView rows_from(TensorView v, std::int64_t begin, std::int64_t rows) {
    v.data = static_cast<std::byte*>(v.data) +
             begin * v.seq_stride * static_cast<std::int64_t>(dtype_size(v.dtype));
    v.seq = rows;
    return v;
  }
  // dst rows [begin, begin + src.seq) = src, rounded to dst's dtype.
  static void copy_rows(const TensorView& src, const TensorView& dst, std::int64_t begin) {
    for (std::int64_t b = 0; b < src.batch; ++b)
      for (std::int64_t s = 0; s < src.seq; ++s)
        for (std::int64_t h = 0; h < src.heads; ++h)
          for (std::int64_t i = 0; i < src.dim; ++i)
            dst.store(b, begin + s, h, i, src.load(b, s, h, i));
  }

  const Backend& inner_;
  KeySplit split_;
};

}  // namespace flashref::ring::testing

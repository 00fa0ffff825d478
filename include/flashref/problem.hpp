// The attention problem: sizes, mask, scale and dtypes. Everything else (pointers, strides,
// tile sizes) lives in the params structs, which embed one Problem.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>

#include "flashref/dtype.hpp"

namespace flashref {

enum class Mask : std::uint8_t {
  none,
  // Query q sees keys k <= q. The course's convention and PyTorch's is_causal.
  causal_top_left,
  // Query q sees keys k <= q + S_k - S_q. FlashAttention-2's convention since v2.1.
  // When S_q > S_k the first S_q - S_k query rows see no key at all ("fully masked rows").
  causal_bottom_right,
};

// "none", "causal" (top-left) and "causal-bottom-right": the CLI spellings.
std::string_view mask_name(Mask m);
Mask parse_mask(std::string_view s);  // throws InvalidArgument("--mask", ...)

// Where a problem sits inside a larger one, for partial attention (context parallelism): its
// query row q is the larger problem's row q_offset + q, its key k the larger problem's key
// k_offset + k, and the larger problem has S_q_total queries and S_k_total keys. The mask is
// the larger problem's, applied to those global positions, so a block of queries attended to
// a block of keys sees exactly the keys its rows see in the whole problem; O and L are then
// the block's partial results, to be merged by their logsumexp (flashref/merge.hpp). The
// default (all zero) means the problem is whole.
struct Placement {
  std::int64_t q_offset = 0;   // global position of query row 0, >= 0
  std::int64_t k_offset = 0;   // global position of key 0, >= 0
  std::int64_t S_q_total = 0;  // queries of the larger problem, >= q_offset + S_q; 0: whole
  std::int64_t S_k_total = 0;  // keys of the larger problem, >= k_offset + S_k; 0: whole

  bool placed() const { return S_q_total != 0 || S_k_total != 0 || q_offset != 0 || k_offset != 0; }
};

struct Problem {
  std::int64_t B = 1;     // batch
  std::int64_t H = 1;     // query heads
  std::int64_t H_kv = 1;  // key/value heads; divides H (H_kv == H: MHA, 1: MQA, else GQA)
  std::int64_t S_q = 1;   // query sequence length, >= 1
  std::int64_t S_k = 1;   // key/value sequence length, >= 1
  std::int64_t d = 64;    // head dim, 1..256 (backends may support fewer: see supports())
  double scale = 0.125;   // softmax scale applied to Q K^T; finite. Use default_scale(d).
  Mask mask = Mask::none;
  DType dtype = DType::f32;       // Q, K, V, O, dO
  DType grad_dtype = DType::f32;  // dQ, dK, dV
  Placement placement;            // partial attention: where this block sits; default: whole

  // Query head h reads key/value head h / group_size().
  std::int64_t group_size() const { return H / H_kv; }

  // Last key index (inclusive) visible to query row q, or S_k - 1 without a mask. May be
  // negative for bottom-right causal with S_q > S_k: the row sees nothing. For a placed
  // problem the mask compares global positions (Placement), and the result is a local index:
  // negative when the row sees no key of this block.
  std::int64_t last_visible_key(std::int64_t q) const {
    if (!placement.placed()) return last_visible_key_in(q, S_q, S_k);
    const std::int64_t global = last_visible_key_in(q + placement.q_offset, placement.S_q_total,
                                                    placement.S_k_total);
    const std::int64_t k = global - placement.k_offset;
    return k < S_k - 1 ? k : S_k - 1;
  }
  bool is_causal() const { return mask != Mask::none; }

 private:
  // The mask of a whole problem with n_q queries and n_k keys.
  std::int64_t last_visible_key_in(std::int64_t q, std::int64_t n_q, std::int64_t n_k) const {
    switch (mask) {
      case Mask::none: return n_k - 1;
      case Mask::causal_top_left: return q < n_k - 1 ? q : n_k - 1;
      case Mask::causal_bottom_right: {
        std::int64_t k = q + n_k - n_q;
        return k < n_k - 1 ? k : n_k - 1;
      }
    }
    return n_k - 1;
  }
};

inline double default_scale(std::int64_t d) { return 1.0 / std::sqrt(static_cast<double>(d)); }

// Builds a problem with scale = 1/sqrt(d) and grad_dtype = dtype.
Problem make_problem(std::int64_t B, std::int64_t H, std::int64_t H_kv, std::int64_t S_q,
                     std::int64_t S_k, std::int64_t d, Mask mask = Mask::none,
                     DType dtype = DType::f32);

// FLOPs as FlashAttention's benchmarks count them: forward 4*B*H*S_q*S_k*d, halved for
// causal masks; backward 2.5 times the forward.
double forward_flops(const Problem& p);
double backward_flops(const Problem& p);

// "B=2 H=4 H_kv=2 S_q=300 S_k=300 d=64 mask=causal dtype=bf16 scale=0.125"
std::string describe(const Problem& p);

}  // namespace flashref

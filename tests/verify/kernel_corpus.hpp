// The corpus of real mistakes: a small FlashAttention-2 forward written the way the course's
// Triton kernels are (online softmax over key tiles of B_k in float32, P~ fed to the P~V product
// as the dot's operand), with a switch for each mistake their authors made
// (docs/checking-your-kernel.md; issue 9). kernel_corpus_test.cpp checks that `flashref check`
// names each one.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "flashref/reference/tf32.hpp"
#include "flashref/verify/problem_data.hpp"
#include "flashref/verify/tensor_set.hpp"

namespace flashref::corpus {

enum class MaskedRows : std::uint8_t {
  zero,       // correct: O = 0, L = -inf
  mean_of_v,  // the masked scores softmaxed as equal numbers: uniform attention over all keys
  junk,       // finite values that mean nothing
};

struct Kernel {
  std::int64_t tile_k = 32;  // B_k of the key loop
  bool tf32 = false;         // tl.dot on float32 without input_precision="ieee"
  // With tf32: the dots' operands lose their low 13 mantissa bits (rounded toward zero), as
  // tensor cores fed float32 as is do (Triton's default); else rounded to nearest.
  bool tf32_truncates = false;
  // Float32 products made as 3xTF32 (three_tf32_product), as a tensor-core kernel's exact
  // float32 path makes them (PyTorch's memory-efficient kernel; dev/f32/README.md).
  bool three_tf32 = false;
  // With three_tf32: the big halves truncated, as CUTLASS's FastF32 makes them; else rounded.
  bool three_tf32_big_truncated = false;
  // Every add of the long sums (Q K^T over d, P~ V over the keys) truncated toward zero, as a
  // tensor core's float32 accumulator is when a kernel adds every mma step into it
  // (add_toward_zero; docs/verification.md, rounded_toward_zero).
  bool truncated_sums = false;
  DType lse_dtype = DType::f32;    // L stored in this dtype
  bool pad_keys_unmasked = false;  // last key tile loaded with zeros and never masked
  MaskedRows masked_rows = MaskedRows::zero;
  std::int64_t tail_garbage_tile = 0;  // B_q: the last partial query tile holds junk
  bool tail_unwritten_tile = false;    // with tail_garbage_tile: rows never written (NaN)
  bool max_init_zero = false;          // running max starts at 0 instead of -inf
  float score_eps = 0.0f;              // added to every visible score ("for stability")
  float denominator_eps = 0.0f;        // O = acc / (l + eps), L = m + log(l + eps)
  // Not a mistake: FlashAttention-4's conditional rescale (flashref's sm90 forward at d = 128,
  // FwdTraitsLazyRescale). A key tile whose max exceeds the running max m by at most this
  // (natural-log units; 0: off) leaves m, l and acc as they are, so P~ = exp(s - m) reaches
  // e^lazy_rescale and L = m + log l adds two larger numbers.
  float lazy_rescale = 0.0f;
};

// x y as tensor cores make it from float32 operands each split into two TF32 values, big =
// tf32(x) and small = tf32(x - big): big small + small big + big big, summed in float32, the
// small x small term (about 2^-22 of the product) dropped. big is x rounded to nearest (PTX's
// cvt.rna: flashref's kernels, Triton's tf32x3) or, with `big_truncated`, truncated (CUTLASS's
// FastF32, whose products err about twice as much: docs/verification.md, "3xTF32 products").
inline float three_tf32_product(float x, float y, bool big_truncated = false) {
  const auto big = [&](float a) {
    return big_truncated ? reference::truncate_to_tf32(a) : reference::round_to_tf32(a);
  };
  const float xb = big(x), yb = big(y);
  const float xs = reference::round_to_tf32(x - xb), ys = reference::round_to_tf32(y - yb);
  return (xb * ys + xs * yb) + xb * yb;
}

// a + b rounded toward zero to float32.
inline float add_toward_zero(float a, float b) {
  const double sum = static_cast<double>(a) + static_cast<double>(b);
  const float f = static_cast<float>(sum);
  return std::fabs(static_cast<double>(f)) > std::fabs(sum) ? std::nextafter(f, 0.0f) : f;
}

// Deterministic junk in [-3, 3): what a read past the end returns.
inline float junk(std::uint64_t n) {
  n = (n + 0x9e3779b97f4a7c15ull) * 0xbf58476d1ce4e5b9ull;
  n ^= n >> 31;
  return static_cast<float>(static_cast<double>(n >> 11) * 0x1p-53 * 6.0 - 3.0);
}

// O and L of `data` (canonical layout) as the kernel computes them.
inline verify::TensorSet run_kernel(const verify::ProblemData& data, const Kernel& k) {
  const Problem& p = data.problem;
  const auto op = [&](float x) {
    if (!k.tf32) return x;
    return k.tf32_truncates ? reference::truncate_to_tf32(x) : reference::round_to_tf32(x);
  };
  const auto mul = [&](float x, float y) {
    return k.three_tf32 ? three_tf32_product(x, y, k.three_tf32_big_truncated) : op(x) * op(y);
  };
  const auto sum = [&](float a, float b) {
    return k.truncated_sums ? add_toward_zero(a, b) : a + b;
  };
  const auto n = [](std::int64_t x) { return static_cast<std::size_t>(x); };
  xt::xarray<double> O = xt::zeros<double>({n(p.B), n(p.H), n(p.S_q), n(p.d)});
  xt::xarray<double> L = xt::zeros<double>({n(p.B), n(p.H), n(p.S_q)});
  const std::int64_t keys =
      k.pad_keys_unmasked ? (p.S_k + k.tile_k - 1) / k.tile_k * k.tile_k : p.S_k;
  const float ninf = -std::numeric_limits<float>::infinity();
  const auto visible = [&](std::int64_t i, std::int64_t j) {
    switch (p.mask) {
      case Mask::none:
        return true;
      case Mask::causal_top_left:
        return j <= i;
      case Mask::causal_bottom_right:
        return j <= i + p.S_k - p.S_q;
    }
    return true;
  };
  const std::int64_t tail_begin = k.tail_garbage_tile > 0 && p.S_q % k.tail_garbage_tile != 0
                                      ? p.S_q / k.tail_garbage_tile * k.tail_garbage_tile
                                      : p.S_q;
  std::vector<float> s(n(keys)), acc(n(p.d));
  for (std::int64_t b = 0; b < p.B; ++b)
    for (std::int64_t h = 0; h < p.H; ++h) {
      const std::int64_t hk = h / p.group_size();
      for (std::int64_t i = 0; i < p.S_q; ++i) {
        if (i >= tail_begin) {
          for (std::int64_t c = 0; c < p.d; ++c)
            O(b, h, i, c) = k.tail_unwritten_tile ? std::numeric_limits<double>::quiet_NaN()
                                                  : junk(n(((b * p.H + h) * p.S_q + i) * p.d + c));
          L(b, h, i) =
              k.tail_unwritten_tile ? std::numeric_limits<double>::quiet_NaN() : junk(n(i)) + 10.0;
          continue;
        }
        // Online softmax over key tiles: m, l, acc in float32 (Algorithm 1).
        float m = k.max_init_zero ? 0.0f : ninf, l = 0.0f;
        std::fill(acc.begin(), acc.end(), 0.0f);
        bool any = false;
        for (std::int64_t j0 = 0; j0 < keys; j0 += k.tile_k) {
          const std::int64_t j1 = std::min(keys, j0 + k.tile_k);
          float tile_max = ninf;
          for (std::int64_t j = j0; j < j1; ++j) {
            float dot = 0.0f;
            if (j < p.S_k) {
              for (std::int64_t c = 0; c < p.d; ++c)
                dot = sum(dot, mul(data.q.get(b, h, i, c), data.k.get(b, hk, j, c)));
            }  // a padded key is zero: its score is 0
            // A padded key is seen by the same index comparison as a real one.
            const bool seen = visible(i, j);
            s[n(j)] = seen ? static_cast<float>(p.scale) * dot + k.score_eps : ninf;
            if (seen) any = true;
            tile_max = std::max(tile_max, s[n(j)]);
          }
          float m_new = std::max(m, tile_max);
          if (m_new == ninf) continue;  // nothing seen yet
          if (k.lazy_rescale > 0.0f && m != ninf && m_new - m <= k.lazy_rescale) m_new = m;
          const float alpha = std::exp(m - m_new);
          l *= alpha;
          for (float& a : acc) a *= alpha;
          for (std::int64_t j = j0; j < j1; ++j) {
            const float pj = std::exp(s[n(j)] - m_new);
            l += pj;
            if (j >= p.S_k) continue;  // V is zero there
            for (std::int64_t c = 0; c < p.d; ++c)
              acc[n(c)] = sum(acc[n(c)], mul(pj, data.v.get(b, hk, j, c)));
          }
          m = m_new;
        }
        if (!any) {
          // A row that sees no key.
          for (std::int64_t c = 0; c < p.d; ++c) {
            double mean = 0.0;
            for (std::int64_t j = 0; j < p.S_k; ++j) mean += data.v.get(b, hk, j, c);
            mean /= static_cast<double>(p.S_k);
            O(b, h, i, c) = k.masked_rows == MaskedRows::zero        ? 0.0
                            : k.masked_rows == MaskedRows::mean_of_v ? static_cast<float>(mean)
                                                                     : junk(n(i * p.d + c));
          }
          L(b, h, i) = k.masked_rows == MaskedRows::zero ? -std::numeric_limits<double>::infinity()
                                                         : std::log(static_cast<double>(p.S_k));
          continue;
        }
        l += k.denominator_eps;
        for (std::int64_t c = 0; c < p.d; ++c) {
          const float o = acc[n(c)] / l;
          O(b, h, i, c) = round_to(p.dtype, o);
        }
        L(b, h, i) = round_to(k.lse_dtype, m + std::log(l));
      }
    }
  verify::TensorSet t;
  t[verify::TensorId::O] = std::move(O);
  t[verify::TensorId::L] = std::move(L);
  return t;
}

}  // namespace flashref::corpus

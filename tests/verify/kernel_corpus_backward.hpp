// The corpus of real mistakes, backward: Algorithm 2 (eq. 13-19, recomputation with D) written
// the way the course's Triton backwards are. D = rowsum(dO * O) in a float32 preprocess; then a
// pass that owns dK and dV (for each key tile, loop over the queries) and one that owns dQ, each
// recomputing S = scale Q K^T and P = exp(S - L) from the forward's L, with every product's
// operands in the dot's input precision (TF32 for float32 under tl.dot's default, the input
// dtype for bf16/f16) and float32 accumulation. Switches reproduce the mistakes their authors
// made (docs/checking-your-kernel.md); kernel_corpus_test.cpp checks what `flashref check` says.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernel_corpus.hpp"

namespace flashref::corpus {

// Where D came from.
enum class DVector : std::uint8_t {
  right,         // D_i = rowsum(dO_i * O_i)
  zero,          // the preprocess forgotten: D = 0
  rowsum_dP,     // D_i = sum_j dP_ij: P left out of rowsum(P * dP)
  per_key_tile,  // D_i = rowsum(P * dP) over the current key tile only, not the whole row
};

// Where the softmax scale went.
enum class ScaleSlip : std::uint8_t {
  none,
  ds_missing,  // dS = P (dP - D) never scaled: dQ and dK both lack it
  dq_missing,  // the scale applied to dK after its loop but not to dQ
  dk_missing,  // ... to dQ but not to dK
  twice,       // dS scaled and dQ, dK scaled again after their loops
};

struct BackwardKernel {
  std::int64_t tile_k = 32;               // B_k of the key loop (and of the dK/dV grid)
  bool tf32 = false;                      // tl.dot on float32 without input_precision="ieee"
  bool three_tf32 = false;                // float32 products as 3xTF32 (kernel_corpus.hpp)
  bool three_tf32_big_truncated = false;  // with three_tf32: CUTLASS's split (kernel_corpus.hpp)
  bool scale_in_ds = true;         // dS = P (dP - D) * scale before the dots (Triton style); else
                                   // dQ and dK are scaled once after their loops
  bool pad_keys_unmasked = false;  // last key tile loaded with zeros and never masked
  DVector D = DVector::right;
  ScaleSlip scale = ScaleSlip::none;
  bool dkdv_tail_unwritten = false;  // grid of floor(S_k / B_k) key tiles: the last partial
                                     // tile of dK and dV is never written
  bool tail_nan = false;             // with dkdv_tail_unwritten: it holds NaN (the runner's
                                     // poison), else junk (what torch.empty held)
};

// dQ, dK, dV of `data` (canonical layout, stored in the problem's grad_dtype) from the
// forward's O and L (`forward`, canonical, as the forward stored them).
inline verify::TensorSet run_backward(const verify::ProblemData& data,
                                      const verify::TensorSet& forward, const BackwardKernel& k) {
  const Problem& p = data.problem;
  const auto n = [](std::int64_t x) { return static_cast<std::size_t>(x); };
  // An operand as the dot reads it: TF32 for float32 under TF32, the input dtype otherwise
  // (P and dS are cast to it, as the P~V product's P~ is in the forward).
  const auto op = [&](float x) {
    if (p.dtype != DType::f32) return round_to(p.dtype, x);
    return k.tf32 ? reference::round_to_tf32(x) : x;
  };
  const auto mul = [&](float x, float y) {
    return p.dtype == DType::f32 && k.three_tf32
               ? three_tf32_product(x, y, k.three_tf32_big_truncated)
               : op(x) * op(y);
  };
  const xt::xarray<double>& O = forward.at(verify::TensorId::O);
  const xt::xarray<double>& L = forward.at(verify::TensorId::L);
  const std::int64_t keys =
      k.pad_keys_unmasked ? (p.S_k + k.tile_k - 1) / k.tile_k * k.tile_k : p.S_k;
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
  // Where the scale goes: a factor on dS, and one on dQ and dK after their loops.
  const auto scale = static_cast<float>(p.scale);
  float on_ds = k.scale_in_ds ? scale : 1.0f;
  float after_dq = k.scale_in_ds ? 1.0f : scale, after_dk = after_dq;
  switch (k.scale) {
    case ScaleSlip::none:
      break;
    case ScaleSlip::ds_missing:
      on_ds = 1.0f;
      after_dq = after_dk = 1.0f;
      break;
    case ScaleSlip::dq_missing:
      on_ds = 1.0f;
      after_dq = 1.0f;
      after_dk = scale;
      break;
    case ScaleSlip::dk_missing:
      on_ds = 1.0f;
      after_dq = scale;
      after_dk = 1.0f;
      break;
    case ScaleSlip::twice:
      on_ds = scale;
      after_dq = after_dk = scale;
      break;
  }
  const auto key = [&](std::int64_t b, std::int64_t hk, std::int64_t j, std::int64_t c) {
    return j < p.S_k ? data.k.get(b, hk, j, c) : 0.0f;  // zero padding past the end
  };
  const auto value = [&](std::int64_t b, std::int64_t hk, std::int64_t j, std::int64_t c) {
    return j < p.S_k ? data.v.get(b, hk, j, c) : 0.0f;
  };

  xt::xarray<double> dQ = xt::zeros<double>({n(p.B), n(p.H), n(p.S_q), n(p.d)});
  xt::xarray<double> dK = xt::zeros<double>({n(p.B), n(p.H_kv), n(p.S_k), n(p.d)});
  xt::xarray<double> dV = dK;
  std::vector<float> P(n(keys)), dP(n(keys)), dS(n(keys)), D_tile(n(keys));
  std::vector<float> acc_q(n(p.d));
  std::vector<float> acc_k(n(keys * p.d)), acc_v(n(keys * p.d));
  for (std::int64_t b = 0; b < p.B; ++b)
    for (std::int64_t hk = 0; hk < p.H_kv; ++hk) {
      std::fill(acc_k.begin(), acc_k.end(), 0.0f);
      std::fill(acc_v.begin(), acc_v.end(), 0.0f);
      for (std::int64_t h = hk * p.group_size(); h < (hk + 1) * p.group_size(); ++h)
        for (std::int64_t i = 0; i < p.S_q; ++i) {
          const float L_i = static_cast<float>(L(n(b), n(h), n(i)));
          // Algorithm 2 line 2, the preprocess: D_i = rowsum(dO_i * O_i) in float32.
          float D = 0.0f;
          for (std::int64_t c = 0; c < p.d; ++c)
            D += data.dO.get(b, h, i, c) * static_cast<float>(O(n(b), n(h), n(i), n(c)));
          // Lines 11-14 for every key: S, P = exp(S - L) (0 where masked), dP = dO V^T.
          for (std::int64_t j = 0; j < keys; ++j) {
            P[n(j)] = dP[n(j)] = 0.0f;
            if (!visible(i, j)) continue;  // a padded key is seen by the same comparison
            float s = 0.0f, dp = 0.0f;
            for (std::int64_t c = 0; c < p.d; ++c) {
              s += mul(data.q.get(b, h, i, c), key(b, hk, j, c));
              dp += mul(data.dO.get(b, h, i, c), value(b, hk, j, c));
            }
            P[n(j)] = std::exp(scale * s - L_i);
            dP[n(j)] = dp;
          }
          // The D each key's dS uses.
          for (std::int64_t j0 = 0; j0 < keys; j0 += k.tile_k) {
            const std::int64_t j1 = std::min(keys, j0 + k.tile_k);
            float local = 0.0f;
            for (std::int64_t j = j0; j < j1; ++j) local += P[n(j)] * dP[n(j)];
            for (std::int64_t j = j0; j < j1; ++j) D_tile[n(j)] = local;
          }
          float rowsum_dP = 0.0f;
          for (std::int64_t j = 0; j < keys; ++j)
            if (visible(i, j)) rowsum_dP += dP[n(j)];
          for (std::int64_t j = 0; j < keys; ++j) {
            const float D_used = k.D == DVector::right       ? D
                                 : k.D == DVector::zero      ? 0.0f
                                 : k.D == DVector::rowsum_dP ? rowsum_dP
                                                             : D_tile[n(j)];
            // Line 15: dS = P * (dP - D), scaled here when the kernel folds the scale in.
            dS[n(j)] = P[n(j)] * (dP[n(j)] - D_used) * on_ds;
          }
          // Lines 13, 16, 17: dV += P^T dO, dQ += dS K, dK += dS^T Q, operands as the dots
          // read them.
          std::fill(acc_q.begin(), acc_q.end(), 0.0f);
          for (std::int64_t j = 0; j < keys; ++j) {
            if (P[n(j)] == 0.0f && dS[n(j)] == 0.0f) continue;
            const float Pj = P[n(j)], dSj = dS[n(j)];
            for (std::int64_t c = 0; c < p.d; ++c) {
              acc_v[n(j * p.d + c)] += mul(Pj, data.dO.get(b, h, i, c));
              acc_k[n(j * p.d + c)] += mul(dSj, data.q.get(b, h, i, c));
              acc_q[n(c)] += mul(dSj, key(b, hk, j, c));
            }
          }
          for (std::int64_t c = 0; c < p.d; ++c)
            dQ(n(b), n(h), n(i), n(c)) = round_to(p.grad_dtype, acc_q[n(c)] * after_dq);
        }
      // The dK/dV pass stores its key tiles; a padded key's rows fall past the end.
      const std::int64_t written = k.dkdv_tail_unwritten ? p.S_k / k.tile_k * k.tile_k : p.S_k;
      for (std::int64_t j = 0; j < p.S_k; ++j)
        for (std::int64_t c = 0; c < p.d; ++c) {
          const std::size_t at = n(j * p.d + c);
          if (j >= written) {
            const double junk_value =
                k.tail_nan ? std::numeric_limits<double>::quiet_NaN()
                           : junk(n(((b * p.H_kv + hk) * p.S_k + j) * p.d + c) + 977);
            dK(n(b), n(hk), n(j), n(c)) = junk_value;
            dV(n(b), n(hk), n(j), n(c)) = junk_value;
            continue;
          }
          dK(n(b), n(hk), n(j), n(c)) = round_to(p.grad_dtype, acc_k[at] * after_dk);
          dV(n(b), n(hk), n(j), n(c)) = round_to(p.grad_dtype, acc_v[at]);
        }
    }
  verify::TensorSet t;
  t[verify::TensorId::dQ] = std::move(dQ);
  t[verify::TensorId::dK] = std::move(dK);
  t[verify::TensorId::dV] = std::move(dV);
  return t;
}

}  // namespace flashref::corpus

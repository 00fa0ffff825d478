// A tiled FlashAttention forward written the way a Triton kernel is (one program per query
// tile, a loop over key tiles with the online softmax in float32), storing its states in the
// layout of docs/checking-your-kernel.md from inside the loop, with a switch for each
// convention a correct kernel may use and for each mistake that makes it leave Algorithm 1 at
// a known step. states_test.cpp checks that judge_forward_states names that step.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numbers>
#include <vector>

#include "flashref/verify/states.hpp"

namespace flashref::states_kernel {

struct Kernel {
  std::int64_t B_q = 4, B_k = 4;
  // Conventions (correct either way).
  bool m_log2 = false;          // scores times log2(e), exp2 (ThunderKittens, FlashAttention-2)
  bool acc_normalized = false;  // O divided by l at every step (FlashAttention-1)
  // Mistakes.
  bool l_not_rescaled = false;        // line 12 without exp(m_old - m)
  bool acc_rescaled_new_max = false;  // line 13's factor from the new max twice: exp(m - m)
  bool diagonal_strict = false;       // mask key < q instead of key <= q
  bool max_init_zero = false;         // line 6: m = 0 instead of -inf
  bool read_past_S_k = false;         // last key tile loaded with zeros and never masked
  // Not a mistake, but not Algorithm 1: FlashAttention-4's conditional rescale, m kept unless a
  // tile raises it by more than this (in m's units; 0: off).
  float lazy_rescale = 0.0f;
};

// Runs the kernel on every head and query tile and returns its states; key tiles a causal
// kernel skips and rows past S_q hold NaN (the judge must ignore them).
inline verify::CandidateStates run(const verify::ProblemData& data, const Kernel& k) {
  const Problem& p = data.problem;
  const auto z = [](std::int64_t n) { return static_cast<std::size_t>(n); };
  const std::int64_t T_q = (p.S_q + k.B_q - 1) / k.B_q, T_k = (p.S_k + k.B_k - 1) / k.B_k;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float ninf = -std::numeric_limits<float>::infinity();
  const float log2e = std::numbers::log2e_v<float>;
  xt::xtensor<double, 5> M = xt::xtensor<double, 5>::from_shape(
      {z(p.B), z(p.H), z(T_q), z(T_k), z(k.B_q)});
  xt::xtensor<double, 5> L = M;
  xt::xtensor<double, 6> A = xt::xtensor<double, 6>::from_shape(
      {z(p.B), z(p.H), z(T_q), z(T_k), z(k.B_q), z(p.d)});
  M.fill(nan);
  L.fill(nan);
  A.fill(nan);
  // The index comparison, on padded keys too (they have indices past S_k).
  const auto last_key = [&](std::int64_t q) {
    switch (p.mask) {
      case Mask::none:
        return std::numeric_limits<std::int64_t>::max();
      case Mask::causal_top_left:
        return q;
      case Mask::causal_bottom_right:
        return q + p.S_k - p.S_q;
    }
    return q;
  };
  const auto sees = [&](std::int64_t q, std::int64_t key) {
    return k.diagonal_strict ? key < last_key(q) : key <= last_key(q);
  };
  const float scale = static_cast<float>(p.scale) * (k.m_log2 ? log2e : 1.0f);
  const auto ex = [&](float x) { return k.m_log2 ? std::exp2(x) : std::exp(x); };

  for (std::int64_t b = 0; b < p.B; ++b)
    for (std::int64_t h = 0; h < p.H; ++h) {
      const std::int64_t hk = h / p.group_size();
      for (std::int64_t i = 0; i < T_q; ++i) {
        const std::int64_t rows = std::min(k.B_q, p.S_q - i * k.B_q);
        // A causal kernel stops after the last key tile its last row sees.
        std::int64_t j_end = T_k;
        if (p.is_causal()) {
          const std::int64_t last = std::min(last_key(i * k.B_q + rows - 1), p.S_k - 1);
          j_end = last < 0 ? 0 : last / k.B_k + 1;
        }
        std::vector<float> m(z(rows), k.max_init_zero ? 0.0f : ninf), l(z(rows), 0.0f);
        std::vector<float> acc(z(rows * p.d), 0.0f);
        for (std::int64_t j = 0; j < j_end; ++j) {
          const std::int64_t key_end = k.read_past_S_k ? (j + 1) * k.B_k
                                                       : std::min(p.S_k, (j + 1) * k.B_k);
          for (std::int64_t r = 0; r < rows; ++r) {
            const std::int64_t q = i * k.B_q + r;
            std::vector<float> s;
            float tile_max = ninf;
            for (std::int64_t key = j * k.B_k; key < key_end; ++key) {
              float dot = 0.0f;
              if (key < p.S_k)
                for (std::int64_t c = 0; c < p.d; ++c)
                  dot += data.q.get(b, h, q, c) * data.k.get(b, hk, key, c);
              s.push_back(sees(q, key) ? dot * scale : ninf);
              tile_max = std::max(tile_max, s.back());
            }
            const float m_old = m[z(r)];
            float m_new = std::max(m_old, tile_max);
            if (k.lazy_rescale > 0.0f && m_old != ninf && m_new - m_old <= k.lazy_rescale)
              m_new = m_old;
            // A row that has seen no key keeps m = -inf, l = 0, acc = 0 (no -inf - -inf).
            const float alpha = m_new == ninf ? 1.0f : ex(m_old - m_new);
            const float alpha_acc = k.acc_rescaled_new_max ? ex(m_new - m_new) : alpha;
            float rowsum = 0.0f;
            std::vector<float> pv(z(p.d), 0.0f);
            for (std::size_t n = 0; n < s.size(); ++n) {
              const float P = m_new == ninf ? 0.0f : ex(s[n] - m_new);
              rowsum += P;
              const std::int64_t key = j * k.B_k + static_cast<std::int64_t>(n);
              if (key >= p.S_k) continue;  // the zero padding: V = 0
              const float P_op = round_to(p.dtype, P);  // the dot's operand dtype
              for (std::int64_t c = 0; c < p.d; ++c)
                pv[z(c)] += P_op * data.v.get(b, hk, key, c);
            }
            const float l_old = l[z(r)];
            l[z(r)] = (k.l_not_rescaled ? l_old : alpha * l_old) + rowsum;
            for (std::int64_t c = 0; c < p.d; ++c) {
              float& o = acc[z(r * p.d + c)];
              if (k.acc_normalized) {
                o = l[z(r)] > 0.0f ? (alpha_acc * l_old * o + pv[z(c)]) / l[z(r)] : 0.0f;
              } else {
                o = alpha_acc * o + pv[z(c)];
              }
            }
            m[z(r)] = m_new;
            // The stores of the states layout, inside the loop.
            M(z(b), z(h), z(i), z(j), z(r)) = m_new;
            L(z(b), z(h), z(i), z(j), z(r)) = l[z(r)];
            for (std::int64_t c = 0; c < p.d; ++c)
              A(z(b), z(h), z(i), z(j), z(r), z(c)) = acc[z(r * p.d + c)];
          }
        }
      }
    }
  verify::CandidateStates out;
  out.m = std::move(M);
  out.l = std::move(L);
  out.acc = std::move(A);
  return out;
}

// The backward of the same kernel, written as a Triton two-pass backward is (one program per
// query tile for dQ, one per key tile and query head for dK and dV, float32 accumulators, P and
// dS rounded to the input dtype before their products), from the forward's O and L above,
// storing the backward states of states.hpp from inside its loops. Mistakes planted on request.
struct BackwardKernel {
  std::int64_t B_q = 4, B_k = 4;
  // Conventions (correct either way).
  bool scale_in_dS = false;   // line 15 as printed: dS = P (dP - D) * scale
  bool scale_in_acc = false;  // dS unscaled, but dQ_i and dK_j accumulate scale * dS K
  // Mistakes.
  bool ds_without_D = false;     // line 15: dS = P * dP
  bool p_missing_scale = false;  // line 11: S = Q K^T without the softmax scale
  bool p_unmasked = false;       // the backward's S not masked (the forward's was)
  bool dk_with_P = false;        // line 17: dK_j += P^T Q instead of dS^T Q
  bool lse_base_mismatch = false;  // P = exp2(S log2(e) - L) with the forward's natural L
};

inline verify::CandidateBackwardStates run_backward(const verify::ProblemData& data,
                                                    const BackwardKernel& k) {
  const Problem& p = data.problem;
  const auto z = [](std::int64_t n) { return static_cast<std::size_t>(n); };
  const std::int64_t T_q = (p.S_q + k.B_q - 1) / k.B_q, T_k = (p.S_k + k.B_k - 1) / k.B_k;
  const std::int64_t d = p.d;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float ninf = -std::numeric_limits<float>::infinity();
  const float scale = static_cast<float>(p.scale);

  // The forward's O (rounded to the dtype, as stored) and L, from its last visited state.
  Kernel fwd;
  fwd.B_q = k.B_q;
  fwd.B_k = k.B_k;
  const verify::CandidateStates f = run(data, fwd);
  std::vector<float> O(z(p.B * p.H * p.S_q * d), 0.0f), L(z(p.B * p.H * p.S_q), ninf);
  for (std::int64_t b = 0; b < p.B; ++b)
    for (std::int64_t h = 0; h < p.H; ++h)
      for (std::int64_t q = 0; q < p.S_q; ++q) {
        const std::size_t i = z(q / k.B_q), r = z(q % k.B_q), row = z((b * p.H + h) * p.S_q + q);
        for (std::int64_t j = T_k - 1; j >= 0; --j) {
          const double m = (*f.m)(z(b), z(h), i, z(j), r);
          if (std::isnan(m)) continue;
          const double l = (*f.l)(z(b), z(h), i, z(j), r);
          if (m == ninf) break;
          L[row] = static_cast<float>(m) + std::log(static_cast<float>(l));
          for (std::int64_t c = 0; c < d; ++c)
            O[row * z(d) + z(c)] =
                round_to(p.dtype, static_cast<float>((*f.acc)(z(b), z(h), i, z(j), r, z(c))) /
                                      static_cast<float>(l));
          break;
        }
      }

  const auto last_key = [&](std::int64_t q) {
    switch (p.mask) {
      case Mask::none:
        return p.S_k - 1;
      case Mask::causal_top_left:
        return std::min(q, p.S_k - 1);
      case Mask::causal_bottom_right:
        return std::min(q + p.S_k - p.S_q, p.S_k - 1);
    }
    return q;
  };
  // Whether query tile i visits key tile j (a causal kernel skips the others).
  const auto visits = [&](std::int64_t i, std::int64_t j) {
    return last_key(std::min(p.S_q, (i + 1) * k.B_q) - 1) >= j * k.B_k;
  };
  const auto in = [](const verify::HostTensor& t, std::int64_t b, std::int64_t h, std::int64_t s,
                     std::int64_t c) { return t.get(b, h, s, c); };
  // Lines 11-15 for query q and key `key` of head (b, h): P, dP, dS (dS in the kernel's
  // convention).
  struct Entry {
    float P, dP, dS;
  };
  std::vector<float> D(L.size(), 0.0f);
  const auto entry = [&](std::int64_t b, std::int64_t h, std::int64_t q, std::int64_t key) {
    const std::int64_t hk = h / p.group_size();
    const std::size_t row = z((b * p.H + h) * p.S_q + q);
    float dot = 0.0f, dP = 0.0f;
    for (std::int64_t c = 0; c < d; ++c) {
      dot += in(data.q, b, h, q, c) * in(data.k, b, hk, key, c);
      dP += in(data.dO, b, h, q, c) * in(data.v, b, hk, key, c);
    }
    const float S = k.p_missing_scale ? dot : dot * scale;
    const bool seen = k.p_unmasked || key <= last_key(q);
    const float log2e = std::numbers::log2e_v<float>;
    const float P = !seen || L[row] == ninf ? 0.0f
                    : k.lse_base_mismatch   ? std::exp2(S * log2e - L[row])
                                            : std::exp(S - L[row]);
    float dS = k.ds_without_D ? P * dP : P * (dP - D[row]);
    if (k.scale_in_dS) dS *= scale;
    return Entry{P, dP, dS};
  };
  for (std::int64_t b = 0; b < p.B; ++b)
    for (std::int64_t h = 0; h < p.H; ++h)
      for (std::int64_t q = 0; q < p.S_q; ++q) {
        // Line 2: D = rowsum(dO * O), from O as stored.
        const std::size_t row = z((b * p.H + h) * p.S_q + q);
        float s = 0.0f;
        for (std::int64_t c = 0; c < d; ++c) s += in(data.dO, b, h, q, c) * O[row * z(d) + z(c)];
        D[row] = s;
      }
  const float acc_scale = k.scale_in_acc ? scale : 1.0f;

  verify::CandidateBackwardStates out;
  xt::xtensor<double, 4> Dst = xt::xtensor<double, 4>::from_shape({z(p.B), z(p.H), z(T_q), z(k.B_q)});
  const std::vector<std::size_t> pair = {z(p.B), z(p.H), z(T_q), z(T_k), z(k.B_q), z(k.B_k)};
  xt::xtensor<double, 6> Pst = xt::xtensor<double, 6>::from_shape(pair), dPst = Pst, dSst = Pst;
  xt::xtensor<double, 6> dQst =
      xt::xtensor<double, 6>::from_shape({z(p.B), z(p.H), z(T_q), z(T_k), z(k.B_q), z(d)});
  xt::xtensor<double, 6> dVst =
      xt::xtensor<double, 6>::from_shape({z(p.B), z(p.H), z(T_k), z(T_q), z(k.B_k), z(d)});
  xt::xtensor<double, 6> dKst = dVst;
  for (auto* a : {&Pst, &dPst, &dSst, &dQst, &dVst, &dKst}) a->fill(nan);
  Dst.fill(nan);

  for (std::int64_t b = 0; b < p.B; ++b)
    for (std::int64_t h = 0; h < p.H; ++h) {
      const std::int64_t hk = h / p.group_size();
      // The dQ pass: one program per query tile, a loop over the key tiles it sees.
      for (std::int64_t i = 0; i < T_q; ++i) {
        const std::int64_t rows = std::min(k.B_q, p.S_q - i * k.B_q);
        std::vector<float> dQ(z(rows * d), 0.0f);
        for (std::int64_t r = 0; r < rows; ++r)
          Dst(z(b), z(h), z(i), z(r)) = D[z((b * p.H + h) * p.S_q + i * k.B_q + r)];
        for (std::int64_t j = 0; j < T_k && visits(i, j); ++j) {
          for (std::int64_t r = 0; r < rows; ++r) {
            const std::int64_t q = i * k.B_q + r;
            for (std::int64_t key = j * k.B_k; key < std::min(p.S_k, (j + 1) * k.B_k); ++key) {
              const Entry e = entry(b, h, q, key);
              const std::size_t c0 = z(key - j * k.B_k);
              Pst(z(b), z(h), z(i), z(j), z(r), c0) = e.P;
              dPst(z(b), z(h), z(i), z(j), z(r), c0) = e.dP;
              dSst(z(b), z(h), z(i), z(j), z(r), c0) = e.dS;
              const float dS_op = round_to(p.dtype, e.dS);  // the dot's operand dtype
              for (std::int64_t c = 0; c < d; ++c)
                dQ[z(r * d + c)] += acc_scale * dS_op * in(data.k, b, hk, key, c);
            }
            for (std::int64_t c = 0; c < d; ++c)
              dQst(z(b), z(h), z(i), z(j), z(r), z(c)) = dQ[z(r * d + c)];
          }
        }
      }
      // The dK/dV pass: one program per key tile (of this query head), a loop over query tiles.
      for (std::int64_t j = 0; j < T_k; ++j) {
        const std::int64_t keys = std::min(k.B_k, p.S_k - j * k.B_k);
        std::vector<float> dV(z(keys * d), 0.0f), dK(z(keys * d), 0.0f);
        for (std::int64_t i = 0; i < T_q; ++i) {
          if (!visits(i, j)) continue;
          for (std::int64_t q = i * k.B_q; q < std::min(p.S_q, (i + 1) * k.B_q); ++q)
            for (std::int64_t kr = 0; kr < keys; ++kr) {
              const Entry e = entry(b, h, q, j * k.B_k + kr);
              const float P_op = round_to(p.dtype, e.P);
              const float dS_op = round_to(p.dtype, k.dk_with_P ? e.P : e.dS);
              for (std::int64_t c = 0; c < d; ++c) {
                dV[z(kr * d + c)] += P_op * in(data.dO, b, h, q, c);
                dK[z(kr * d + c)] += acc_scale * dS_op * in(data.q, b, h, q, c);
              }
            }
          for (std::int64_t kr = 0; kr < keys; ++kr)
            for (std::int64_t c = 0; c < d; ++c) {
              dVst(z(b), z(h), z(j), z(i), z(kr), z(c)) = dV[z(kr * d + c)];
              dKst(z(b), z(h), z(j), z(i), z(kr), z(c)) = dK[z(kr * d + c)];
            }
        }
      }
    }
  out.D = std::move(Dst);
  out.P = std::move(Pst);
  out.dP = std::move(dPst);
  out.dS = std::move(dSst);
  out.dQ = std::move(dQst);
  out.dV = std::move(dVst);
  out.dK = std::move(dKst);
  return out;
}

}  // namespace flashref::states_kernel

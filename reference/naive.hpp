// The building blocks of naive attention for one (batch, head), shared by the gold (T = double)
// and the baseline (T = float): scores, softmax, its backward, and three matmul shapes.
//
// Matrices are row-major and live in xt::xtensor buffers owned by the caller; the kernels take
// a small non-owning `Rows` view so that a (batch, head) slice of a (B, H, S, d) tensor and a
// per-thread scratch matrix look the same. Every sum runs in T in a fixed order, so results do
// not depend on the thread count or the memory layout of the inputs.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include <xtensor/xtensor.hpp>

#include "flashref/problem.hpp"

namespace flashref::reference::naive {

// A row-major (rows x cols) matrix in someone else's buffer.
template <class T>
struct Rows {
  T* data = nullptr;
  std::int64_t rows = 0, cols = 0;

  Rows() = default;
  Rows(T* data_, std::int64_t rows_, std::int64_t cols_) : data(data_), rows(rows_), cols(cols_) {}
  // A writable view converts to a read-only one.
  template <class U>
  requires(std::is_same_v<const U, T> && !std::is_same_v<U, T>) Rows(const Rows<U>& w)
      : Rows(w.data, w.rows, w.cols) {}

  T* row(std::int64_t i) const { return data + i * cols; }
};

// A read-only input of a kernel. type_identity keeps T from being deduced from it, so T comes
// from the output and a writable Rows<T> argument converts here.
template <class T>
using In = Rows<const std::type_identity_t<T>>;

template <class T>
Rows<T> rows_of(xt::xtensor<T, 2>& m) {
  return {m.data(), static_cast<std::int64_t>(m.shape()[0]),
          static_cast<std::int64_t>(m.shape()[1])};
}
template <class T>
Rows<const T> rows_of(const xt::xtensor<T, 2>& m) {
  return {m.data(), static_cast<std::int64_t>(m.shape()[0]),
          static_cast<std::int64_t>(m.shape()[1])};
}

// The (seq x dim) matrix of batch b, head h of a (B, H, S, d) tensor.
template <class T>
Rows<T> head_of(xt::xtensor<T, 4>& t, std::int64_t b, std::int64_t h) {
  const auto& s = t.shape();
  return {
      t.data() + (b * static_cast<std::int64_t>(s[1]) + h) * static_cast<std::int64_t>(s[2] * s[3]),
      static_cast<std::int64_t>(s[2]), static_cast<std::int64_t>(s[3])};
}
template <class T>
Rows<const T> head_of(const xt::xtensor<T, 4>& t, std::int64_t b, std::int64_t h) {
  const auto& s = t.shape();
  return {
      t.data() + (b * static_cast<std::int64_t>(s[1]) + h) * static_cast<std::int64_t>(s[2] * s[3]),
      static_cast<std::int64_t>(s[2]), static_cast<std::int64_t>(s[3])};
}

template <class T>
constexpr T minus_infinity() {
  return -std::numeric_limits<T>::infinity();
}

// Eq. (4) with the mask: S_ij = scale * (Q_i . K_j) for the keys row i sees, -inf for the others.
// The scale multiplies the finished dot product, as kernels that scale S (not Q) do.
template <class T>
void masked_scores(In<T> Q, In<T> K, T scale, const Problem& p, Rows<T> S) {
  for (std::int64_t i = 0; i < Q.rows; ++i) {
    const std::int64_t last = p.last_visible_key(i);
    const T* Q_i = Q.row(i);
    T* S_i = S.row(i);
    for (std::int64_t j = 0; j < K.rows; ++j) {
      if (j > last) {
        S_i[j] = minus_infinity<T>();
        continue;
      }
      const T* K_j = K.row(j);
      T dot = 0;
      for (std::int64_t c = 0; c < Q.cols; ++c) dot += Q_i[c] * K_j[c];
      S_i[j] = scale * dot;
    }
  }
}

// Eq. (5), one row at a time, over the keys the row sees (always a prefix 0..last):
//   m_i = max_j S_ij,  l_i = sum_j exp(S_ij - m_i),  P_ij = exp(S_ij - m_i) / l_i,
// and P_ij = 0 for masked keys. Subtracting m_i keeps exp from overflowing. A row that sees no
// key gets m_i = -inf, l_i = 0 and P_i = 0: computing it would be exp(-inf - -inf) = NaN.
template <class T>
void softmax_rows(In<T> S, const Problem& p, Rows<T> P, T* m, T* l) {
  for (std::int64_t i = 0; i < S.rows; ++i) {
    const std::int64_t visible = std::clamp<std::int64_t>(p.last_visible_key(i) + 1, 0, S.cols);
    const T* S_i = S.row(i);
    T* P_i = P.row(i);
    for (std::int64_t j = visible; j < S.cols; ++j) P_i[j] = 0;
    if (visible <= 0) {
      m[i] = minus_infinity<T>();
      l[i] = 0;
      continue;
    }
    T m_i = S_i[0];
    for (std::int64_t j = 1; j < visible; ++j) m_i = std::max(m_i, S_i[j]);
    T l_i = 0;
    for (std::int64_t j = 0; j < visible; ++j) {
      P_i[j] = std::exp(S_i[j] - m_i);
      l_i += P_i[j];
    }
    for (std::int64_t j = 0; j < visible; ++j) P_i[j] /= l_i;
    m[i] = m_i;
    l[i] = l_i;
  }
}

// Eq. (12): L_i = log sum_j exp(S_ij) = m_i + log(l_i); -inf for a row that sees no key.
template <class T>
T logsumexp(T m_i, T l_i) {
  // l_i = 0 only for a row that sees no key; a NaN l_i (a NaN or +inf score) gives NaN, as
  // IEEE arithmetic does, and never the -inf of a masked row.
  return l_i == 0 ? minus_infinity<T>() : m_i + std::log(l_i);
}

// Eq. (9), the explicit softmax Jacobian applied to each row:
//   dS_i = (diag(P_i) - P_i P_i^T) dP_i = P_i * dP_i - P_i (P_i^T dP_i).
// The rank-one term is applied as P_i (P_i^T dP_i) (associativity) so that it costs O(S_k),
// but its scalar P_i^T dP_i is computed here from P and dP themselves: nothing comes from the
// forward's O or L (that is the recomputation trick's D = rowsum(dO * O), eq. 17).
// `D_override`, when not null, replaces P_i^T dP_i by D_override[i]: eq. (17) with a given D,
// for diagnosing candidates whose D is wrong.
template <class T>
void softmax_backward_rows(In<T> P, In<T> dP, const std::type_identity_t<T>* D_override,
                           Rows<T> dS) {
  for (std::int64_t i = 0; i < P.rows; ++i) {
    const T* P_i = P.row(i);
    const T* dP_i = dP.row(i);
    T* dS_i = dS.row(i);
    T P_dot_dP = 0;
    if (D_override != nullptr) {
      P_dot_dP = D_override[i];
    } else {
      for (std::int64_t j = 0; j < P.cols; ++j) P_dot_dP += P_i[j] * dP_i[j];
    }
    for (std::int64_t j = 0; j < P.cols; ++j) dS_i[j] = P_i[j] * dP_i[j] - P_i[j] * P_dot_dP;
  }
}

// Eq. (14), the recomputation trick: P_ij = exp(S_ij - L_i) from a given logsumexp L (one per
// row), so that P carries whatever rounding L had when it was stored. Masked scores (-inf)
// give 0. A row with L_i = -inf sees no key: its P_i is 0 (exp(-inf - -inf) would be NaN).
template <class T>
void probabilities_from_lse(In<T> S, const std::type_identity_t<T>* L, Rows<T> P) {
  for (std::int64_t i = 0; i < S.rows; ++i) {
    const T* S_i = S.row(i);
    T* P_i = P.row(i);
    if (L[i] == minus_infinity<T>()) {
      for (std::int64_t j = 0; j < S.cols; ++j) P_i[j] = 0;
      continue;
    }
    for (std::int64_t j = 0; j < S.cols; ++j) P_i[j] = std::exp(S_i[j] - L[i]);
  }
}

// out_i = A_i . B_i for each row, summed in the same order as matmul_bt's dot products. With
// A = dO and B = O this is D = rowsum(dO * O) (Algorithm 2 line 2). For a row that sees a
// single key j, P_ij = 1 and O_i = V_j exactly, so D_i equals dP_ij = dO_i . V_j bit for bit
// and dS_ij = P_ij (dP_ij - D_i) is exactly 0, as in exact arithmetic.
template <class T>
void row_dots(In<T> A, In<T> B, T* out) {
  for (std::int64_t i = 0; i < A.rows; ++i) {
    const T* A_i = A.row(i);
    const T* B_i = B.row(i);
    T dot = 0;
    for (std::int64_t c = 0; c < A.cols; ++c) dot += A_i[c] * B_i[c];
    out[i] = dot;
  }
}

// Eq. (17): dS_ij = P_ij (dP_ij - D_i), with D_i given (one per row).
template <class T>
void recomputed_softmax_backward_rows(In<T> P, In<T> dP, const std::type_identity_t<T>* D,
                                      Rows<T> dS) {
  for (std::int64_t i = 0; i < P.rows; ++i) {
    const T* P_i = P.row(i);
    const T* dP_i = dP.row(i);
    T* dS_i = dS.row(i);
    for (std::int64_t j = 0; j < P.cols; ++j) dS_i[j] = P_i[j] * (dP_i[j] - D[i]);
  }
}

// C = A B: (n x k) times (k x m). The inner loop runs along rows of B and C so it vectorizes.
template <class T>
void matmul(In<T> A, In<T> B, Rows<T> C) {
  for (std::int64_t i = 0; i < A.rows; ++i) {
    T* C_i = C.row(i);
    for (std::int64_t c = 0; c < C.cols; ++c) C_i[c] = 0;
    for (std::int64_t k = 0; k < A.cols; ++k) {
      const T a = A.row(i)[k];
      const T* B_k = B.row(k);
      for (std::int64_t c = 0; c < C.cols; ++c) C_i[c] += a * B_k[c];
    }
  }
}

// C = A B^T: (n x k) times (m x k)^T; each entry is a dot product of two rows.
template <class T>
void matmul_bt(In<T> A, In<T> B, Rows<T> C) {
  for (std::int64_t i = 0; i < A.rows; ++i) {
    const T* A_i = A.row(i);
    for (std::int64_t j = 0; j < B.rows; ++j) {
      const T* B_j = B.row(j);
      T dot = 0;
      for (std::int64_t k = 0; k < A.cols; ++k) dot += A_i[k] * B_j[k];
      C.row(i)[j] = dot;
    }
  }
}

// C += A^T B: (n x m)^T times (n x k). Accumulates, so a group of query heads can sum into
// one dK or dV.
template <class T>
void matmul_at_accumulate(In<T> A, In<T> B, Rows<T> C) {
  for (std::int64_t i = 0; i < A.rows; ++i) {
    const T* A_i = A.row(i);
    const T* B_i = B.row(i);
    for (std::int64_t j = 0; j < A.cols; ++j) {
      const T a = A_i[j];
      T* C_j = C.row(j);
      for (std::int64_t c = 0; c < B.cols; ++c) C_j[c] += a * B_i[c];
    }
  }
}

template <class T>
void scale_in_place(Rows<T> M, T factor) {
  for (std::int64_t i = 0; i < M.rows * M.cols; ++i) M.data[i] *= factor;
}

}  // namespace flashref::reference::naive

// The hot tile kernels: the matrix products of Algorithms 1 and 2 and the row sweeps around
// them (online softmax, exp, dS). One table of function pointers per instruction set
// (kernels_avx512.cpp, kernels_avx2.cpp, kernels_generic.cpp, all from kernels_body.inc);
// kernels() returns the one for this CPU (isa.cpp).
//
// Matrices are row-major float buffers with explicit strides. Products run on whole register
// blocks, so M must be a multiple of kRowPad and N of kColPad (plan.hpp), with the padding
// rows and columns of the operands finite (the loaders keep them at zero). The row sweeps
// touch only the first `rows` x `cols` elements.
#pragma once

#include <cstdint>

#include "plan.hpp"

namespace flashref::cpu::detail {

struct Kernels {
  // C = alpha * op(A) B, or C = diag(C_scale) C + alpha * op(A) B when `accumulate` (C_scale:
  // M finite factors, or null for none), where op(A) is A (M x K, stride lda) or, with
  // `transpose_a`, the transpose of A (A then K x M, stride lda; its columns up to M must be
  // finite). B: K x N (stride ldb), C: M x N (stride ldc).
  // Every element of C is one chain of multiply-adds over k = 0..K-1 in order, whatever the
  // variant: a product and its transpose come out bit for bit the same.
  void (*gemm)(float* C, std::int64_t ldc, const float* A, std::int64_t lda, const float* B,
               std::int64_t ldb, std::int64_t M, std::int64_t N, std::int64_t K, float alpha,
               bool accumulate, bool transpose_a, const float* C_scale);

  // Alg. 1 lines 10-12 on a transposed tile S^T (key rows x query columns, masked entries
  // already -inf), for each query column c:
  //   m_new = max(m[c], max over rows of S^T[.][c]); rescale[c] = exp(m[c] - m_new) (1 when
  //   m_new = -inf); S^T[.][c] <- P~ = exp(S^T[.][c] - m_new) (0 when m_new = -inf);
  //   l[c] = rescale[c] l[c] + sum of P~ over the rows (in row order); m[c] = m_new.
  // `scratch` holds 2 * cols floats.
  void (*online_softmax_cols)(float* S_T, std::int64_t ld, std::int64_t rows, std::int64_t cols,
                              float* m, float* l, float* rescale, float* scratch);

  // Alg. 2 line 12, P = exp(S - L): S[r][c] <- exp(S[r][c] - L[r]) (one L per row) ...
  void (*exp_sub_rows)(float* S, std::int64_t ld, std::int64_t rows, std::int64_t cols,
                       const float* L);
  // ... or S[r][c] <- exp(S[r][c] - L[c]) (one L per column: the transposed tiles).
  void (*exp_sub_cols)(float* S, std::int64_t ld, std::int64_t rows, std::int64_t cols,
                       const float* L);

  // Alg. 2 line 15, dS = P * (dP - D), in place over dP: one D per row ...
  void (*ds_rows)(float* dP, const float* P, std::int64_t ld, std::int64_t rows, std::int64_t cols,
                  const float* D);
  // ... or one D per column (the transposed tiles).
  void (*ds_cols)(float* dP, const float* P, std::int64_t ld, std::int64_t rows, std::int64_t cols,
                  const float* D);

  // Alg. 2 line 2, D = rowsum(dO * O): out[r] = sum over c < cols of A[r][c] B[r][c], summed
  // in the order c = 0, 1, ... with the same multiply-add as gemm. D_i then equals bit for bit
  // the dP_ij = dO_i . V_j that line 14 computes when O_i = V_j, which is exactly the case for
  // a row that sees a single key: its dS = P (dP - D) is then exactly 0, as in exact arithmetic
  // (and as the gold and the baseline have it).
  void (*row_dots)(const float* A, const float* B, std::int64_t ld, std::int64_t rows,
                   std::int64_t cols, float* out);

  // X[r][c] <- X[r][c] rounded to bfloat16 (to_f16 false) or float16 (to_f16 true) precision.
  void (*round_tile)(float* X, std::int64_t ld, std::int64_t rows, std::int64_t cols, bool to_f16);
};

// The kernels for the active instruction set (flashref/cpu/isa.hpp).
const Kernels& kernels();

// Each instruction set's table; null when this build or this CPU has no such kernels.
const Kernels* kernels_generic();
const Kernels* kernels_avx2();
const Kernels* kernels_avx512();

}  // namespace flashref::cpu::detail

// The baseline backward: the recomputation equations (13)-(19), untiled, in float32, from what
// every FlashAttention backward is given: the stored O (in the input dtype) for
// D = rowsum(dO * O), and the stored float32 L for P = exp(S - L). A tiled kernel cannot do
// better than its inputs, so the baseline's error must include the rounding of O and of L:
// otherwise a correct kernel fails the rule whenever those roundings dominate (D's rounding
// survives the cancellation in dS = P (dP - D); L's rounding is a relative error of P that
// grows with |S|). As a low-precision kernel does, P and dS are stored in the input dtype
// before the matmuls that consume them, and the gradients are rounded to grad_dtype on store.
#include <array>

#include <xtensor/xadapt.hpp>

#include "baseline.hpp"
#include "flashref/detail/parallel_errors.hpp"
#include "gather.hpp"
#include "naive.hpp"

namespace flashref::reference {

namespace {

// Writes a (seq x dim) float matrix into batch b, head h of view `v`, rounding to its dtype.
void store_head(const TensorView& v, std::int64_t b, std::int64_t h,
                const xt::xtensor<float, 2>& M) {
  for (std::size_t s = 0; s < M.shape()[0]; ++s) {
    for (std::size_t c = 0; c < M.shape()[1]; ++c) {
      v.store(b, static_cast<std::int64_t>(s), h, static_cast<std::int64_t>(c), M(s, c));
    }
  }
}

}  // namespace

void baseline_backward(const BackwardParams& params) {
  validate(params);
  const Problem& p = params.problem;
  const int threads = thread_count(params.options, p.B * p.H_kv);
  const OperandRounding operand(p.dtype, params.options.allow_tf32);
  const auto size = [](std::int64_t n) { return static_cast<std::size_t>(n); };
  xt::xtensor<float, 4> Q = gather_bhsd<float>(params.q, threads);
  xt::xtensor<float, 4> K = gather_bhsd<float>(params.k, threads);
  xt::xtensor<float, 4> V = gather_bhsd<float>(params.v, threads);
  xt::xtensor<float, 4> dO = gather_bhsd<float>(params.dO, threads);
  const auto L = xt::adapt(params.lse, size(p.B * p.H * p.S_q), xt::no_ownership(),
                           std::array<std::size_t, 3>{size(p.B), size(p.H), size(p.S_q)});

  // Algorithm 2 line 2: D = rowsum(dO * O) from the stored O, before any TF32 rounding of dO:
  // kernels compute D in a float32 elementwise pass, not on tensor cores.
  xt::xtensor<float, 3> D(std::array<std::size_t, 3>{size(p.B), size(p.H), size(p.S_q)});
  {
    const xt::xtensor<float, 4> O = gather_bhsd<float>(params.o, threads);
    for (std::int64_t b = 0; b < p.B; ++b) {
      for (std::int64_t h = 0; h < p.H; ++h) {
        naive::row_dots(naive::head_of(dO, b, h), naive::head_of(O, b, h), &D(size(b), size(h), 0));
      }
    }
  }
  if (operand.tf32) {
    operand.apply(Q);
    operand.apply(K);
    operand.apply(V);
    operand.apply(dO);
  }
  const float scale = static_cast<float>(p.scale);

  // One task per (batch, kv head): it owns dK and dV of that head and sums its group's query
  // heads into float32 accumulators, rounding once on store.
  detail::ParallelErrors errors;  // none may cross the region (parallel_errors.hpp)
#pragma omp parallel num_threads(threads)
  {
    xt::xtensor<float, 2> S, P, dP, dS, dQ, dK, dV;
    errors.run([&] {
      const std::array<std::size_t, 2> scores_shape{size(p.S_q), size(p.S_k)};
      for (xt::xtensor<float, 2>* M : {&S, &P, &dP, &dS}) *M = xt::xtensor<float, 2>(scores_shape);
      dQ = xt::xtensor<float, 2>(std::array<std::size_t, 2>{size(p.S_q), size(p.d)});
      dK = xt::xtensor<float, 2>(std::array<std::size_t, 2>{size(p.S_k), size(p.d)});
      dV = xt::xtensor<float, 2>(std::array<std::size_t, 2>{size(p.S_k), size(p.d)});
    });
#pragma omp for schedule(dynamic)
    for (std::int64_t n = 0; n < p.B * p.H_kv; ++n) errors.run([&] {
      const std::int64_t b = n / p.H_kv, h_kv = n % p.H_kv;
      const auto K_kv = naive::head_of(K, b, h_kv), V_kv = naive::head_of(V, b, h_kv);
      dK.fill(0.0f);
      dV.fill(0.0f);
      for (std::int64_t h = h_kv * p.group_size(); h < (h_kv + 1) * p.group_size(); ++h) {
        const auto Q_h = naive::head_of(Q, b, h), dO_h = naive::head_of(dO, b, h);
        const float* L_h = &L(size(b), size(h), 0);
        const float* D_h = &D(size(b), size(h), 0);
        // Eq. (13)-(14): S = scale * Q K^T, P = exp(S - L) with the stored L.
        naive::masked_scores(Q_h, K_kv, scale, p, naive::rows_of(S));
        naive::probabilities_from_lse(naive::rows_of(S), L_h, naive::rows_of(P));
        // Eq. (16): dP = dO V^T.
        naive::matmul_bt(dO_h, V_kv, naive::rows_of(dP));
        // Eq. (17): dS = P * (dP - D), from the float32 P before it is stored.
        naive::recomputed_softmax_backward_rows(naive::rows_of(P), naive::rows_of(dP), D_h,
                                                naive::rows_of(dS));
        // Eq. (15): dV += P^T dO with P stored in the input dtype.
        operand.apply(P);
        naive::matmul_at_accumulate(naive::rows_of(P), dO_h, naive::rows_of(dV));
        // Eq. (18)-(19): dQ = scale * dS K, dK += dS^T Q, with dS stored in the input dtype.
        operand.apply(dS);
        naive::matmul(naive::rows_of(dS), K_kv, naive::rows_of(dQ));
        naive::scale_in_place(naive::rows_of(dQ), scale);
        store_head(params.dq, b, h, dQ);
        naive::matmul_at_accumulate(naive::rows_of(dS), Q_h, naive::rows_of(dK));
      }
      naive::scale_in_place(naive::rows_of(dK), scale);
      store_head(params.dk, b, h_kv, dK);
      store_head(params.dv, b, h_kv, dV);
    });
  }
  errors.rethrow();
}

}  // namespace flashref::reference

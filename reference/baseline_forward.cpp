// The baseline forward: eq. (4)-(6) and (12) in float32, as a low-precision kernel does it.
#include <array>

#include "baseline.hpp"
#include "flashref/detail/parallel_errors.hpp"
#include "gather.hpp"
#include "naive.hpp"

namespace flashref::reference {

void baseline_forward(const ForwardParams& params) {
  validate(params);
  const Problem& p = params.problem;
  const int threads = thread_count(params.options, p.B * p.H);
  const OperandRounding operand(p.dtype, params.options.allow_tf32);
  // Inputs as stored (exact in float); with TF32 every matmul operand loses its low bits.
  xt::xtensor<float, 4> Q = gather_bhsd<float>(params.q, threads);
  xt::xtensor<float, 4> K = gather_bhsd<float>(params.k, threads);
  xt::xtensor<float, 4> V = gather_bhsd<float>(params.v, threads);
  if (operand.tf32) {
    operand.apply(Q);
    operand.apply(K);
    operand.apply(V);
  }
  const float scale = static_cast<float>(p.scale);
  const auto size = [](std::int64_t n) { return static_cast<std::size_t>(n); };

  detail::ParallelErrors errors;  // none may cross the region (parallel_errors.hpp)
#pragma omp parallel num_threads(threads)
  {
    xt::xtensor<float, 2> S, P, O;
    xt::xtensor<float, 1> m, l;
    errors.run([&] {
      const std::array<std::size_t, 2> scores_shape{size(p.S_q), size(p.S_k)};
      const std::array<std::size_t, 1> rows_shape{size(p.S_q)};
      S = xt::xtensor<float, 2>(scores_shape);
      P = xt::xtensor<float, 2>(scores_shape);
      O = xt::xtensor<float, 2>(std::array<std::size_t, 2>{size(p.S_q), size(p.d)});
      m = xt::xtensor<float, 1>(rows_shape);
      l = xt::xtensor<float, 1>(rows_shape);
    });
#pragma omp for schedule(dynamic)
    for (std::int64_t n = 0; n < p.B * p.H; ++n) errors.run([&] {
      const std::int64_t b = n / p.H, h = n % p.H, h_kv = h / p.group_size();
      // Eq. (4): S = scale * Q K^T in float32, -inf where masked.
      naive::masked_scores(naive::head_of(Q, b, h), naive::head_of(K, b, h_kv), scale, p,
                           naive::rows_of(S));
      // Eq. (5): P = softmax(S) in float32, max-subtracted.
      naive::softmax_rows(naive::rows_of(S), p, naive::rows_of(P), m.data(), l.data());
      // Eq. (6): O = P V with P stored in the input dtype first, as a kernel feeds its matmul.
      operand.apply(P);
      naive::matmul(naive::rows_of(P), naive::head_of(V, b, h_kv), naive::rows_of(O));
      // O rounded to its dtype on store; L = m + log(l) in float32 (eq. 12).
      for (std::int64_t i = 0; i < p.S_q; ++i) {
        for (std::int64_t c = 0; c < p.d; ++c) params.o.store(b, i, h, c, O(size(i), size(c)));
        params.lse[(b * p.H + h) * p.S_q + i] = naive::logsumexp(m(size(i)), l(size(i)));
      }
    });
  }
  errors.rethrow();
}

}  // namespace flashref::reference

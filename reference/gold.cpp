// The gold reference: naive attention in double. See gold.hpp.
#include "flashref/reference/gold.hpp"

#include <array>
#include <sstream>

#include "flashref/detail/parallel_errors.hpp"
#include "flashref/error.hpp"
#include "gather.hpp"
#include "naive.hpp"

namespace flashref::reference {
namespace {

using naive::head_of;
using naive::rows_of;

using Shape3 = std::array<std::size_t, 3>;
using Shape4 = std::array<std::size_t, 4>;

std::size_t size(std::int64_t n) {
  return static_cast<std::size_t>(n);
}

// Throws InvalidArgument(name) unless `t` has shape (B, heads, S, d).
void require_shape(const xt::xtensor<double, 4>& t, const char* name, std::int64_t B,
                   std::int64_t heads, std::int64_t S, std::int64_t d) {
  const auto& s = t.shape();
  if (s[0] != size(B) || s[1] != size(heads) || s[2] != size(S) || s[3] != size(d)) {
    std::ostringstream o;
    o << "shape is (" << s[0] << ", " << s[1] << ", " << s[2] << ", " << s[3]
      << ") but the problem needs (" << B << ", " << heads << ", " << S << ", " << d << ")";
    throw InvalidArgument(name, o.str());
  }
}

// The backward of gold.hpp on inputs already in double; `D` (nullable) replaces P_i^T dP_i in
// eq. (9) by a given D_i.
GoldBackward backward(const Problem& p, const xt::xtensor<double, 4>& Q,
                      const xt::xtensor<double, 4>& K, const xt::xtensor<double, 4>& V,
                      const xt::xtensor<double, 4>& dO, const xt::xtensor<double, 3>* D,
                      int threads) {
  GoldBackward out;
  out.dQ = xt::zeros<double>(Shape4{size(p.B), size(p.H), size(p.S_q), size(p.d)});
  out.dK = xt::zeros<double>(Shape4{size(p.B), size(p.H_kv), size(p.S_k), size(p.d)});
  out.dV = xt::zeros<double>(Shape4{size(p.B), size(p.H_kv), size(p.S_k), size(p.d)});

  // One task per (batch, kv head): it owns dK and dV of that head and sums the contributions
  // of the query heads of its group in a fixed order, without atomics.
  // Exceptions (a scratch matrix that cannot be allocated) are kept and rethrown after the
  // region: none may cross it (parallel_errors.hpp).
  detail::ParallelErrors errors;
#pragma omp parallel num_threads(threads)
  {
    const std::array<std::size_t, 2> scores_shape{size(p.S_q), size(p.S_k)};
    const std::array<std::size_t, 1> rows_shape{size(p.S_q)};
    xt::xtensor<double, 2> S, P, dP, dS;
    xt::xtensor<double, 1> m, l;
    errors.run([&] {
      for (xt::xtensor<double, 2>* M : {&S, &P, &dP, &dS}) *M = xt::xtensor<double, 2>(scores_shape);
      m = xt::xtensor<double, 1>(rows_shape);
      l = xt::xtensor<double, 1>(rows_shape);
    });
#pragma omp for schedule(dynamic)
    for (std::int64_t n = 0; n < p.B * p.H_kv; ++n) errors.run([&] {
      const std::int64_t b = n / p.H_kv, h_kv = n % p.H_kv;
      const auto K_kv = head_of(K, b, h_kv), V_kv = head_of(V, b, h_kv);
      const auto dK_kv = head_of(out.dK, b, h_kv), dV_kv = head_of(out.dV, b, h_kv);
      for (std::int64_t h = h_kv * p.group_size(); h < (h_kv + 1) * p.group_size(); ++h) {
        const auto Q_h = head_of(Q, b, h), dO_h = head_of(dO, b, h);
        // Eq. (4)-(5): S = scale * Q K^T (masked), P = softmax(S).
        naive::masked_scores(Q_h, K_kv, p.scale, p, rows_of(S));
        naive::softmax_rows(rows_of(S), p, rows_of(P), m.data(), l.data());
        // Eq. (7): dV = P^T dO, summed over the group.
        naive::matmul_at_accumulate(rows_of(P), dO_h, dV_kv);
        // Eq. (8): dP = dO V^T.
        naive::matmul_bt(dO_h, V_kv, rows_of(dP));
        // Eq. (9): dS_i = (diag(P_i) - P_i P_i^T) dP_i.
        const double* D_h = D != nullptr ? &(*D)(size(b), size(h), 0) : nullptr;
        naive::softmax_backward_rows(rows_of(P), rows_of(dP), D_h, rows_of(dS));
        // Eq. (10): dQ = scale * dS K.
        const auto dQ_h = head_of(out.dQ, b, h);
        naive::matmul(rows_of(dS), K_kv, dQ_h);
        naive::scale_in_place(dQ_h, p.scale);
        // Eq. (11): dK = scale * dS^T Q, summed over the group (scaled once, below).
        naive::matmul_at_accumulate(rows_of(dS), Q_h, dK_kv);
      }
      naive::scale_in_place(dK_kv, p.scale);
    });
  }
  errors.rethrow();
  return out;
}

GoldBackward backward(const BackwardParams& params, const xt::xtensor<double, 3>* D) {
  validate_inputs(params);
  const Problem& p = params.problem;
  const int threads = thread_count(params.options, p.B * p.H_kv);
  return backward(p, gather_bhsd<double>(params.q, threads), gather_bhsd<double>(params.k, threads),
                  gather_bhsd<double>(params.v, threads), gather_bhsd<double>(params.dO, threads),
                  D, threads);
}

GoldForward forward(const Problem& p, const xt::xtensor<double, 4>& Q,
                    const xt::xtensor<double, 4>& K, const xt::xtensor<double, 4>& V,
                    int threads) {
  const Shape3 rows_shape{size(p.B), size(p.H), size(p.S_q)};
  GoldForward out;
  out.O = xt::zeros<double>(Shape4{size(p.B), size(p.H), size(p.S_q), size(p.d)});
  out.L = xt::zeros<double>(rows_shape);
  out.m = xt::zeros<double>(rows_shape);
  out.l = xt::zeros<double>(rows_shape);

  detail::ParallelErrors errors;  // none may cross the region (parallel_errors.hpp)
#pragma omp parallel num_threads(threads)
  {
    const std::array<std::size_t, 2> scores_shape{size(p.S_q), size(p.S_k)};
    xt::xtensor<double, 2> S, P;
    errors.run([&] {
      S = xt::xtensor<double, 2>(scores_shape);
      P = xt::xtensor<double, 2>(scores_shape);
    });
#pragma omp for schedule(dynamic)
    for (std::int64_t n = 0; n < p.B * p.H; ++n) errors.run([&] {
      const std::int64_t b = n / p.H, h = n % p.H, h_kv = h / p.group_size();
      double* m = &out.m(size(b), size(h), 0);
      double* l = &out.l(size(b), size(h), 0);
      // Eq. (4): S = scale * Q K^T, -inf where masked.
      naive::masked_scores(head_of(Q, b, h), head_of(K, b, h_kv), p.scale, p, rows_of(S));
      // Eq. (5): P = softmax(S), keeping the row max m and the row sum l.
      naive::softmax_rows(rows_of(S), p, rows_of(P), m, l);
      // Eq. (6): O = P V.
      naive::matmul(rows_of(P), head_of(V, b, h_kv), head_of(out.O, b, h));
      // Eq. (12): L = m + log(l).
      for (std::int64_t i = 0; i < p.S_q; ++i)
        out.L(size(b), size(h), size(i)) = naive::logsumexp(m[i], l[i]);
    });
  }
  errors.rethrow();
  return out;
}

}  // namespace

GoldForward gold_forward(const ForwardParams& params) {
  validate_inputs(params);
  const Problem& p = params.problem;
  const int threads = thread_count(params.options, p.B * p.H);
  return forward(p, gather_bhsd<double>(params.q, threads), gather_bhsd<double>(params.k, threads),
                 gather_bhsd<double>(params.v, threads), threads);
}

GoldForward gold_forward(const Problem& p, const xt::xtensor<double, 4>& Q,
                         const xt::xtensor<double, 4>& K, const xt::xtensor<double, 4>& V) {
  validate(p);
  require_shape(Q, "Q", p.B, p.H, p.S_q, p.d);
  require_shape(K, "K", p.B, p.H_kv, p.S_k, p.d);
  require_shape(V, "V", p.B, p.H_kv, p.S_k, p.d);
  return forward(p, Q, K, V, thread_count(ExecutionOptions{}, p.B * p.H));
}

GoldBackward gold_backward(const BackwardParams& params) {
  return backward(params, nullptr);
}

GoldBackward gold_backward(const Problem& p, const xt::xtensor<double, 4>& Q,
                           const xt::xtensor<double, 4>& K, const xt::xtensor<double, 4>& V,
                           const xt::xtensor<double, 4>& dO) {
  validate(p);
  require_shape(Q, "Q", p.B, p.H, p.S_q, p.d);
  require_shape(K, "K", p.B, p.H_kv, p.S_k, p.d);
  require_shape(V, "V", p.B, p.H_kv, p.S_k, p.d);
  require_shape(dO, "dO", p.B, p.H, p.S_q, p.d);
  return backward(p, Q, K, V, dO, nullptr, thread_count(ExecutionOptions{}, p.B * p.H_kv));
}

GoldBackward gold_backward_with_D(const BackwardParams& params, const xt::xtensor<double, 3>& D) {
  validate_inputs(params);
  const Problem& p = params.problem;
  const auto& s = D.shape();
  if (s[0] != size(p.B) || s[1] != size(p.H) || s[2] != size(p.S_q)) {
    std::ostringstream o;
    o << "shape is (" << s[0] << ", " << s[1] << ", " << s[2]
      << ") but the problem needs (B, H, S_q) = (" << p.B << ", " << p.H << ", " << p.S_q << ")";
    throw InvalidArgument("D", o.str());
  }
  return backward(params, &D);
}

}  // namespace flashref::reference

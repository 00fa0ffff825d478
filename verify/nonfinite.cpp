#include "flashref/verify/nonfinite.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <sstream>

#include "flashref/detail/parallel_errors.hpp"

namespace flashref::verify {

std::string NonFiniteCount::text() const {
  std::ostringstream o;
  o << tensor << " holds ";
  const char* sep = "";
  auto item = [&](std::int64_t n, const char* what) {
    if (n == 0) return;
    o << sep << n << " " << what;
    sep = ", ";
  };
  item(nan, "NaN");
  item(pos_inf, "+inf");
  item(neg_inf, "-inf");
  o << " (first at [";
  for (std::size_t k = 0; k < first.size(); ++k) o << (k ? "," : "") << first[k];
  o << "] = " << first_value << ")";
  return o.str();
}

namespace {

std::vector<std::int64_t> unravel(std::size_t flat, const xt::xarray<double>::shape_type& shape) {
  std::vector<std::int64_t> index(shape.size());
  for (std::size_t k = shape.size(); k-- > 0;) {
    index[k] = static_cast<std::int64_t>(flat % shape[k]);
    flat /= shape[k];
  }
  return index;
}

void tally(NonFiniteCount& c, double v, std::size_t flat,
           const xt::xarray<double>::shape_type& shape) {
  if (std::isnan(v)) {
    ++c.nan;
  } else if (v > 0) {
    ++c.pos_inf;
  } else {
    ++c.neg_inf;
  }
  if (c.first.empty()) {
    c.first = unravel(flat, shape);
    c.first_value = v;
  }
}

}  // namespace

std::optional<NonFiniteCount> count_nonfinite(const std::string& tensor,
                                              const xt::xarray<double>& values) {
  NonFiniteCount c;
  c.tensor = tensor;
  for (std::size_t n = 0; n < values.size(); ++n) {
    const double v = values.flat(n);
    if (!std::isfinite(v)) tally(c, v, n, values.shape());
  }
  if (c.total() == 0) return std::nullopt;
  return c;
}

std::vector<NonFiniteCount> nonfinite_inputs(const ProblemData& data) {
  std::vector<NonFiniteCount> out;
  const std::pair<const char*, const HostTensor*> inputs[] = {
      {"Q", &data.q}, {"K", &data.k}, {"V", &data.v}, {"dO", &data.dO}};
  for (const auto& [name, t] : inputs) {
    if (t->empty()) continue;
    const xt::xarray<double> values = t->to_double();
    if (std::optional<NonFiniteCount> c = count_nonfinite(name, values)) out.push_back(*c);
  }
  return out;
}

std::vector<NonFiniteCount> nonfinite_outputs(const TensorSet& outputs, const Problem& problem) {
  std::vector<NonFiniteCount> out;
  for (const auto& [id, values] : outputs) {
    NonFiniteCount c;
    c.tensor = std::string(tensor_name(id));
    const auto& shape = values.shape();
    for (std::size_t n = 0; n < values.size(); ++n) {
      const double v = values.flat(n);
      if (std::isfinite(v)) continue;
      if (id == TensorId::L && v == -std::numeric_limits<double>::infinity()) {
        const auto row = static_cast<std::int64_t>(n % shape[2]);
        if (problem.last_visible_key(row) < 0) continue;  // a row that sees no key
      }
      tally(c, v, n, shape);
    }
    if (c.total() > 0) out.push_back(std::move(c));
  }
  return out;
}

double max_abs_score(const ProblemData& data) {
  const Problem& p = data.problem;
  const xt::xtensor<double, 4> Q = data.q.to_double(), K = data.k.to_double();
  double max_S = 0.0;
  detail::ParallelErrors errors;  // none may cross the region (parallel_errors.hpp)
#pragma omp parallel for reduction(max : max_S) schedule(dynamic)
  for (std::int64_t t = 0; t < p.B * p.H; ++t) {
    errors.run([&] {
      const auto b = static_cast<std::size_t>(t / p.H), h = static_cast<std::size_t>(t % p.H);
      const auto h_kv = static_cast<std::size_t>(static_cast<std::int64_t>(h) / p.group_size());
      for (std::int64_t i = 0; i < p.S_q; ++i) {
        const std::int64_t last = std::min(p.last_visible_key(i), p.S_k - 1);
        const double* q = &Q(b, h, static_cast<std::size_t>(i), 0);
        for (std::int64_t j = 0; j <= last; ++j) {
          const double* k = &K(b, h_kv, static_cast<std::size_t>(j), 0);
          double dot = 0.0;
          for (std::int64_t c = 0; c < p.d; ++c) dot += q[c] * k[c];
          const double S = std::fabs(p.scale * dot);
          if (S > max_S) max_S = S;  // NaN scores are the inputs' note, not this one's
        }
      }
    });
  }
  errors.rethrow();
  return max_S;
}

std::vector<std::string> input_notes(const ProblemData& data, double max_abs_score) {
  std::vector<std::string> notes;
  for (const NonFiniteCount& c : nonfinite_inputs(data)) {
    notes.push_back("input " + c.text() +
                    ": the gold follows IEEE arithmetic, so the rows that read it are NaN or "
                    "infinite in the gold too, and a candidate must match them");
  }
  const double S = max_abs_score;
  const auto f32_max = static_cast<double>(std::numeric_limits<float>::max());
  if (S > f32_max) {
    std::ostringstream o;
    o << "scores reach |S| = " << S << ", beyond float32's largest value (" << f32_max
      << "): a kernel that holds S in float32 cannot represent them, so its outputs may be "
         "infinite or NaN where the gold (double) is finite; lower --scale or the inputs";
    notes.push_back(o.str());
  } else if (S > f32_max / std::numbers::log2e) {
    // Kernels on exp2 (the cuda backend's, FlashAttention's) hold S log2(e) in float32.
    std::ostringstream o;
    o << "scores reach |S| = " << S << ": they fit float32, but S * log2(e) does not (above "
      << f32_max / std::numbers::log2e
      << "), so a kernel that computes exp as exp2 of S log2(e) (the cuda backend's) gives "
         "infinite or NaN outputs where the gold is finite";
    notes.push_back(o.str());
  } else if (S > 0x1p31 / std::numbers::log2e) {
    // The fold (docs/verification.md, "The sm90 16-bit forward's fold"): 2^(fma(s, c, -m')) gives
    // the row's largest score the exponent c max s - fl(c max s), up to half an ulp of m', which
    // from |m'| = 2^31 on can leave float32's exponent range.
    std::ostringstream o;
    o << "scores reach |S| = " << S << ": above " << 0x1p31 / std::numbers::log2e
      << " (2^31 / log2(e)), a kernel that folds the scale into exp2's argument (the cuda "
         "backend's sm90 bf16/f16 forward, with a positive scale) can lose a row's largest score "
         "to the rounding of its row max, and the row then sees no key (L = -inf, O = 0) or is "
         "NaN where the gold is finite";
    notes.push_back(o.str());
  }
  return notes;
}

std::vector<std::string> nonfinite_warnings(const TensorSet& outputs, const ProblemData& data) {
  std::vector<std::string> warnings;
  for (const NonFiniteCount& c : nonfinite_outputs(outputs, data.problem)) {
    warnings.push_back("output " + c.text() + "; indices in (B, H, S, d) order, (B, H, S_q) for L");
  }
  if (warnings.empty()) return warnings;
  const std::vector<std::string> causes = input_notes(data, max_abs_score(data));
  if (causes.empty()) {
    warnings.push_back(
        "the inputs are finite and the scores fit float32: this is a bug of the "
        "backend; please report it with these inputs");
  }
  for (const std::string& n : causes) warnings.push_back(n);
  return warnings;
}

}  // namespace flashref::verify

// The diagnosis: builds the problem the hypotheses are tested on, lets every hypothesis family
// propose its variants, keeps per failed tensor the one that fits best, then looks for location
// patterns in what no hypothesis explains. See diagnosis.hpp.
#include "flashref/verify/diagnosis/diagnose.hpp"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <limits>
#include <sstream>

#include <xtensor/xview.hpp>

#include "internal.hpp"
#include "flashref/error.hpp"
#include "flashref/verify/npy.hpp"

namespace flashref::verify {
namespace diagnosis {

bool Context::failed_any(std::initializer_list<TensorId> ids) const {
  for (TensorId id : ids) {
    if (std::find(failed.begin(), failed.end(), id) != failed.end()) return true;
  }
  return false;
}

double relative_distance(const xt::xarray<double>& c, const xt::xarray<double>& r) {
  double diff = 0.0, norm = 0.0;
  for (std::size_t n = 0; n < r.size(); ++n) {
    const double cn = c.flat(n), rn = r.flat(n);
    if (std::isfinite(rn)) norm += rn * rn;
    if (cn == rn) continue;
    if (!std::isfinite(cn) || !std::isfinite(rn)) return std::numeric_limits<double>::infinity();
    diff += (cn - rn) * (cn - rn);
  }
  if (diff == 0.0) return 0.0;
  if (norm == 0.0) return std::numeric_limits<double>::infinity();
  return std::sqrt(diff / norm);
}

std::string format_number(double x) {
  std::ostringstream s;
  s << std::setprecision(6) << x;
  return s.str();
}

ForwardParams forward_params(const Context& ctx, const Problem& problem) {
  ForwardParams p;
  p.problem = problem;
  p.q = ctx.q;
  p.k = ctx.k;
  p.v = ctx.v;
  return p;
}

BackwardParams backward_params(const Context& ctx, const Problem& problem) {
  BackwardParams p;
  p.problem = problem;
  p.q = ctx.q;
  p.k = ctx.k;
  p.v = ctx.v;
  p.dO = ctx.dO;
  return p;
}

Tensors recompute(const Context& ctx, const Problem& changed) {
  Tensors t;
  if (ctx.needs_forward()) {
    reference::GoldForward f = reference::gold_forward(forward_params(ctx, changed));
    t[TensorId::O] = std::move(f.O);
    t[TensorId::L] = std::move(f.L);
  }
  if (ctx.needs_backward()) {
    reference::GoldBackward b = reference::gold_backward(backward_params(ctx, changed));
    t[TensorId::dQ] = std::move(b.dQ);
    t[TensorId::dK] = std::move(b.dK);
    t[TensorId::dV] = std::move(b.dV);
  }
  return t;
}

}  // namespace diagnosis

namespace {

using diagnosis::Context;
using diagnosis::Hypothesis;
using diagnosis::relative_distance;

// Above this many multiply-adds per Q K^T (B * H * S_q * S_k * d), hypotheses are tested on
// batch 0 and key/value head 0's group only: each of the dozen recomputations of the gold then
// stays well under a second.
constexpr std::int64_t kWholeProblemBudget = std::int64_t{1} << 26;

// A candidate must match a hypothesis this many times more closely than the correct answer.
constexpr double kFarBetter = 10.0;

// How closely a candidate computed in the tensor's dtype can be expected to match a double
// recomputation: 4 times the baseline's own error, and never less than 16 unit roundoffs.
double tolerance(TensorId id, const Problem& p, double baseline_rel_l2) {
  const double unit_roundoff = std::ldexp(1.0, -(mantissa_bits(output_dtype(id, p)) + 1));
  return std::max(4.0 * baseline_rel_l2, 16.0 * unit_roundoff);
}

std::vector<std::size_t> expected_shape(TensorId id, const Problem& p) {
  auto n = [](std::int64_t x) { return static_cast<std::size_t>(x); };
  switch (id) {
    case TensorId::O:
    case TensorId::dQ:
      return {n(p.B), n(p.H), n(p.S_q), n(p.d)};
    case TensorId::L:
      return {n(p.B), n(p.H), n(p.S_q)};
    case TensorId::dK:
    case TensorId::dV:
      return {n(p.B), n(p.H_kv), n(p.S_k), n(p.d)};
  }
  return {};
}

// Batch 0 and the first `heads` heads of a canonical (B, H, S[, d]) tensor.
xt::xarray<double> first_heads(const xt::xarray<double>& a, std::int64_t heads) {
  const auto h = static_cast<std::size_t>(heads);
  if (a.dimension() == 3)
    return xt::view(a, xt::range(std::size_t{0}, std::size_t{1}), xt::range(std::size_t{0}, h),
                    xt::all());
  return xt::view(a, xt::range(std::size_t{0}, std::size_t{1}), xt::range(std::size_t{0}, h),
                  xt::all(), xt::all());
}

Context make_context(const ProblemData& data, const std::vector<CandidateTensor>& candidate,
                     std::string& scope_note) {
  Context ctx;
  ctx.problem = data.problem;
  ctx.q = data.q.view();
  ctx.k = data.k.view();
  ctx.v = data.v.view();
  if (!data.dO.empty()) ctx.dO = data.dO.view();
  for (const CandidateTensor& c : candidate) {
    if (c.failed) ctx.failed.push_back(c.id);
  }
  std::sort(ctx.failed.begin(), ctx.failed.end());

  const Problem& p = data.problem;
  const bool slice =
      p.B * p.H * p.S_q * p.S_k * p.d > kWholeProblemBudget && (p.B > 1 || p.H_kv > 1);
  if (slice) {
    // Batch 0 and kv head 0 start at offset 0 in every view, so only the extents change.
    ctx.problem.B = 1;
    ctx.problem.H = p.group_size();
    ctx.problem.H_kv = 1;
    for (TensorView* v : {&ctx.q, &ctx.dO}) {
      v->batch = 1;
      v->heads = p.group_size();
    }
    for (TensorView* v : {&ctx.k, &ctx.v}) {
      v->batch = 1;
      v->heads = 1;
    }
    scope_note = "hypotheses tested on batch 0 and the " + std::to_string(p.group_size()) +
                 " query head(s) of key/value head 0 (the whole problem is large)";
  }

  ctx.forward = reference::gold_forward(diagnosis::forward_params(ctx, ctx.problem));
  ctx.gold[TensorId::O] = ctx.forward.O;
  ctx.gold[TensorId::L] = ctx.forward.L;
  if (ctx.needs_backward()) {
    ctx.backward = reference::gold_backward(diagnosis::backward_params(ctx, ctx.problem));
    ctx.gold[TensorId::dQ] = ctx.backward->dQ;
    ctx.gold[TensorId::dK] = ctx.backward->dK;
    ctx.gold[TensorId::dV] = ctx.backward->dV;
  }
  for (const CandidateTensor& c : candidate) {
    const bool kv = c.id == TensorId::dK || c.id == TensorId::dV;
    ctx.candidate[c.id] = slice ? first_heads(c.values, kv ? 1 : p.group_size()) : c.values;
  }
  return ctx;
}

std::vector<Hypothesis> all_hypotheses(const Context& ctx) {
  std::vector<Hypothesis> all;
  for (auto family : {diagnosis::scale_hypotheses, diagnosis::mask_hypotheses,
                      diagnosis::lse_hypotheses, diagnosis::output_hypotheses,
                      diagnosis::gradient_scale_hypotheses, diagnosis::d_vector_hypotheses,
                      diagnosis::gqa_hypotheses, diagnosis::diagonal_hypotheses}) {
    for (Hypothesis& h : family(ctx)) all.push_back(std::move(h));
  }
  return all;
}

struct Fit {
  std::size_t hypothesis = 0;
  double to_hypothesis = 0.0;  // relative L2 distance of the candidate to the variant
  double to_gold = 0.0;        // ... and to the correct answer
};

// The hypothesis that explains tensor `id` best, if any does. Among those fitting about
// equally well (within 1.5x of the best) the first in kDiagnosisCodes order wins: the
// simpler explanation of the same numbers.
std::optional<Fit> best_fit(const Context& ctx, const std::vector<Hypothesis>& hypotheses,
                            const CandidateTensor& c) {
  const xt::xarray<double>& cand = ctx.candidate.at(c.id);
  const xt::xarray<double>& gold = ctx.gold.at(c.id);
  const double to_gold = relative_distance(cand, gold);
  const double tol = tolerance(c.id, ctx.problem, c.baseline_rel_l2);
  std::vector<Fit> fits;
  for (std::size_t n = 0; n < hypotheses.size(); ++n) {
    const auto it = hypotheses[n].variant.find(c.id);
    if (it == hypotheses[n].variant.end()) continue;
    // A mistake that does not change this tensor cannot explain its error.
    if (relative_distance(it->second, gold) <= tol) continue;
    const double d = relative_distance(cand, it->second);
    if (d <= tol && d * kFarBetter <= to_gold) fits.push_back({n, d, to_gold});
  }
  if (fits.empty()) return std::nullopt;
  double best = fits.front().to_hypothesis;
  for (const Fit& f : fits) best = std::min(best, f.to_hypothesis);
  for (const Fit& f : fits) {
    if (f.to_hypothesis <= 1.5 * best) return f;
  }
  return std::nullopt;
}

std::size_t code_rank(const std::string& code) {
  const auto* it = std::find(std::begin(kDiagnosisCodes), std::end(kDiagnosisCodes), code);
  return static_cast<std::size_t>(it - std::begin(kDiagnosisCodes));
}

}  // namespace

Diagnosis diagnose(const ProblemData& data, const std::vector<CandidateTensor>& candidate,
                   const GoldOutputs& gold) {
  for (const CandidateTensor& c : candidate) {
    const auto want = expected_shape(c.id, data.problem);
    const std::vector<std::size_t> got(c.values.shape().begin(), c.values.shape().end());
    if (got != want) {
      throw InvalidArgument(
          "candidate " + std::string(tensor_name(c.id)),
          "shape is " + shape_string(got) + " but the problem needs " + shape_string(want));
    }
  }
  for (const CandidateTensor& c : candidate) {
    if (seq_axis(c.id) == SeqAxis::key || c.id == TensorId::dQ) {
      if (data.dO.empty()) {
        throw InvalidArgument("dO", "diagnosing " + std::string(tensor_name(c.id)) +
                                        " needs dO, the gradient of the output");
      }
    }
  }
  Diagnosis result;
  if (std::none_of(candidate.begin(), candidate.end(),
                   [](const CandidateTensor& c) { return c.failed; })) {
    return result;
  }

  const Context ctx = make_context(data, candidate, result.scope_note);
  const std::vector<Hypothesis> hypotheses = all_hypotheses(ctx);

  // Per failed tensor the best hypothesis; tensors explained by the same code become one
  // finding (its explanation is that of the first).
  std::map<std::string, Finding> by_code;
  std::vector<TensorId> explained;
  for (const CandidateTensor& c : candidate) {
    if (!c.failed) continue;
    const std::optional<Fit> fit = best_fit(ctx, hypotheses, c);
    if (!fit) continue;
    explained.push_back(c.id);
    const Hypothesis& h = hypotheses[fit->hypothesis];
    Finding& f = by_code[h.code];
    if (f.code.empty()) {
      f.code = h.code;
      f.explanation = h.explanation;
      f.detail = h.detail;
      f.detail["fit"] = nlohmann::json::object();
    }
    f.tensors.push_back(c.id);
    f.detail["fit"][std::string(tensor_name(c.id))] = {{"rel_l2_to_hypothesis", fit->to_hypothesis},
                                                       {"rel_l2_to_correct", fit->to_gold}};
  }
  for (auto& [code, finding] : by_code) result.findings.push_back(std::move(finding));

  std::vector<TensorId> located;
  if (std::optional<Finding> f = diagnosis::nan_masked_rows(candidate, gold)) {
    located = f->tensors;
    result.findings.push_back(std::move(*f));
  }
  for (const CandidateTensor& c : candidate) {
    const auto seen = [&](const std::vector<TensorId>& ids) {
      return std::find(ids.begin(), ids.end(), c.id) != ids.end();
    };
    if (!c.failed || seen(explained) || seen(located)) continue;
    const xt::xtensor<double, 4>* g4 = nullptr;
    switch (c.id) {
      case TensorId::O:
        g4 = &gold.O;
        break;
      case TensorId::dQ:
        g4 = &gold.dQ;
        break;
      case TensorId::dK:
        g4 = &gold.dK;
        break;
      case TensorId::dV:
        g4 = &gold.dV;
        break;
      case TensorId::L:
        break;
    }
    const xt::xarray<double> g =
        g4 != nullptr ? xt::xarray<double>(*g4) : xt::xarray<double>(gold.L);
    if (std::optional<Finding> f = diagnosis::tail_rows(c, g)) {
      // One tail finding per tile size pattern: merge tensors that share it.
      auto same =
          std::find_if(result.findings.begin(), result.findings.end(), [&](const Finding& x) {
            return x.code == f->code &&
                   x.detail.value("tile_sizes", nlohmann::json()) ==
                       f->detail.value("tile_sizes", nlohmann::json()) &&
                   x.detail.value("axis", "") == f->detail.value("axis", "");
          });
      if (same != result.findings.end()) {
        same->tensors.push_back(c.id);
      } else {
        result.findings.push_back(std::move(*f));
      }
    }
  }
  std::stable_sort(
      result.findings.begin(), result.findings.end(),
      [](const Finding& a, const Finding& b) { return code_rank(a.code) < code_rank(b.code); });
  return result;
}

nlohmann::json to_json(const Finding& f) {
  nlohmann::json tensors = nlohmann::json::array();
  for (TensorId id : f.tensors) tensors.push_back(std::string(tensor_name(id)));
  nlohmann::json j = {{"code", f.code}, {"tensors", tensors}, {"explanation", f.explanation}};
  for (auto it = f.detail.begin(); it != f.detail.end(); ++it) j[it.key()] = it.value();
  return j;
}

nlohmann::json to_json(const Diagnosis& d) {
  nlohmann::json findings = nlohmann::json::array();
  for (const Finding& f : d.findings) findings.push_back(to_json(f));
  nlohmann::json j = {{"findings", findings}};
  if (!d.scope_note.empty()) j["scope"] = d.scope_note;
  return j;
}

}  // namespace flashref::verify

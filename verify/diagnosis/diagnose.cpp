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

namespace flashref::verify::diagnosis {

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

TensorSet recompute(const Context& ctx, const Problem& changed) {
  TensorSet t;
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

namespace {

// Above this many multiply-adds per Q K^T (B * H * S_q * S_k * d), hypotheses are tested on
// batch 0 and key/value head 0's group only: each of the dozen recomputations of the gold then
// stays well under a second.
constexpr std::int64_t kWholeProblemBudget = std::int64_t{1} << 26;

// A candidate must match a hypothesis this many times more closely than the correct answer.
constexpr double kFarBetter = 10.0;

// How closely a candidate computed in the tensor's dtype can be expected to match a double
// recomputation: 4 times the baseline's own error, and never less than 16 unit roundoffs.
double tolerance(TensorId id, const Problem& p, double baseline_rel_l2, DType lse_dtype) {
  const double unit_roundoff =
      std::ldexp(1.0, -(mantissa_bits(output_dtype(id, p, lse_dtype)) + 1));
  return std::max(4.0 * baseline_rel_l2, 16.0 * unit_roundoff);
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

// One tensor the candidate produced, and what the rule said about it.
struct Judged {
  TensorId id = TensorId::O;
  const xt::xarray<double>* values = nullptr;  // the candidate's, canonical layout
  bool failed = false;                         // the rule's verdict
  double limit = 0.0;            // the largest |candidate - gold| per element the rule allows
  double baseline_rel_l2 = 0.0;  // the baseline's relative L2 error against the gold
  std::int64_t tile = 0;         // the tile its worst index was placed in (rows)
};

Context make_context(const ProblemData& data, const TensorSet& candidate,
                     const std::vector<Judged>& judged, std::string& scope_note) {
  Context ctx;
  ctx.problem = data.problem;
  ctx.q = data.q.view();
  ctx.k = data.k.view();
  ctx.v = data.v.view();
  if (!data.dO.empty()) ctx.dO = data.dO.view();
  for (const Judged& c : judged) {
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

  ctx.forward = reference::gold_forward(forward_params(ctx, ctx.problem));
  ctx.gold[TensorId::O] = ctx.forward.O;
  ctx.gold[TensorId::L] = ctx.forward.L;
  if (ctx.needs_backward()) {
    ctx.backward = reference::gold_backward(backward_params(ctx, ctx.problem));
    ctx.gold[TensorId::dQ] = ctx.backward->dQ;
    ctx.gold[TensorId::dK] = ctx.backward->dK;
    ctx.gold[TensorId::dV] = ctx.backward->dV;
  }
  for (const auto& [id, values] : candidate) {
    const bool kv = id == TensorId::dK || id == TensorId::dV;
    ctx.candidate[id] = slice ? first_heads(values, kv ? 1 : p.group_size()) : values;
  }
  return ctx;
}

std::vector<Hypothesis> all_hypotheses(const Context& ctx) {
  std::vector<Hypothesis> all;
  for (auto family :
       {scale_hypotheses, mask_hypotheses, key_padding_hypotheses, lse_hypotheses,
        output_hypotheses, epsilon_hypotheses, gradient_scale_hypotheses, d_vector_hypotheses,
        d_per_key_tile_hypotheses, gqa_hypotheses, diagonal_hypotheses}) {
    for (Hypothesis& h : family(ctx)) all.push_back(std::move(h));
  }
  return all;
}

struct Fit {
  std::size_t hypothesis = 0;
  double to_hypothesis = 0.0;  // relative L2 distance of the candidate to the variant
  double to_gold = 0.0;        // ... and to the correct answer
};

// How far the candidate's tensor `c` is from hypothesis h's variant of it, when h explains it:
// the variant moves the tensor (more than the tolerance from the gold), and the candidate sits
// within the tolerance of it and kFarBetter times closer to it than to the gold.
std::optional<double> fit_distance(const Context& ctx, const Hypothesis& h, const Judged& c,
                                   DType lse_dtype) {
  if (!h.variant.has(c.id)) return std::nullopt;
  const xt::xarray<double>& cand = ctx.candidate.at(c.id);
  const xt::xarray<double>& gold = ctx.gold.at(c.id);
  const double tol = tolerance(c.id, ctx.problem, c.baseline_rel_l2, lse_dtype);
  const xt::xarray<double>& variant = h.variant.at(c.id);
  // A mistake that does not change this tensor cannot explain its error.
  if (relative_distance(variant, gold) <= tol) return std::nullopt;
  const double d = relative_distance(cand, variant);
  if (d <= tol && d * kFarBetter <= relative_distance(cand, gold)) return d;
  return std::nullopt;
}

// The hypothesis that explains tensor `c` best, if any does. Among those fitting about
// equally well (within 1.5x of the best) the first in kDiagnosisCodes order wins: the
// simpler explanation of the same numbers. An all_or_nothing hypothesis must also fit every
// other failed tensor of its variant.
std::optional<Fit> best_fit(const Context& ctx, const std::vector<Hypothesis>& hypotheses,
                            const Judged& c, const std::vector<Judged>& judged, DType lse_dtype) {
  const double to_gold = relative_distance(ctx.candidate.at(c.id), ctx.gold.at(c.id));
  std::vector<Fit> fits;
  for (std::size_t n = 0; n < hypotheses.size(); ++n) {
    const std::optional<double> d = fit_distance(ctx, hypotheses[n], c, lse_dtype);
    if (!d) continue;
    const bool fits_the_rest =
        !hypotheses[n].all_or_nothing ||
        std::all_of(judged.begin(), judged.end(), [&](const Judged& other) {
          return !other.failed || other.id == c.id || !hypotheses[n].variant.has(other.id) ||
                 fit_distance(ctx, hypotheses[n], other, lse_dtype).has_value();
        });
    if (fits_the_rest) fits.push_back({n, *d, to_gold});
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

Diagnosis diagnose(const ProblemData& data, const TensorSet& candidate,
                   const std::vector<TensorReport>& judged_reports, const TensorSet& gold,
                   const Precision& precision) {
  require_canonical_shapes(candidate, data.problem, "candidate");
  for (const auto& [id, values] : candidate) {
    if (seq_axis(id) == SeqAxis::key || id == TensorId::dQ) {
      if (data.dO.empty()) {
        throw InvalidArgument("dO", "diagnosing " + std::string(tensor_name(id)) +
                                        " needs dO, the gradient of the output");
      }
    }
  }
  // The candidate's tensors that were judged, in TensorId order.
  std::vector<Judged> candidate_tensors;
  for (const auto& [id, values] : candidate) {
    Judged c{id, &values};
    for (const TensorReport& r : judged_reports) {
      if (r.tensor != id) continue;
      c.failed = !r.rule.pass;
      c.limit = r.rule.limit;
      c.baseline_rel_l2 = r.baseline.rel_l2;
      c.tile = r.candidate.tile_size;
    }
    candidate_tensors.push_back(c);
  }
  Diagnosis result;
  if (std::none_of(candidate_tensors.begin(), candidate_tensors.end(),
                   [](const Judged& c) { return c.failed; })) {
    return result;
  }

  const Context ctx = make_context(data, candidate, candidate_tensors, result.scope_note);
  const std::vector<Hypothesis> hypotheses = all_hypotheses(ctx);

  // Per failed tensor the best hypothesis; tensors explained by the same code become one
  // finding (its explanation is that of the first).
  std::map<std::string, Finding> by_code;
  std::vector<TensorId> explained;
  for (const Judged& c : candidate_tensors) {
    if (!c.failed) continue;
    const std::optional<Fit> fit =
        best_fit(ctx, hypotheses, c, candidate_tensors, precision.lse_dtype);
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
  for (auto& [code, finding] : by_code) {
    if (code == "key_padding_unmasked") {
      // The evidence in words: how much closer the candidate is to the padded-key attention.
      double to_hypothesis = 0.0, to_gold = std::numeric_limits<double>::infinity();
      for (const auto& [tensor, fit] : finding.detail["fit"].items()) {
        to_hypothesis = std::max(to_hypothesis, fit["rel_l2_to_hypothesis"].get<double>());
        to_gold = std::min(to_gold, fit["rel_l2_to_correct"].get<double>());
      }
      std::ostringstream e;
      e << std::setprecision(2) << " (it matches that attention to relative L2 " << to_hypothesis
        << ", against " << to_gold << " from the right answer)";
      finding.explanation += e.str();
    }
    result.findings.push_back(std::move(finding));
  }

  std::vector<TensorId> located;
  if (std::optional<Finding> f = nan_masked_rows(candidate, gold)) {
    located = f->tensors;
    result.findings.push_back(std::move(*f));
  }
  if (std::optional<Finding> f = masked_rows_not_zero(data, candidate, gold)) {
    // Only the tensors that fail and nothing above explains.
    std::vector<TensorId> tensors;
    for (TensorId id : f->tensors) {
      const bool failed = std::find(ctx.failed.begin(), ctx.failed.end(), id) != ctx.failed.end();
      const bool done = std::find(explained.begin(), explained.end(), id) != explained.end() ||
                        std::find(located.begin(), located.end(), id) != located.end();
      if (failed && !done) tensors.push_back(id);
    }
    if (!tensors.empty()) {
      f->tensors = tensors;
      located.insert(located.end(), tensors.begin(), tensors.end());
      result.findings.push_back(std::move(*f));
    }
  }
  for (const Judged& c : candidate_tensors) {
    const auto seen = [&](const std::vector<TensorId>& ids) {
      return std::find(ids.begin(), ids.end(), c.id) != ids.end();
    };
    if (!c.failed || seen(explained) || seen(located)) continue;
    if (std::optional<Finding> f = max_init_zero(ctx, c.id, c.limit)) {
      located.push_back(c.id);
      auto same = std::find_if(result.findings.begin(), result.findings.end(),
                               [&](const Finding& x) { return x.code == f->code; });
      if (same != result.findings.end()) {
        same->tensors.push_back(c.id);
      } else {
        result.findings.push_back(std::move(*f));
      }
      continue;
    }
    if (std::optional<Finding> f = tail_rows(c.id, *c.values, gold.at(c.id), c.limit,
                                             c.id == TensorId::O ? &data.v : nullptr)) {
      located.push_back(c.id);
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
      continue;
    }
    if (std::optional<Finding> f = rounded_toward_zero(c.id, *c.values, gold.at(c.id))) {
      located.push_back(c.id);
      auto same = std::find_if(result.findings.begin(), result.findings.end(),
                               [&](const Finding& x) { return x.code == f->code; });
      if (same != result.findings.end()) {
        same->tensors.push_back(c.id);
        same->detail["by_tensor"][std::string(tensor_name(c.id))] = f->detail;
      } else {
        const nlohmann::json values = f->detail;  // by tensor, as more tensors join
        f->detail = {{"by_tensor", {{std::string(tensor_name(c.id)), values}}}};
        result.findings.push_back(std::move(*f));
      }
    }
  }
  // Junk in O's tail makes the same tail of the other tensors junk too: one tail_garbage.
  for (Finding& g : result.findings) {
    if (g.code != "tail_garbage") continue;
    for (Finding& t : result.findings) {
      if (t.code != "tail_rows" || t.detail.value("axis", "") != g.detail.value("axis", "") ||
          t.detail.value("tile_sizes", nlohmann::json()) !=
              g.detail.value("tile_sizes", nlohmann::json())) {
        continue;
      }
      g.tensors.insert(g.tensors.end(), t.tensors.begin(), t.tensors.end());
      t.tensors.clear();
    }
  }
  std::erase_if(result.findings, [](const Finding& f) { return f.tensors.empty(); });
  // A lead for each failed tensor nothing explains.
  for (const Judged& c : candidate_tensors) {
    const auto seen = [&](const std::vector<TensorId>& ids) {
      return std::find(ids.begin(), ids.end(), c.id) != ids.end();
    };
    if (!c.failed || seen(explained) || seen(located)) continue;
    result.lead.push_back(
        locate_errors(c.id, data.problem, *c.values, gold.at(c.id), c.limit, c.tile));
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

nlohmann::json to_json(const Lead& l) {
  return {
      {"tensor", std::string(tensor_name(l.tensor))}, {"summary", l.summary}, {"where", l.detail}};
}

nlohmann::json to_json(const Diagnosis& d) {
  nlohmann::json findings = nlohmann::json::array();
  for (const Finding& f : d.findings) findings.push_back(to_json(f));
  nlohmann::json lead = nlohmann::json::array();
  for (const Lead& l : d.lead) lead.push_back(to_json(l));
  nlohmann::json j = {{"findings", findings}, {"lead", lead}};
  if (!d.scope_note.empty()) j["scope"] = d.scope_note;
  return j;
}

}  // namespace flashref::verify::diagnosis

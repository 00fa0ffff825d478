#include "flashref/verify/report.hpp"

#include <algorithm>
#include <cstdio>
#include <sstream>

namespace flashref::verify {
namespace {

std::string sci(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3e", x);
  return buf;
}

std::string plain(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", x);
  return buf;
}

std::string fixed2(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", x);
  return buf;
}

std::string pad(std::string s, std::size_t width) {
  if (s.size() < width) s.append(width - s.size(), ' ');
  return s;
}

std::string axis_name(SeqAxis a) {
  return a == SeqAxis::query ? "query" : "key";
}

std::string worst_at(const ErrorStats& s, TensorId t) {
  std::ostringstream o;
  o << "(" << s.worst.b << "," << s.worst.h << "," << s.worst.s;
  if (t != TensorId::L) o << "," << s.worst.i;
  o << ") " << (s.axis == SeqAxis::query ? "q" : "k") << "-tile " << s.worst_tile;
  return o.str();
}

// One line per backend whose gradients were judged: which O and L the baseline backward ran
// from, so a reader knows what the gradients' limits assume.
std::string backward_inputs_lines(const VerifyReport& r) {
  std::ostringstream o;
  for (const BackendReport& b : r.backends) {
    if (!b.available || !b.error.empty() || b.backward_inputs == BackwardInputs::none) continue;
    o << "  " << b.backend << ": "
      << backward_inputs_text(b.backward_inputs, b.backward_inputs_reason, b.backend) << "\n";
  }
  return o.str();
}

std::vector<std::string> backend_list(const VerifyReport& r) {
  std::vector<std::string> names;
  for (const BackendReport& b : r.backends) {
    names.push_back(r.verify_case.ranks > 0 ? inner_backend_name(b.backend) : b.backend);
  }
  return names;
}

}  // namespace

std::string backward_inputs_text(BackwardInputs inputs, const std::string& reason,
                                 const std::string& candidate) {
  switch (inputs) {
    case BackwardInputs::none:
      return "no gradients judged";
    case BackwardInputs::candidate:
      return "the baseline backward ran from " + candidate +
             "'s O and L, which passed: the inputs its backward received";
    case BackwardInputs::baseline:
      return "the baseline backward ran from its own O and L (" + reason + ")";
  }
  return "";
}

std::string format_table(const VerifyReport& report) {
  const VerifyCase& c = report.verify_case;
  std::ostringstream o;
  o << "problem: " << describe(c.problem) << "\n";
  o << "run:     " << describe_settings(c) << "; worst indices placed in " << report_tile_q(c)
    << " x " << report_tile_k(c) << " (B_q x B_k) tiles\n";
  o << "precision: " << describe(precision(c), c.problem) << "\n";
  o << "rule:    " << rule_text() << "\n";
  for (const std::string& n : report.input_notes) o << "inputs:  " << n << "\n";
  o << "\n";
  // The backend column fits the longest name ("ring4(reference)" with --ranks) plus a space.
  std::size_t backend_width = 11;
  for (const BackendReport& b : report.backends) {
    backend_width = std::max(backend_width, b.backend.size() + 1);
  }
  const std::size_t w[] = {8, backend_width, 13, 14, 3, 11, 11, 11, 11, 11, 7, 9};
  o << pad("tensor", w[0]) << pad("backend", w[1]) << pad("max abs err", w[2])
    << pad("baseline err", w[3]) << pad("k", w[4]) << pad("floor", w[5]) << pad("= rounding", w[6])
    << pad("+ noise", w[7]) << pad("+ cancel", w[8]) << pad("limit", w[9]) << pad("ratio", w[10])
    << pad("verdict", w[11])
    << "worst (b,h,s,i) and tile\n";
  std::ostringstream failures;
  std::ostringstream unavailable;
  int checks = 0, failed = 0, ran = 0;
  for (const BackendReport& b : report.backends) {
    if (!b.available) {
      unavailable << "  " << b.backend << ": " << b.unavailable_reason << "\n";
      continue;
    }
    ++ran;
    if (!b.error.empty()) {
      ++failed;
      o << pad("-", w[0]) << pad(b.backend, w[1]) << "ERROR: " << b.error << "\n";
      failures << "  " << b.backend << " threw: " << b.error << "\n";
      continue;
    }
    for (const TensorReport& t : b.tensors) {
      ++checks;
      const RuleCheck& r = t.rule;
      o << pad(std::string(tensor_name(t.tensor)), w[0]) << pad(b.backend, w[1])
        << pad(sci(r.candidate_err), w[2]) << pad(sci(r.baseline_err), w[3])
        << pad(plain(r.k), w[4]) << pad(sci(r.floor), w[5]) << pad(sci(r.floor_rounding), w[6])
        << pad(sci(r.floor_noise), w[7]) << pad(sci(r.floor_cancellation), w[8])
        << pad(sci(r.limit), w[9]) << pad(fixed2(r.ratio), w[10]) << pad(r.pass ? "PASS" : "FAIL", w[11]) << worst_at(t.candidate, t.tensor) << "\n";
      if (!r.pass) {
        ++failed;
        const ErrorStats& s = t.candidate;
        failures << "  " << tensor_name(t.tensor) << " " << b.backend << ": " << r.reason
                 << "\n    worst at (b=" << s.worst.b << ", h=" << s.worst.h << ", "
                 << axis_name(s.axis) << " row " << s.worst.s;
        if (t.tensor != TensorId::L) failures << ", i=" << s.worst.i;
        failures << ") in " << axis_name(s.axis) << " tile " << s.worst_tile << " of "
                 << s.tile_size << " rows: candidate " << s.worst_candidate << ", gold "
                 << s.worst_gold << "; mean abs " << sci(s.mean_abs) << ", max rel "
                 << sci(s.max_rel) << ", rel L2 " << sci(s.rel_l2) << "\n";
      }
    }
  }
  const std::string inputs = backward_inputs_lines(report);
  if (!inputs.empty()) o << "\ngradients' baseline:\n" << inputs;
  if (!failures.str().empty()) o << "\nfailures:\n" << failures.str();
  if (!unavailable.str().empty())
    o << "\nunavailable (not run, not a failure):\n" << unavailable.str();
  if (!report.passed()) {
    o << "\nreproduce: " << reproduce_command(c, backend_list(report)) << "\n";
  }
  o << "\nresult: " << (report.passed() ? "PASS" : "FAIL") << " (" << checks << " checks on " << ran
    << " backend" << (ran == 1 ? "" : "s") << ", " << failed << " failed)\n";
  return o.str();
}

nlohmann::json to_json(const Problem& p) {
  return {{"B", p.B},
          {"H", p.H},
          {"H_kv", p.H_kv},
          {"S_q", p.S_q},
          {"S_k", p.S_k},
          {"d", p.d},
          {"scale", p.scale},
          {"mask", std::string(mask_name(p.mask))},
          {"dtype", std::string(dtype_name(p.dtype))},
          {"grad_dtype", std::string(dtype_name(p.grad_dtype))}};
}

nlohmann::json to_json(const ErrorStats& s) {
  return {{"count", s.count},
          {"finite_pairs", s.finite_pairs},
          {"max_abs", s.max_abs},
          {"mean_abs", s.mean_abs},
          {"max_rel", s.max_rel},
          {"rel_l2", s.rel_l2},
          {"max_abs_gold", s.max_abs_gold},
          {"nan", s.nan},
          {"pos_inf", s.pos_inf},
          {"neg_inf", s.neg_inf},
          {"missed_gold_nonfinite", s.missed_gold_nonfinite},
          {"worst",
           {{"b", s.worst.b},
            {"h", s.worst.h},
            {"s", s.worst.s},
            {"i", s.worst.i},
            {"candidate", s.worst_candidate},
            {"gold", s.worst_gold},
            {"axis", axis_name(s.axis)},
            {"tile", s.worst_tile},
            {"tile_size", s.tile_size}}}};
}

nlohmann::json to_json(const TensorReport& t) {
  const RuleCheck& r = t.rule;
  return {{"tensor", std::string(tensor_name(t.tensor))},
          {"k", r.k},
          {"floor", r.floor},
          {"floor_rounding", r.floor_rounding},
          {"floor_noise", r.floor_noise},
          {"noise_sigma", r.noise_sigma},
          {"floor_cancellation", r.floor_cancellation},
          {"sum_magnitude", r.sum_magnitude},
          {"baseline_err", r.baseline_err},
          {"candidate_err", r.candidate_err},
          {"limit", r.limit},
          {"ratio", r.ratio},
          {"pass", r.pass},
          {"verdict", r.pass ? "pass" : "fail"},
          {"reason", r.reason},
          {"candidate", to_json(t.candidate)},
          {"baseline", to_json(t.baseline)}};
}

nlohmann::json to_json(BackwardInputs inputs, const std::string& reason,
                       const std::string& candidate) {
  if (inputs == BackwardInputs::none) return nullptr;
  return {{"inputs", std::string(backward_inputs_name(inputs))},
          {"reason", reason},
          {"text", backward_inputs_text(inputs, reason, candidate)}};
}

namespace {
// The rule's k for every tensor, from rule_k (one definition).
nlohmann::json rule_k_json() {
  nlohmann::json k = nlohmann::json::object();
  for (TensorId t : kForwardTensors) k[std::string(tensor_name(t))] = rule_k(t);
  for (TensorId t : kBackwardTensors) k[std::string(tensor_name(t))] = rule_k(t);
  return k;
}
}  // namespace

nlohmann::json to_json(const VerifyReport& report) {
  const VerifyCase& c = report.verify_case;
  nlohmann::json backends = nlohmann::json::array();
  for (const BackendReport& b : report.backends) {
    nlohmann::json tensors = nlohmann::json::array();
    for (const TensorReport& t : b.tensors) tensors.push_back(to_json(t));
    backends.push_back(
        {{"name", b.backend},
         {"available", b.available},
         {"unavailable_reason", b.unavailable_reason},
         {"error", b.error},
         {"passed", b.available ? nlohmann::json(b.passed()) : nlohmann::json()},
         {"baseline_backward", to_json(b.backward_inputs, b.backward_inputs_reason, b.backend)},
         {"tensors", tensors}});
  }
  return {{"command", reproduce_command(c, backend_list(report))},
          {"problem", to_json(c.problem)},
          {"dtype", std::string(dtype_name(c.problem.dtype))},
          {"case",
           {{"tile_q", c.tile_q},
            {"tile_k", c.tile_k},
            {"report_tile_q", report_tile_q(c)},
            {"report_tile_k", report_tile_k(c)},
            {"threads", c.threads},
            {"seed", c.seed},
            {"layout", std::string(layout_name(c.layout))},
            {"large", c.large},
            {"backward", c.backward},
            {"allow_tf32", c.allow_tf32},
            {"deterministic", c.deterministic},
            {"lse_dtype", std::string(dtype_name(c.lse_dtype))},
            {"ranks", c.ranks}}},
          {"precision", to_json(precision(c), c.problem)},
          {"rule",
           {{"text", rule_text()},
            {"k", rule_k_json()},
            {"floor",
             "2 * rounding_step(output dtype, max|gold|) + 3 * max sigma of the float32 "
             "rounding noise of the scores (and of dP - D for dQ, dK) and of the 16-bit or TF32 "
             "operands P~ (O) and dS (dQ, dK) + 2^-23 * max over elements "
             "of the magnitude of the terms each output sums (the cancellation part); L's output "
             "dtype is f32"},
            {"noise_sigmas", kNoiseSigmas},
            {"baseline_backward",
             "run from the candidate's O and L when both pass, else from the baseline's own"},
            {"max_rel_denominator", "max(|gold|, 1e-3 * max|gold|)"}}},
          {"backends", backends},
          {"input_notes", report.input_notes},
          {"passed", report.passed()}};
}

}  // namespace flashref::verify

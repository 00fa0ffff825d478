#include "flashref/verify/check_report.hpp"

#include <cstdio>
#include <sstream>

#include "flashref/verify/report.hpp"

namespace flashref::verify {
namespace {

std::string sci(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3e", x);
  return buf;
}

// Left-aligned in `width` columns, always followed by at least one space.
std::string pad(std::string s, std::size_t width) {
  if (s.size() + 1 < width) s.append(width - 1 - s.size(), ' ');
  return s + " ";
}

}  // namespace

std::string format_check(const Problem& p, const CheckResult& r) {
  std::ostringstream o;
  o << "problem: " << describe(p) << "\n";
  o << "precision: " << describe(r.precision, p) << "\n";
  o << "rule:    " << rule_text() << "\n";
  for (const std::string& n : r.input_notes) o << "inputs:  " << n << "\n";
  o << "\n";
  o << pad("tensor", 7) << pad("max abs err", 12) << pad("baseline err", 13) << pad("k", 3)
    << pad("floor", 11) << pad("= rounding", 11) << pad("+ noise", 11) << pad("+ cancel", 11)
    << pad("limit", 11) << pad("ratio", 9) << pad("verdict", 8)
    << "rel L2     NaN/inf  worst (b,h,s,i) and tile\n";
  for (const TensorReport& t : r.tensors) {
    const ErrorStats& s = t.candidate;
    char ratio[32];
    std::snprintf(ratio, sizeof ratio, t.rule.ratio < 1000.0 ? "%.2f" : "%.1e", t.rule.ratio);
    std::ostringstream worst;
    worst << "(" << s.worst.b << "," << s.worst.h << "," << s.worst.s;
    if (t.tensor != TensorId::L) worst << "," << s.worst.i;
    worst << ") " << (s.axis == SeqAxis::query ? "q" : "k") << "-tile " << s.worst_tile;
    o << pad(std::string(tensor_name(t.tensor)), 7) << pad(sci(t.rule.candidate_err), 12)
      << pad(sci(t.rule.baseline_err), 13) << pad(std::to_string(static_cast<int>(t.rule.k)), 3)
      << pad(sci(t.rule.floor), 11) << pad(sci(t.rule.floor_rounding), 11)
      << pad(sci(t.rule.floor_noise), 11) << pad(sci(t.rule.floor_cancellation), 11)
      << pad(sci(t.rule.limit), 11) << pad(ratio, 9) << pad(t.rule.pass ? "PASS" : "FAIL", 8)
      << pad(sci(s.rel_l2), 11) << pad(std::to_string(s.nonfinite_mismatches()), 9) << worst.str()
      << "\n";
  }
  if (r.backward_inputs != BackwardInputs::none) {
    o << "gradients: "
      << backward_inputs_text(r.backward_inputs, r.backward_inputs_reason, "the candidate") << "\n";
  }
  for (const TensorReport& t : r.tensors) {
    if (!t.rule.pass) o << "  " << tensor_name(t.tensor) << ": " << t.rule.reason << "\n";
  }
  if (!r.passed()) {
    o << "\ndiagnosis:\n";
    if (r.diagnosis.findings.empty()) {
      o << "  no known mistake fits; the worst elements above say where to look\n";
    }
    for (const diagnosis::Finding& f : r.diagnosis.findings) {
      std::string tensors;
      for (TensorId id : f.tensors) {
        tensors += (tensors.empty() ? "" : ", ") + std::string(tensor_name(id));
      }
      o << "  [" << f.code << "] (" << tensors << ") " << f.explanation << "\n";
    }
    for (const diagnosis::Lead& l : r.diagnosis.lead) {
      o << "  lead (" << tensor_name(l.tensor) << "): " << l.summary << "\n";
    }
    if (!r.diagnosis.scope_note.empty()) o << "  (" << r.diagnosis.scope_note << ")\n";
    for (const std::string& n : r.precision_notes) o << "  note: " << n << "\n";
  }
  o << "\nresult: " << (r.passed() ? "PASS" : "FAIL") << "\n";
  return o.str();
}

nlohmann::json to_json(const Problem& p, const CheckResult& r) {
  nlohmann::json tensors = nlohmann::json::array();
  for (const TensorReport& t : r.tensors) tensors.push_back(to_json(t));
  nlohmann::json j = {
      {"command", "check"},
      {"problem", to_json(p)},
      {"dtype", std::string(dtype_name(p.dtype))},
      {"grad_dtype", std::string(dtype_name(p.grad_dtype))},
      {"precision", to_json(r.precision, p)},
      {"rule", rule_text()},
      {"tensors", tensors},
      {"baseline_backward", to_json(r.backward_inputs, r.backward_inputs_reason, "the candidate")},
      {"findings", diagnosis::to_json(r.diagnosis)["findings"]},
      {"lead", diagnosis::to_json(r.diagnosis)["lead"]},
      {"input_notes", r.input_notes},
      {"precision_notes", r.precision_notes},
      {"passed", r.passed()}};
  if (!r.diagnosis.scope_note.empty()) j["diagnosis_scope"] = r.diagnosis.scope_note;
  return j;
}

}  // namespace flashref::verify

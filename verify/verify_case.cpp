#include "flashref/verify/verify_case.hpp"

#include <cstdio>
#include <sstream>

#include "flashref/cpu/backend.hpp"
#include "flashref/ring/ring_backend.hpp"

namespace flashref::verify {

VerifyCase default_case() {
  VerifyCase c;
  c.problem = make_problem(2, 4, 2, 300, 300, 64, Mask::causal_top_left, DType::bf16);
  c.backward = true;
  return c;
}

ExecutionOptions exec_options(const VerifyCase& c) {
  ExecutionOptions o;
  o.tile_q = c.tile_q;
  o.tile_k = c.tile_k;
  o.num_threads = c.threads;
  o.allow_tf32 = c.allow_tf32;
  o.deterministic = c.deterministic;
  return o;
}

Precision precision(const VerifyCase& c) {
  return {c.allow_tf32, c.lse_dtype};
}

InputOptions input_options(const VerifyCase& c) {
  InputOptions o;
  o.seed = c.seed;
  o.large = c.large;
  o.layout = c.layout;
  return o;
}

std::int64_t report_tile_q(const VerifyCase& c) {
  return c.tile_q > 0 ? c.tile_q : cpu::kDefaultTileQ;
}
std::int64_t report_tile_k(const VerifyCase& c) {
  return c.tile_k > 0 ? c.tile_k : cpu::kDefaultTileK;
}

namespace {

std::string exact(double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", x);
  return buf;
}

}  // namespace

std::string reproduce_command(const VerifyCase& c, const std::vector<std::string>& backends) {
  const Problem& p = c.problem;
  std::ostringstream o;
  o << "flashref verify";
  if (!backends.empty()) {
    o << " --backends ";
    for (std::size_t i = 0; i < backends.size(); ++i) o << (i ? "," : "") << backends[i];
  }
  o << " --shape " << p.B << "," << p.H << "," << p.S_q << "," << p.S_k << "," << p.d
    << " --heads-kv " << p.H_kv << " --mask " << mask_name(p.mask) << " --dtype "
    << dtype_name(p.dtype);
  if (p.grad_dtype != p.dtype) o << " --grad-dtype " << dtype_name(p.grad_dtype);
  if (p.scale != default_scale(p.d)) o << " --scale " << exact(p.scale);
  if (c.tile_q > 0 || c.tile_k > 0) o << " --tile " << c.tile_q << "," << c.tile_k;
  o << " --seed " << c.seed << " --layout " << layout_name(c.layout);
  if (c.large) o << " --large";
  if (!c.backward) o << " --forward-only";
  if (c.threads > 0) o << " --threads " << c.threads;
  if (c.allow_tf32) o << " --allow-tf32";
  if (!c.deterministic) o << " --nondeterministic";
  if (c.lse_dtype != DType::f32) o << " --lse-dtype " << dtype_name(c.lse_dtype);
  if (c.ranks > 0) o << " --ranks " << c.ranks;
  return o.str();
}

std::string ring_name(int ranks, const std::string& backend) {
  return ring::ring_backend_name(ranks, backend);
}

std::string inner_backend_name(const std::string& reported) {
  // "ring<digits>(<inner>)"
  if (reported.rfind("ring", 0) != 0 || reported.empty() || reported.back() != ')') return reported;
  std::size_t i = 4;
  while (i < reported.size() && reported[i] >= '0' && reported[i] <= '9') ++i;
  if (i == 4 || i >= reported.size() || reported[i] != '(') return reported;
  return reported.substr(i + 1, reported.size() - i - 2);
}

std::string describe(const VerifyCase& c) {
  return describe(c.problem) + "; " + describe_settings(c);
}

std::string describe_settings(const VerifyCase& c) {
  std::ostringstream o;
  o << "tiles ";
  if (c.tile_q > 0 || c.tile_k > 0)
    o << "B_q=" << c.tile_q << " B_k=" << c.tile_k;
  else
    o << "default";
  o << "; seed " << c.seed << "; layout " << layout_name(c.layout) << "; inputs "
    << (c.large ? "large (Q, K ~ N(0, 100))" : "N(0, 1)")
    << (c.backward ? "; forward and backward" : "; forward only");
  if (c.threads > 0) o << "; " << c.threads << " threads";
  if (c.allow_tf32) o << "; TF32 allowed";
  if (!c.deterministic) o << "; non-deterministic backward allowed";
  if (c.lse_dtype != DType::f32) o << "; L stored as " << dtype_name(c.lse_dtype);
  if (c.ranks > 0) o << "; ring of " << c.ranks << " ranks (in-process)";
  return o.str();
}

}  // namespace flashref::verify

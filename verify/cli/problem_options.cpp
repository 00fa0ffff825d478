#include "problem_options.hpp"

#include <algorithm>

#include "flashref/backend.hpp"
#include "feasibility.hpp"
#include "flashref/error.hpp"
#include "flashref/limits.hpp"
#include "option_parsers.hpp"

namespace flashref::cli {

namespace {

// The option a user typed for a field that validate(Problem) names.
std::string option_for(const std::string& field) {
  if (field == "problem.H_kv") return "--heads-kv";
  if (field == "problem.scale") return "--scale";
  if (field.rfind("problem.", 0) == 0) return "--shape";
  return field;
}

// Re-raises an error about a problem field under the option's name, keeping the field.
[[noreturn]] void rethrow_as_option(const InvalidArgument& e) {
  const std::string message = std::string(e.what()).substr(e.field().size() + 2);
  throw InvalidArgument(option_for(e.field()), message + " (" + e.field() + ")");
}

}  // namespace

void ProblemOptions::add_to(CLI::App& app, const ProblemDefaults& defaults) {
  defaults_ = defaults;
  mask_ = defaults.mask;
  dtype_ = defaults.dtype;
  shape_opt_ =
      app.add_option("--shape", shape_,
                     "B,H,S_q,S_k,d, or B,H,S,d when S_q = S_k [default: " + defaults.shape + "]");
  heads_kv_opt_ =
      app.add_option("--heads-kv", heads_kv_,
                     "key/value heads H_kv, dividing H (GQA; 1: MQA) [default: H, or " +
                         std::to_string(defaults.heads_kv) + " with the default shape]");
  mask_opt_ = app.add_option("--mask", mask_, "none | causal | causal-bottom-right")
                  ->capture_default_str();
  dtype_opt_ = app.add_option("--dtype", dtype_, "f32 | f16 | bf16: Q, K, V, O, dO")
                   ->capture_default_str();
  grad_dtype_opt_ = app.add_option("--grad-dtype", grad_dtype_,
                                   "f32 | f16 | bf16: dQ, dK, dV [default: --dtype]");
  scale_opt_ = app.add_option("--scale", scale_, "softmax scale [default: 1/sqrt(d)]");
  app.add_option("--tile", tile_, "B_q,B_k tile sizes (or one size for both; 0: backend default)");
  app.add_option("--layout", layout_, "bshd | bhsd: memory layout given to the backends")
      ->capture_default_str();
  app.add_option("--threads", threads_,
                 "OpenMP threads for host backends, 0 to " + std::to_string(kMaxThreads) +
                     " (0: OpenMP default)")
      ->capture_default_str();
  backends_opt_ = app.add_option("--backends", backends_,
                                 "comma-separated backends [default: every backend of the build]");
}

Problem ProblemOptions::problem() const {
  const bool shape_given = shape_opt_->count() > 0;
  const std::array<std::int64_t, 5> v = parse_shape(shape_given ? shape_ : defaults_.shape, "--shape");
  const std::int64_t H_kv = heads_kv_opt_->count() > 0 ? heads_kv_
                            : shape_given              ? v[1]
                                                       : defaults_.heads_kv;
  Problem p =
      make_problem(v[0], v[1], H_kv, v[2], v[3], v[4], parse_mask(mask_), parse_dtype(dtype_));
  if (grad_dtype_opt_->count() > 0) p.grad_dtype = parse_dtype_option(grad_dtype_, "--grad-dtype");
  if (scale_opt_->count() > 0) p.scale = scale_;
  try {
    validate(p);
  } catch (const InvalidArgument& e) {
    rethrow_as_option(e);
  }
  return p;
}

std::pair<int, int> ProblemOptions::tiles() const {
  if (tile_.empty()) return {0, 0};
  return parse_tiles(tile_, "--tile");
}

int ProblemOptions::threads() const {
  check_threads(threads_, "--threads");
  return threads_;
}

std::string ProblemOptions::given_problem_option() const {
  for (const CLI::Option* o : {shape_opt_, heads_kv_opt_, mask_opt_, dtype_opt_, grad_dtype_opt_,
                               scale_opt_}) {
    if (o != nullptr && o->count() > 0) return o->get_name();
  }
  return "";
}

verify::Layout ProblemOptions::layout() const {
  return verify::parse_layout(layout_);
}

std::vector<std::string> ProblemOptions::backends(const std::vector<std::string>& fallback) const {
  if (!backends_given()) return fallback;
  std::vector<std::string> names;
  const std::vector<std::string> known = backend_names();
  for (const std::string& name : split_commas(backends_)) {
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      try {
        (void)make_backend(name);  // its message lists the build's backends and says why
      } catch (const InvalidArgument& e) {
        throw InvalidArgument("--backends", std::string(e.what()).substr(e.field().size() + 2));
      }
    }
    if (std::find(names.begin(), names.end(), name) != names.end()) {
      throw InvalidArgument("--backends", "'" + name + "' is listed twice");
    }
    names.push_back(name);
  }
  return names;
}

}  // namespace flashref::cli

#include "npy_problem.hpp"

#include <cmath>
#include <limits>
#include <sstream>

#include "flashref/error.hpp"
#include "flashref/verify/npy.hpp"
#include "flashref/verify/tensor_set.hpp"
#include "option_parsers.hpp"
#include "problem_options.hpp"

namespace flashref::cli {
namespace {

using verify::NpyArray;
using verify::shape_string;

std::vector<std::size_t> shape_of(const NpyArray& a) {
  return {a.values.shape().begin(), a.values.shape().end()};
}

// The file's shape as (B, H, S, d): 4-D as is, 3-D (B, S, d) with H = 1.
std::array<std::int64_t, 4> bhsd(const NpyArray& a, const std::string& path,
                                 const std::string& role) {
  const auto s = shape_of(a);
  if (s.size() != 3 && s.size() != 4) {
    throw InvalidArgument(
        path, role + " must be 4-D (B, H, S, d) or 3-D (B, S, d), got shape " + shape_string(s));
  }
  for (std::size_t extent : s) {
    if (extent == 0) {
      throw InvalidArgument(path, role + " has an empty dimension: shape " + shape_string(s));
    }
  }
  const auto n = [](std::size_t x) { return static_cast<std::int64_t>(x); };
  if (s.size() == 3) return {n(s[0]), 1, n(s[1]), n(s[2])};
  return {n(s[0]), n(s[1]), n(s[2]), n(s[3])};
}

// The file's values in `dtype` (rounded to nearest even for f16/bf16; exact for f32 and for
// f16 files read as f16), in the (B, H, S, d) shape of bhsd().
// The largest finite value of `dtype`.
double largest_finite(DType dtype) {
  switch (dtype) {
    case DType::f16:
      return 65504.0;
    case DType::bf16:
      return 0x1.fep127;
    case DType::f32:
      break;
  }
  return std::numeric_limits<float>::max();
}

// A finite file value that rounds to an infinity in `dtype` (f16 above 65504, bf16 and f32
// above 3.4e38) is named in `notes`: the candidate then sees an infinity the file did not hold.
verify::HostTensor to_host(const NpyArray& a, const std::array<std::int64_t, 4>& shape,
                           DType dtype, const std::string& name, const std::string& path,
                           std::vector<std::string>& notes) {
  xt::xarray<double> values = a.values;
  values.reshape({static_cast<std::size_t>(shape[0]), static_cast<std::size_t>(shape[1]),
                  static_cast<std::size_t>(shape[2]), static_cast<std::size_t>(shape[3])});
  verify::HostTensor t = verify::HostTensor::from_canonical(values, dtype);
  const xt::xtensor<double, 4> stored = t.to_double();
  std::int64_t overflowed = 0;
  std::size_t first = 0;
  for (std::size_t n = 0; n < values.size(); ++n) {
    if (std::isfinite(values.flat(n)) && !std::isfinite(stored.flat(n))) {
      if (overflowed++ == 0) first = n;
    }
  }
  if (overflowed > 0) {
    std::ostringstream o;
    o << name << " (" << path << "): " << overflowed << " finite value(s) overflow to infinity "
      << "when rounded to " << dtype_name(dtype) << " (first " << values.flat(first)
      << " at flat index " << first << "; the largest " << dtype_name(dtype) << " is "
      << largest_finite(dtype) << ")";
    notes.push_back(o.str());
  }
  return t;
}

std::string dims(const std::array<std::int64_t, 4>& s) {
  return shape_string({static_cast<std::size_t>(s[0]), static_cast<std::size_t>(s[1]),
                       static_cast<std::size_t>(s[2]), static_cast<std::size_t>(s[3])});
}

}  // namespace

void NpyProblemOptions::add_to(CLI::App& app, const std::string& tile_help) {
  app.add_option("--q", q, "Q: (B, H, S_q, d) or the course's (B, S_q, d), float32/float16 .npy")
      ->required();
  app.add_option("--k", k, "K: (B, H_kv, S_k, d) or (B, S_k, d); H_kv may divide H (GQA/MQA)")
      ->required();
  app.add_option("--v", v, "V: the shape of K")->required();
  app.add_option("--do", dO, "dO, the gradient of the loss w.r.t. O: the shape of Q");
  app.add_option("--mask", mask, "none, causal (top-left) or causal-bottom-right")
      ->capture_default_str();
  scale_opt = app.add_option("--scale", scale, "softmax scale (default 1/sqrt(d))");
  app.add_option("--dtype", dtype,
                 "precision of Q, K, V, O, dO: f32, f16 or bf16 (values are rounded to it, "
                 "nearest even); default: the dtype of the Q file");
  app.add_option("--tile", tile, tile_help);
}

std::pair<int, int> NpyProblemOptions::tiles() const {
  if (tile.empty()) return {0, 0};
  return parse_tiles(tile, "--tile");
}

NpyProblem load_npy_problem(const NpyProblemOptions& o) {
  const NpyArray q = verify::read_npy(o.q);
  const NpyArray k = verify::read_npy(o.k);
  const NpyArray v = verify::read_npy(o.v);
  std::optional<NpyArray> dO;
  if (!o.dO.empty()) dO = verify::read_npy(o.dO);

  const auto q_shape = bhsd(q, o.q, "Q");
  const std::size_t rank = q.values.dimension();
  for (const auto& [array, path] : {std::pair{&k, &o.k}, std::pair{&v, &o.v}}) {
    if (array->values.dimension() != rank) {
      throw InvalidArgument(*path, "has rank " + std::to_string(array->values.dimension()) +
                                       " but " + o.q + " has rank " + std::to_string(rank) +
                                       ": give every tensor in one layout");
    }
  }
  const auto k_shape = bhsd(k, o.k, "K");
  const auto v_shape = bhsd(v, o.v, "V");
  if (k_shape[0] != q_shape[0] || k_shape[3] != q_shape[3]) {
    throw InvalidArgument(o.k, "shape " + shape_string(shape_of(k)) + " does not fit " + o.q +
                                   "'s " + shape_string(shape_of(q)) +
                                   ": batch B and head dim d must agree");
  }
  if (q_shape[1] % k_shape[1] != 0) {
    throw InvalidArgument(o.k, "has " + std::to_string(k_shape[1]) +
                                   " heads, which do not divide the " + std::to_string(q_shape[1]) +
                                   " query heads of " + o.q);
  }
  if (v_shape != k_shape) {
    throw InvalidArgument(o.v, "shape " + shape_string(shape_of(v)) + " must equal " + o.k + "'s " +
                                   shape_string(shape_of(k)));
  }
  if (dO && dO->values.shape() != q.values.shape()) {
    throw InvalidArgument(o.dO, "shape " + shape_string(shape_of(*dO)) + " must equal " + o.q +
                                    "'s " + shape_string(shape_of(q)));
  }

  const DType dtype = o.dtype.empty() ? q.dtype : parse_dtype_option(o.dtype, "--dtype");
  Problem p = make_problem(q_shape[0], q_shape[1], k_shape[1], q_shape[2], k_shape[2], q_shape[3],
                           parse_mask(o.mask), dtype);
  if (o.scale_opt != nullptr && o.scale_opt->count() > 0) p.scale = o.scale;
  try {
    validate(p);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(
        o.q, std::string("the problem of shape ") + dims(q_shape) + " is not valid: " + e.what());
  }

  NpyProblem result;
  result.course_layout = rank == 3;
  result.data.problem = p;
  result.data.q = to_host(q, q_shape, dtype, "Q", o.q, result.overflows);
  result.data.k = to_host(k, k_shape, dtype, "K", o.k, result.overflows);
  result.data.v = to_host(v, v_shape, dtype, "V", o.v, result.overflows);
  if (dO) result.data.dO = to_host(*dO, q_shape, dtype, "dO", o.dO, result.overflows);
  return result;
}

xt::xarray<double> load_candidate(const std::string& path, verify::TensorId id, const Problem& p) {
  using verify::TensorId;
  const NpyArray a = verify::read_npy(path);
  const auto got = shape_of(a);
  const bool kv = id == TensorId::dK || id == TensorId::dV;
  const std::int64_t heads = kv ? p.H_kv : p.H;
  const std::vector<std::size_t> canonical = verify::canonical_shape(id, p);
  // The course's layout drops the head axis when there is one head.
  std::vector<std::size_t> one_head = canonical;
  one_head.erase(one_head.begin() + 1);
  const bool fits = got == canonical || (heads == 1 && got == one_head);
  if (!fits) {
    std::string want = shape_string(canonical);
    if (heads == 1) want += " or " + shape_string(one_head);
    const std::string names = id == TensorId::L ? "(B, H, S_q)"
                              : kv              ? "(B, H_kv, S_k, d)"
                                                : "(B, H, S_q, d)";
    throw InvalidArgument(path, std::string(verify::tensor_name(id)) + " must be " + names + " = " +
                                    want + " for the inputs given, got " + shape_string(got));
  }
  xt::xarray<double> values = xt::xarray<double>::from_shape(canonical);
  std::copy(a.values.begin(), a.values.end(), values.begin());
  return values;
}

std::vector<std::pair<std::string, xt::xarray<float>>> output_arrays(const verify::RunOutputs& out,
                                                                     const Problem& p,
                                                                     bool course_layout) {
  auto u = [](std::int64_t x) { return static_cast<std::size_t>(x); };
  auto tensor = [&](const verify::HostTensor& t) {
    std::vector<std::size_t> shape{u(t.B()), u(t.H()), u(t.S()), u(t.d())};
    if (course_layout) shape.erase(shape.begin() + 1);
    xt::xarray<float> a = xt::xarray<float>::from_shape(shape);
    std::size_t n = 0;
    for (std::int64_t b = 0; b < t.B(); ++b)
      for (std::int64_t h = 0; h < t.H(); ++h)
        for (std::int64_t s = 0; s < t.S(); ++s)
          for (std::int64_t i = 0; i < t.d(); ++i) a.flat(n++) = t.get(b, h, s, i);
    return a;
  };
  std::vector<std::pair<std::string, xt::xarray<float>>> arrays;
  arrays.emplace_back("o", tensor(out.o));
  std::vector<std::size_t> lse_shape{u(p.B), u(p.H), u(p.S_q)};
  if (course_layout) lse_shape.erase(lse_shape.begin() + 1);
  xt::xarray<float> lse = xt::xarray<float>::from_shape(lse_shape);
  std::copy(out.lse.begin(), out.lse.end(), lse.begin());
  arrays.emplace_back("lse", std::move(lse));
  if (out.has_backward()) {
    arrays.emplace_back("dq", tensor(out.dq));
    arrays.emplace_back("dk", tensor(out.dk));
    arrays.emplace_back("dv", tensor(out.dv));
  }
  return arrays;
}

}  // namespace flashref::cli

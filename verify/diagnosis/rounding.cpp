// rounded_toward_zero: a failed tensor whose errors are small and shrink its magnitudes. Round
// to nearest errs either way; truncation always toward zero, so a long sum whose every partial
// result is truncated drifts steadily smaller. Tensor cores' float32 accumulation truncates
// (docs/verification.md): a kernel that adds every mma step of a long reduction into one
// accumulator on them, or that converts with round-toward-zero, fails the exact rule this way.
#include <cmath>
#include <cstdio>

#include "internal.hpp"

namespace flashref::verify::diagnosis {
namespace {

// Thresholds (docs/verification.md gives the measurements behind them): the mean shrink, in
// units of the RMS error, that truncated sums reach (0.35-0.70 on dev/f32's model) and round
// to nearest does not (at most 0.08 there); a t statistic far past chance; and a relative L2
// error small enough to be rounding, not a wrong formula (which the hypotheses name).
constexpr double kMinShrinkPerRms = 0.25;
constexpr double kMinT = 8.0;
constexpr double kMaxRelL2 = 0.05;

}  // namespace

std::optional<Finding> rounded_toward_zero(TensorId id, const xt::xarray<double>& candidate,
                                           const xt::xarray<double>& gold) {
  // Over elements where both are finite and the gold is not zero: z = how much closer to zero
  // the candidate is than the gold.
  double n = 0.0, sum_z = 0.0, sum_z2 = 0.0, sum_e2 = 0.0, sum_g2 = 0.0;
  for (std::size_t i = 0; i < gold.size(); ++i) {
    const double c = candidate.flat(i), g = gold.flat(i);
    if (!std::isfinite(c) || !std::isfinite(g) || g == 0.0) continue;
    const double e = c - g;
    const double z = g > 0.0 ? -e : e;
    n += 1.0;
    sum_z += z;
    sum_z2 += z * z;
    sum_e2 += e * e;
    sum_g2 += g * g;
  }
  if (n < 64.0 || sum_e2 == 0.0 || sum_g2 == 0.0) return std::nullopt;
  const double mean_z = sum_z / n;
  const double rms = std::sqrt(sum_e2 / n);
  const double sd_z = std::sqrt(std::max(0.0, sum_z2 / n - mean_z * mean_z));
  const double shrink = mean_z / rms;
  const double t = sd_z > 0.0 ? mean_z / (sd_z / std::sqrt(n)) : 0.0;
  const double rel_l2 = std::sqrt(sum_e2 / sum_g2);
  if (shrink < kMinShrinkPerRms || t < kMinT || rel_l2 > kMaxRelL2) return std::nullopt;
  Finding f;
  f.code = "rounded_toward_zero";
  f.tensors = {id};
  char line[320];
  std::snprintf(line, sizeof line,
                "the errors are small and shrink the values toward zero (mean shrink %.2f of the "
                "RMS error; round to nearest errs both ways): sums or conversions truncated, as "
                "tensor cores' float32 accumulation truncates over a long reduction. Sum each "
                "mma step from zero and add it with round to nearest",
                shrink);
  f.explanation = line;
  f.detail["shrink_per_rms"] = shrink;
  f.detail["t"] = t;
  f.detail["rel_l2"] = rel_l2;
  return f;
}

}  // namespace flashref::verify::diagnosis

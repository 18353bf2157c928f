#include "analyze/detectors/thresholds.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "analyze/detectors/detector.h"

namespace stackscope::analyze {

double threshold_at_quantile(std::span<const double> scores, double q) {
  if (scores.empty()) throw DetectorInputError("quantile threshold: no scores");
  if (!(q >= 0.0 && q <= 1.0)) throw DetectorInputError("quantile threshold: q must be in [0, 1], got " + std::to_string(q));
  std::vector<double> v(scores.begin(), scores.end());
  for (size_t i = 0; i < v.size(); ++i)
    if (!std::isfinite(v[i])) throw DetectorInputError("quantile threshold: score " + std::to_string(i) + " is not finite");
  const double pos = q * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  std::nth_element(v.begin(), v.begin() + lo, v.end());
  const double a = v[lo];
  if (hi == lo) return a;
  const double b = *std::min_element(v.begin() + lo + 1, v.end());  // the next order statistic
  return a + (pos - static_cast<double>(lo)) * (b - a);
}

double threshold_at_quantile(const Eigen::VectorXd& scores, double q) {
  return threshold_at_quantile(std::span<const double>(scores.data(), static_cast<size_t>(scores.size())), q);
}

namespace {
// Inverse of the standard normal upper tail (Acklam's rational approximation, |error| < 1.2e-9).
double normal_upper_quantile(double tail) {
  const double p = 1.0 - tail;
  static const double a[] = {-3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02,
                             1.383577518672690e+02, -3.066479806614716e+01, 2.506628277459239e+00};
  static const double b[] = {-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02,
                             6.680131188771972e+01, -1.328068155288572e+01};
  static const double c[] = {-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
                             -2.549732539343734e+00, 4.374664141464968e+00, 2.938163982698783e+00};
  static const double d[] = {7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00,
                             3.754408661907416e+00};
  const double lo = 0.02425;
  if (p < lo) {
    const double q = std::sqrt(-2 * std::log(p));
    return (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
           ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
  }
  if (p > 1 - lo) {
    const double q = std::sqrt(-2 * std::log(1 - p));
    return -(((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
           ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
  }
  const double q = p - 0.5, r = q * q;
  return (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
         (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
}
}  // namespace

double chi_square_upper_quantile(double tail, int dof) {
  if (!(tail > 0 && tail < 1) || dof < 1) throw DetectorInputError("chi-square quantile: tail in (0,1), dof >= 1");
  if (dof == 1) {  // exact: X = Z^2
    const double z1 = normal_upper_quantile(tail / 2);
    return z1 * z1;
  }
  const double z = normal_upper_quantile(tail);
  const double k = static_cast<double>(dof), h = 2.0 / (9.0 * k);
  const double v = 1.0 - h + z * std::sqrt(h);
  return k * v * v * v;
}

Eigen::VectorXi flag_above(const Eigen::VectorXd& scores, double threshold) {
  return (scores.array() > threshold).cast<int>();
}

}  // namespace stackscope::analyze

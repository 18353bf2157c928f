#include "analyze/thresholds.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "analyze/detector.h"

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

Eigen::VectorXi flag_above(const Eigen::VectorXd& scores, double threshold) {
  return (scores.array() > threshold).cast<int>();
}

}  // namespace stackscope::analyze

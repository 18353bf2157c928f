// Turning scores into decisions: a threshold set at a quantile of the training scores.
#pragma once
#include <Eigen/Dense>
#include <span>

namespace stackscope::analyze {

// The q-quantile (0 <= q <= 1) of `scores`, linearly interpolated between order statistics (numpy's default).
// Throws DetectorInputError on empty input, q outside [0,1] or a non-finite score.
double threshold_at_quantile(std::span<const double> scores, double q);
double threshold_at_quantile(const Eigen::VectorXd& scores, double q);

// Upper quantile of the chi-square distribution with `dof` degrees of freedom: x with P(X > x) = tail.
// Wilson-Hilferty approximation (relative error under 1% for dof >= 1 and tail >= 1e-9): a Mahalanobis radius.
double chi_square_upper_quantile(double tail, int dof);

// 1 where score > threshold, else 0.
Eigen::VectorXi flag_above(const Eigen::VectorXd& scores, double threshold);

}  // namespace stackscope::analyze

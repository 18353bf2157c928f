// Turning scores into decisions: a threshold set at a quantile of the training scores.
#pragma once
#include <Eigen/Dense>
#include <span>

namespace stackscope::analyze {

// The q-quantile (0 <= q <= 1) of `scores`, linearly interpolated between order statistics (numpy's default).
// Throws DetectorInputError on empty input, q outside [0,1] or a non-finite score.
double threshold_at_quantile(std::span<const double> scores, double q);
double threshold_at_quantile(const Eigen::VectorXd& scores, double q);

// 1 where score > threshold, else 0.
Eigen::VectorXi flag_above(const Eigen::VectorXd& scores, double threshold);

}  // namespace stackscope::analyze

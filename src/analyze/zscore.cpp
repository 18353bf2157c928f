#include "analyze/zscore.h"

#include <algorithm>
#include <cmath>

#include "analyze/input_checks.h"

namespace stackscope::analyze {

void ZScore::fit(const Eigen::MatrixXd& x) {
  require_finite_matrix(x, "zscore fit", 2);
  mean_ = x.colwise().mean().transpose();
  const double n = static_cast<double>(x.rows());
  std_.resize(x.cols());
  for (Eigen::Index c = 0; c < x.cols(); ++c) {
    const double var = (x.col(c).array() - mean_(c)).square().sum() / (n - 1.0);
    const double floor = opt_.min_relative_std * std::max(1.0, std::abs(mean_(c)));
    std_(c) = std::max(std::sqrt(var), floor);
  }
}

Eigen::MatrixXd ZScore::z(const Eigen::MatrixXd& x) const {
  require_scoring_input(x, mean_.size(), "zscore score");
  return (x.rowwise() - mean_.transpose()).array().rowwise() / std_.transpose().array();
}

Eigen::VectorXd ZScore::score(const Eigen::MatrixXd& x) const {
  const Eigen::ArrayXXd a = z(x).array().abs();
  if (opt_.aggregate == ZScoreOptions::Aggregate::max_abs) return a.rowwise().maxCoeff().matrix();
  return a.rowwise().mean().matrix();
}

}  // namespace stackscope::analyze

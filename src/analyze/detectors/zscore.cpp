#include "analyze/detectors/zscore.h"

#include <algorithm>
#include <cmath>

#include "analyze/detectors/input_checks.h"

namespace stackscope::analyze {

void ZScore::fit(const Eigen::MatrixXd& x) {
  require_finite_matrix(x, "zscore fit", 2);
  const FeatureScaling s = FeatureScaling::fit(x, opt_.floor);
  mean_ = s.center();
  std_ = s.scale();
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

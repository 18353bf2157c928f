#include "analyze/detectors/feature_scaling.h"

namespace stackscope::analyze {

std::vector<Eigen::Index> constant_columns(const Eigen::MatrixXd& x) {
  std::vector<Eigen::Index> out;
  for (Eigen::Index c = 0; c < x.cols(); ++c)
    if (x.rows() == 0 || (x.col(c).array() == x(0, c)).all()) out.push_back(c);
  return out;
}

FeatureScaling FeatureScaling::fit(const Eigen::MatrixXd& x, const ScaleFloor& floor) {
  FeatureScaling s;
  const Eigen::Index d = x.cols();
  s.center_ = x.rows() ? Eigen::VectorXd(x.colwise().mean().transpose()) : Eigen::VectorXd::Zero(d);
  s.scale_ = Eigen::VectorXd::Ones(d);
  s.min_variance_ = Eigen::VectorXd::Zero(d);
  s.constant_ = constant_columns(x);
  for (Eigen::Index c = 0; c < d; ++c) {
    const double sd =
        x.rows() > 1 ? std::sqrt((x.col(c).array() - s.center_(c)).square().sum() / double(x.rows() - 1)) : 0.0;
    const double f = floor.of(s.center_(c));
    const double scale = std::max(sd, f);
    if (scale > 0) s.scale_(c) = scale;
    s.min_variance_(c) = f > 0 ? (f / s.scale_(c)) * (f / s.scale_(c)) : 0.0;
  }
  return s;
}

FeatureScaling FeatureScaling::identity(Eigen::Index d) {
  FeatureScaling s;
  s.center_ = Eigen::VectorXd::Zero(d);
  s.scale_ = Eigen::VectorXd::Ones(d);
  s.min_variance_ = Eigen::VectorXd::Zero(d);
  return s;
}

}  // namespace stackscope::analyze

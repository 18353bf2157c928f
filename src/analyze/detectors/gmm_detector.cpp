#include "analyze/detectors/gmm_detector.h"

#include <cmath>

#include "analyze/detectors/input_checks.h"

namespace stackscope::analyze {

void GmmDetector::fit(const Eigen::MatrixXd& input) {
  require_finite_matrix(input, "gmm fit", 1);
  scaling_ = opt_.standardize ? FeatureScaling::fit(input, opt_.floor) : FeatureScaling::identity(input.cols());
  Eigen::MatrixXd buffer;
  const Eigen::MatrixXd& x = opt_.standardize ? (buffer = scaling_.apply(input)) : input;
  EmOptions em{.components = std::max(1, opt_.components),
               .covariance = opt_.covariance,
               .max_iterations = opt_.max_iterations,
               .tolerance = opt_.tolerance,
               .reg_covar = opt_.reg_covar,
               .restarts = opt_.restarts,
               .seed = opt_.seed};
  em.min_variance = opt_.standardize && opt_.floor.active() ? scaling_.min_variance() : opt_.min_variance;
  bic_.clear();
  fit_ = opt_.components > 0 ? EmFitter(em).fit(x) : fit_gmm_by_bic(x, em, opt_.max_components, &bic_, opt_.min_component_fraction);
  fitted_ = true;
}

const Eigen::MatrixXd& GmmDetector::prepared(const Eigen::MatrixXd& x, Eigen::MatrixXd& buffer) const {
  if (!fitted_) throw DetectorInputError("gmm score: score called before fit");
  if (!opt_.standardize) return x;  // no copy on the scoring fast path; the mixture checks x itself
  require_scoring_input(x, scaling_.columns(), "gmm score");
  buffer = scaling_.apply(x);
  return buffer;
}

Eigen::VectorXd GmmDetector::score(const Eigen::MatrixXd& x) const {
  Eigen::VectorXd log_density;
  Eigen::VectorXi component;
  Eigen::MatrixXd buffer;
  fit_.model.best_component(prepared(x, buffer), log_density, component);
  // Density in the original units: p(x) = p(z) / prod(scale).
  if (opt_.standardize) log_density.array() -= scaling_.log_scale_sum();
  return -log_density;
}

Eigen::VectorXi GmmDetector::most_likely_component(const Eigen::MatrixXd& x) const {
  Eigen::VectorXd log_density;
  Eigen::VectorXi component;
  Eigen::MatrixXd buffer;
  fit_.model.best_component(prepared(x, buffer), log_density, component);
  return component;
}

Eigen::VectorXd GmmDetector::squared_mahalanobis(const Eigen::MatrixXd& x) const {
  Eigen::VectorXd log_density;
  Eigen::VectorXi component;
  Eigen::MatrixXd buffer;
  fit_.model.best_component(prepared(x, buffer), log_density, component);
  // log N = log_det_k - d/2 log(2 pi) - m^2 / 2
  const double half_d_log2pi = 0.5 * static_cast<double>(x.cols()) * std::log(2.0 * M_PI);
  Eigen::VectorXd m2(x.rows());
  for (Eigen::Index i = 0; i < x.rows(); ++i)
    m2(i) = std::max(0.0, -2.0 * (log_density(i) - fit_.model.log_det_precision_cholesky()(component(i)) + half_d_log2pi));
  return m2;
}

Eigen::VectorXi GmmDetector::flag_beyond_radius(const Eigen::MatrixXd& x, double r2) const {
  return (squared_mahalanobis(x).array() > r2).cast<int>();
}

Eigen::MatrixXd GmmDetector::feature_deviations(const Eigen::MatrixXd& input) const {
  const Eigen::VectorXi comp = most_likely_component(input);
  Eigen::MatrixXd buffer;
  const Eigen::MatrixXd& x = prepared(input, buffer);
  Eigen::MatrixXd z(x.rows(), x.cols());
  const auto& m = fit_.model;
  for (Eigen::Index i = 0; i < x.rows(); ++i) {
    z.row(i) = (x.row(i) - m.means().row(comp(i))).array() / m.variances(comp(i)).transpose().array().sqrt();
  }
  return z;
}

}  // namespace stackscope::analyze

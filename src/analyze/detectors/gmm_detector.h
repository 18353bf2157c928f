// eACGM's detector (§IV, Definition 1, Algorithm 2): fit a Gaussian mixture by EM, then flag an item when its
// density under the most likely component, p(x|theta_k) with k = argmax_k p(x|theta_k), is below delta.
// score(x) = -log max_k p(x|theta_k), so "density < delta" is "score > -log delta" (higher is more anomalous),
// and scores stay finite where densities underflow.
#pragma once
#include <Eigen/Dense>
#include <cmath>
#include <string>
#include <vector>

#include "analyze/detectors/detector.h"
#include "analyze/detectors/em_fitter.h"
#include "analyze/detectors/feature_scaling.h"
#include "analyze/detectors/gaussian_mixture.h"

namespace stackscope::analyze {

struct GmmDetectorOptions {
  int components = 0;      // 0: chosen by BIC among 1..max_components
  int max_components = 8;
  // BIC selection only: every component must hold this share of the rows (and at least d + 1 rows).
  double min_component_fraction = 0.01;
  CovarianceType covariance = CovarianceType::full;
  int restarts = 3;
  int max_iterations = 100;
  double tolerance = 1e-3;
  double reg_covar = 1e-6;
  uint64_t seed = 0;
  // Standardise the features first (feature_scaling.h), so that reg_covar and the k-means++ start mean the same
  // for every feature. Scores stay -log densities in the original units (the scaling's log Jacobian is added
  // back), so delta keeps its meaning.
  bool standardize = false;
  // With standardize: floor on the standardising deviations, and on every component's variance (no component
  // is narrower than the floor in any feature, so a feature constant in training scores a departure finitely).
  ScaleFloor floor{};
  // Without standardize: per feature, the smallest variance of any component in the caller's units (empty:
  // none besides reg_covar).
  Eigen::VectorXd min_variance{};
};

class GmmDetector final : public AnomalyDetector {
 public:
  explicit GmmDetector(GmmDetectorOptions options = {}) : opt_(options) {}
  std::string name() const override { return "gmm"; }
  void fit(const Eigen::MatrixXd& x) override;
  // -log of the density under the most likely component.
  Eigen::VectorXd score(const Eigen::MatrixXd& x) const override;
  // The score threshold equivalent to the paper's density threshold delta.
  static double threshold_for_delta(double delta) { return -std::log(delta); }

  // Definition 1 with delta set per component: delta_k is component k's density at squared Mahalanobis radius
  // r2 (e.g. a chi-square quantile), so an item is flagged when it lies farther than that radius from its most
  // likely component. Unlike one global delta this does not depend on the components' volumes.
  Eigen::VectorXi flag_beyond_radius(const Eigen::MatrixXd& x, double r2) const;
  // Squared Mahalanobis distance of each row to its most likely component.
  Eigen::VectorXd squared_mahalanobis(const Eigen::MatrixXd& x) const;

  // Per-feature deviation of each row from its most likely component, in that component's standard
  // deviations (signed): which feature makes an item anomalous.
  Eigen::MatrixXd feature_deviations(const Eigen::MatrixXd& x) const;
  Eigen::VectorXi most_likely_component(const Eigen::MatrixXd& x) const;

  const GaussianMixture& model() const { return fit_.model; }
  const EmResult& fit_result() const { return fit_; }
  int chosen_components() const { return static_cast<int>(fit_.model.components()); }
  const std::vector<double>& bic_by_components() const { return bic_; }  // empty when K was given
  const GmmDetectorOptions& options() const { return opt_; }
  // Feature scaling applied before the mixture (identity without standardize); model() is in scaled units.
  const FeatureScaling& scaling() const { return scaling_; }

 private:
  // x in the model's units: x itself without standardize, else checked and scaled into `buffer`.
  const Eigen::MatrixXd& prepared(const Eigen::MatrixXd& x, Eigen::MatrixXd& buffer) const;
  FeatureScaling scaling_;
  GmmDetectorOptions opt_;
  EmResult fit_;
  std::vector<double> bic_;
  bool fitted_ = false;
};

}  // namespace stackscope::analyze

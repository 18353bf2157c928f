// A fitted Gaussian mixture (the model alone; fitting lives in em_fitter.h). Holds precomputed precision
// Cholesky factors and log-determinants so that scoring is one triangular transform per component.
#pragma once
#include <Eigen/Dense>
#include <vector>

#include "analyze/detectors/covariance_constraint.h"

namespace stackscope::analyze {

class GaussianMixture {
 public:
  GaussianMixture() = default;
  // weights: K (sum to 1), means: K x d (one row per component), covariances: K matrices d x d, or for a
  // diagonal type K columns d x 1 of variances (a d x d one given is reduced to its diagonal). Throws
  // DetectorInputError when a covariance is not positive definite.
  GaussianMixture(Eigen::VectorXd weights, Eigen::MatrixXd means, std::vector<Eigen::MatrixXd> covariances,
                  CovarianceType type);

  Eigen::Index components() const { return weights_.size(); }
  Eigen::Index dims() const { return means_.cols(); }
  CovarianceType covariance_type() const { return type_; }
  const Eigen::VectorXd& weights() const { return weights_; }
  const Eigen::MatrixXd& means() const { return means_; }
  // d x d (full) or d x 1 variances (diagonal): see the constructor.
  const std::vector<Eigen::MatrixXd>& covariances() const { return covariances_; }
  // Component c's variances (the covariance's diagonal), whatever the type.
  Eigen::VectorXd variances(Eigen::Index c) const;

  // N x K: log N(x_i | mu_k, Sigma_k), the component densities without their weights.
  Eigen::MatrixXd component_log_densities(const Eigen::MatrixXd& x) const;
  // N: log p(x_i) = log sum_k pi_k N(x_i | k).
  Eigen::VectorXd log_likelihood(const Eigen::MatrixXd& x) const;
  double mean_log_likelihood(const Eigen::MatrixXd& x) const { return log_likelihood(x).mean(); }
  // N x K posterior probabilities of the components.
  Eigen::MatrixXd responsibilities(const Eigen::MatrixXd& x) const;
  // eACGM Algorithm 2: for each row the component with the highest density p(x|theta_k) and that log density.
  // Computed block-wise without an N x K temporary.
  void best_component(const Eigen::MatrixXd& x, Eigen::VectorXd& log_density, Eigen::VectorXi& component) const;

  // Free parameters: (K-1) weights + K*d means + K covariance parameters.
  Eigen::Index free_parameters() const;
  // Bayesian information criterion on x: -2 log L + p ln N (lower is better).
  double bic(const Eigen::MatrixXd& x) const;

  // out (rows x K) = log N(x_i | k) for rows [begin, begin + rows) of x (no input checks: the fitter's E-step).
  void log_densities_block(const Eigen::MatrixXd& x, Eigen::Index begin, Eigen::Index rows,
                           Eigen::MatrixXd& out) const;

  // Inputs of the fast kernels, exposed for the fitter (E-step) and tests.
  const std::vector<Eigen::MatrixXd>& precision_cholesky() const { return prec_chol_; }  // upper-triangular
  const Eigen::VectorXd& log_det_precision_cholesky() const { return log_det_; }          // = -0.5 log|Sigma_k|

 private:
  Eigen::VectorXd weights_;
  Eigen::MatrixXd means_;
  std::vector<Eigen::MatrixXd> covariances_;
  CovarianceType type_ = CovarianceType::full;
  std::vector<Eigen::MatrixXd> prec_chol_;  // P_k with P_k P_k^T = Sigma_k^-1; diagonal: d x 1, 1 / sd
  Eigen::MatrixXd shifted_means_;           // d x K: (mu_k^T P_k)^T, so y = x P_k - mu_k^T P_k
  Eigen::MatrixXd inv_std_;                 // K x d, diagonal case
  Eigen::VectorXd log_det_;                 // sum log diag(P_k)
  Eigen::VectorXd log_weights_;
};

}  // namespace stackscope::analyze

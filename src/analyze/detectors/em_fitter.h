// Fits a GaussianMixture by Expectation-Maximisation (eACGM Algorithm 1), started from k-means++ / k-means
// labels, with several restarts (best mean log-likelihood wins) and covariance regularisation. The covariance
// constraint (full or diagonal) is a policy from covariance_constraint.h.
#pragma once
#include <Eigen/Dense>
#include <cstdint>
#include <vector>

#include "analyze/detectors/covariance_constraint.h"
#include "analyze/detectors/gaussian_mixture.h"

namespace stackscope::analyze {

struct EmOptions {
  int components = 1;
  CovarianceType covariance = CovarianceType::full;
  int max_iterations = 100;
  double tolerance = 1e-3;   // on the change of the mean log-likelihood (scikit-learn's tol)
  double reg_covar = 1e-6;   // added to covariance diagonals (scikit-learn's reg_covar)
  // Per feature, the smallest variance any component may have (after reg_covar); empty: no floor.
  Eigen::VectorXd min_variance{};
  int restarts = 1;          // independent initialisations; the best mean log-likelihood is kept
  int kmeans_iterations = 10;  // Lloyd steps after k-means++ seeding, for the initial responsibilities
  uint64_t seed = 0;
};

struct EmResult {
  GaussianMixture model;
  double mean_log_likelihood = 0;  // of the training data under `model`
  int iterations = 0;              // EM iterations of the kept run
  bool converged = false;
};

class EmFitter {
 public:
  explicit EmFitter(EmOptions options = {});
  // Throws DetectorInputError on non-finite input, fewer rows than components or a min_variance of the wrong
  // size.
  EmResult fit(const Eigen::MatrixXd& x) const;

  // The pieces, exposed so benchmarks can time EM iterations from the same start as another implementation.
  // Initial model: k-means++ seeding, a few Lloyd steps, then one M-step on the hard labels.
  GaussianMixture initial_model(const Eigen::MatrixXd& x, uint64_t seed) const;
  // M-step from responsibilities (N x K).
  GaussianMixture maximize(const Eigen::MatrixXd& x, const Eigen::MatrixXd& resp) const;
  // E-step: responsibilities (N x K) of `model`; returns the mean log-likelihood.
  static double expect(const GaussianMixture& model, const Eigen::MatrixXd& x, Eigen::MatrixXd& resp);
  // EM from `start` until convergence or max_iterations.
  EmResult run(const Eigen::MatrixXd& x, GaussianMixture start) const;

  const EmOptions& options() const { return opt_; }

 private:
  EmOptions opt_;
};

// Fits K = 1..max_components and returns the fit with the lowest BIC (bic_by_k[K-1] holds each BIC).
// A fit with a component holding fewer than max(d + 1, min_component_fraction * N) rows is not eligible:
// a handful of outliers would otherwise buy their own narrow component and look normal.
EmResult fit_gmm_by_bic(const Eigen::MatrixXd& x, EmOptions options, int max_components,
                        std::vector<double>* bic_by_k = nullptr, double min_component_fraction = 0.01);

}  // namespace stackscope::analyze

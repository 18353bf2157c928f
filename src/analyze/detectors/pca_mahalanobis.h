// PCA-Mahalanobis baseline (Reveal §4.3): standardise, project onto the principal components that keep a
// fraction of the variance (default 95%), and score a row by its Mahalanobis distance to the training centre
// in that subspace (each component scaled by its own variance).
#pragma once
#include <Eigen/Dense>
#include <string>

#include "analyze/detectors/detector.h"
#include "analyze/detectors/feature_scaling.h"

namespace stackscope::analyze {

struct PcaMahalanobisOptions {
  double variance_fraction = 0.95;  // keep the fewest components whose eigenvalues sum to at least this share
  bool standardize = true;          // divide features by their training std first (scales differ by decades)
  // Floor on those standard deviations (feature_scaling.h). With a floor, a column constant in training is an
  // axis of its own with the floor as its standard deviation, so that moving it scores; without, it is left out.
  ScaleFloor floor{};
  // Components with eigenvalue below this share of the largest are dropped: they carry no variance to scale by.
  double min_relative_eigenvalue = 1e-12;
};

class PcaMahalanobis final : public AnomalyDetector {
 public:
  explicit PcaMahalanobis(PcaMahalanobisOptions options = {});
  std::string name() const override { return "pca"; }
  // Needs at least 2 rows. A constant column is allowed (left out, or its own axis with a floor).
  void fit(const Eigen::MatrixXd& x) override;
  // Mahalanobis distance (not squared) in the kept subspace.
  Eigen::VectorXd score(const Eigen::MatrixXd& x) const override;

  // Per-component standardised coordinates (rows x kept components): squared, they sum to score^2.
  Eigen::MatrixXd project(const Eigen::MatrixXd& x) const;
  Eigen::Index components() const { return basis_.cols(); }
  // Of the kept components, descending, then (with a floor) the constant columns' floor variances.
  const Eigen::VectorXd& eigenvalues() const { return eigenvalues_; }
  const Eigen::MatrixXd& basis() const { return basis_; }              // features x kept components
  double explained_variance() const { return explained_; }             // share actually kept
  const PcaMahalanobisOptions& options() const { return opt_; }

 private:
  PcaMahalanobisOptions opt_;
  Eigen::VectorXd mean_, scale_, eigenvalues_;
  Eigen::MatrixXd basis_;
  Eigen::MatrixXd whitening_;  // features x components: basis / sqrt(eigenvalue) / scale, precomputed for scoring
  double explained_ = 0;
};

}  // namespace stackscope::analyze

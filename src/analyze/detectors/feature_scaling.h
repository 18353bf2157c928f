// Per-feature standardisation shared by the detectors (z-score, k-means, DBSCAN, PCA-Mahalanobis, the GMM when
// asked): centre by the training mean and divide by the training standard deviation, floored. The floor is
// the variance floor of the models: a feature that hardly moves in training (5 calls/s in every window) must
// not turn a change of one call into thousands of standard deviations, and a feature that never moves in
// training (a synchronisation call that never happened) must still score a departure, finitely.
#pragma once
#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <vector>

namespace stackscope::analyze {

struct ScaleFloor {
  double relative = 0;  // the scale is at least relative * |training mean|
  double absolute = 0;  // ... and at least this, in the feature's own units
  double of(double mean) const { return std::max(relative * std::abs(mean), absolute); }
  bool active() const { return relative > 0 || absolute > 0; }
};

// Columns whose training values are all equal.
std::vector<Eigen::Index> constant_columns(const Eigen::MatrixXd& x);

class FeatureScaling {
 public:
  FeatureScaling() = default;
  // Learns each column's centre and scale = max(standard deviation, floor) from x (at least one row). A column
  // whose scale would still be 0 (constant, no floor) keeps scale 1: it is only centred.
  static FeatureScaling fit(const Eigen::MatrixXd& x, const ScaleFloor& floor);
  // Centre 0, scale 1 for d columns (standardisation switched off).
  static FeatureScaling identity(Eigen::Index d);

  Eigen::MatrixXd apply(const Eigen::MatrixXd& x) const {
    return (x.rowwise() - center_.transpose()).array().rowwise() / scale_.transpose().array();
  }
  const Eigen::VectorXd& center() const { return center_; }
  const Eigen::VectorXd& scale() const { return scale_; }
  Eigen::Index columns() const { return center_.size(); }
  // Per column (floor / scale)^2: the smallest variance a model of the scaled data should give the feature
  // (1 where the floor binds, below 1 elsewhere; 0 without a floor).
  const Eigen::VectorXd& min_variance() const { return min_variance_; }
  // sum log(scale): a density of the scaled data minus this is the density in the original units.
  double log_scale_sum() const { return scale_.array().log().sum(); }
  // Columns that were constant in the training data.
  const std::vector<Eigen::Index>& constant() const { return constant_; }

 private:
  Eigen::VectorXd center_, scale_, min_variance_;
  std::vector<Eigen::Index> constant_;
};

}  // namespace stackscope::analyze

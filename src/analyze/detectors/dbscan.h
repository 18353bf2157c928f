// DBSCAN (Ester et al. 1996) as an anomaly detector, eACGM's density baseline: training points with at least
// min_points neighbours within eps are core points; a row's score is its distance to the nearest core point in
// units of eps, so DBSCAN's own "noise" decision is score > 1.
#pragma once
#include <Eigen/Dense>
#include <cstdint>
#include <string>

#include "analyze/detectors/detector.h"
#include "analyze/detectors/feature_scaling.h"

namespace stackscope::analyze {

struct DbscanOptions {
  double eps = 0;      // neighbourhood radius (in standardised units when standardize); 0: chosen from the data
  int min_points = 5;  // neighbours (the point included) that make a core point
  bool standardize = true;
  ScaleFloor floor{};  // floor on the standardising deviations (feature_scaling.h); none by default
  // Auto eps: this quantile of every point's distance to its min_points-th neighbour.
  double eps_quantile = 0.95;
  Eigen::Index max_train_rows = 20000;  // neighbour search is quadratic: a larger training set is sub-sampled
  uint64_t seed = 0;
};

class DbscanDetector final : public AnomalyDetector {
 public:
  explicit DbscanDetector(DbscanOptions options = {});
  std::string name() const override { return "dbscan"; }
  void fit(const Eigen::MatrixXd& x) override;
  Eigen::VectorXd score(const Eigen::MatrixXd& x) const override;

  double eps() const { return eps_; }  // the radius used (chosen or given)
  Eigen::Index core_points() const { return cores_.rows(); }
  int clusters() const { return clusters_; }
  // DBSCAN labels of the (possibly sub-sampled) training rows: cluster index, -1 for noise.
  const Eigen::VectorXi& training_labels() const { return labels_; }

 private:
  Eigen::MatrixXd transform(const Eigen::MatrixXd& x) const;
  DbscanOptions opt_;
  Eigen::VectorXd mean_, scale_;
  Eigen::MatrixXd cores_;
  Eigen::VectorXi labels_;
  double eps_ = 0;
  int clusters_ = 0;
};

}  // namespace stackscope::analyze

// DBSCAN (Ester et al. 1996) as an anomaly detector, eACGM's density baseline: training points with at least
// min_points neighbours within eps are core points; a row's score is its distance to the nearest core point in
// units of eps, so DBSCAN's own "noise" decision is score > 1. Neighbours are found with a kd-tree (nanoflann)
// where it prunes, by cache-blocked brute force where it cannot (high-dimensional noise); results are exact.
#pragma once
#include <Eigen/Dense>
#include <cstdint>
#include <memory>
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
  Eigen::Index max_train_rows = 20000;  // a larger training set is sub-sampled (bounds the fit's neighbour searches)
  uint64_t seed = 0;
  // The most brute-force distance terms (row x core point x column) one score() call may cost; the spatial index
  // makes most data far cheaper than that. 4e11 lets 1 M rows against 20,000 core points in 16 columns (3.2e11)
  // through with no help from the index (high-dimensional noise): 3.0e11 terms took 109 s of one core on the CI VM
  // (docs/benchmarks/analyze-scale.md). Past it score() refuses at once.
  double max_score_terms = 4e11;
  bool spatial_index = true;  // false: brute force throughout (the same results; for checking the index)
};

class DbscanDetector final : public AnomalyDetector {
 public:
  explicit DbscanDetector(DbscanOptions options = {});
  std::string name() const override { return "dbscan"; }
  void fit(const Eigen::MatrixXd& x) override;
  Eigen::VectorXd score(const Eigen::MatrixXd& x) const override;

  // How score(x) would search, and what it would cost in brute-force distance terms (row x core point x column;
  // brute force costs all of them): the spatial index where it prunes, else brute force. score() refuses past
  // max_score_terms.
  struct ScorePlan {
    bool spatial_index = false;
    double terms = 0;
  };
  ScorePlan plan_score(const Eigen::MatrixXd& x) const;

  double eps() const { return eps_; }  // the radius used (chosen or given)
  Eigen::Index core_points() const { return cores_.rows(); }
  int clusters() const { return clusters_; }
  // DBSCAN labels of the (possibly sub-sampled) training rows: cluster index, -1 for noise.
  const Eigen::VectorXi& training_labels() const { return labels_; }

 private:
  class PointIndex;  // nearest-neighbour searches (dbscan.cpp)
  Eigen::MatrixXd transform(const Eigen::MatrixXd& x) const;
  DbscanOptions opt_;
  Eigen::VectorXd mean_, scale_;
  Eigen::MatrixXd cores_;
  std::shared_ptr<const PointIndex> core_index_;  // over cores_; shared by copies (it never changes)
  Eigen::VectorXi labels_;
  double eps_ = 0;
  int clusters_ = 0;
};

}  // namespace stackscope::analyze

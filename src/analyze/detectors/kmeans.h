// k-means (Lloyd) with greedy k-means++ seeding: used to start EM and, as a detector, as eACGM's k-means
// baseline (score = distance to the nearest centre).
#pragma once
#include <Eigen/Dense>
#include <cstdint>
#include <random>
#include <string>

#include "analyze/detectors/detector.h"
#include "analyze/detectors/feature_scaling.h"

namespace stackscope::analyze {

struct KMeansOptions {
  int clusters = 8;
  int max_iterations = 100;
  double tolerance = 1e-4;  // stop when no centre moves more than this share of the data's mean variance
  int restarts = 1;         // keep the run with the lowest inertia
  uint64_t seed = 0;
};

struct KMeansResult {
  Eigen::MatrixXd centers;  // K x d
  Eigen::VectorXi labels;   // N
  double inertia = 0;       // sum of squared distances to the assigned centre
  int iterations = 0;
};

// Greedy k-means++ (scikit-learn's flavour: 2 + ln k candidates per step, keep the best). K x d.
Eigen::MatrixXd kmeans_plus_plus(const Eigen::MatrixXd& x, int clusters, std::mt19937_64& rng);
// Squared Euclidean distances N x K between rows of x and rows of centers (clamped at 0).
Eigen::MatrixXd squared_distances(const Eigen::MatrixXd& x, const Eigen::MatrixXd& centers);
// Throws DetectorInputError on non-finite input or fewer rows than clusters.
KMeansResult fit_kmeans(const Eigen::MatrixXd& x, const KMeansOptions& options);

struct KMeansDetectorOptions {
  KMeansOptions kmeans{.clusters = 8, .max_iterations = 100, .tolerance = 1e-4, .restarts = 3, .seed = 0};
  bool standardize = true;  // distances in training standard deviations (features differ in scale)
  ScaleFloor floor{};       // floor on those standard deviations (feature_scaling.h); none by default
  // Clusters holding less than this share of the training rows are not "normal" centres (a few outliers that
  // won a centre of their own must not score 0): scores are distances to the nearest large cluster.
  double min_cluster_fraction = 0.01;
};

class KMeansDetector final : public AnomalyDetector {
 public:
  explicit KMeansDetector(KMeansDetectorOptions options = {}) : opt_(options) {}
  std::string name() const override { return "kmeans"; }
  // Uses min(clusters, rows) clusters.
  void fit(const Eigen::MatrixXd& x) override;
  // Euclidean distance to the nearest centre (in standardised units when standardize is on).
  Eigen::VectorXd score(const Eigen::MatrixXd& x) const override;
  const KMeansResult& result() const { return result_; }
  const Eigen::MatrixXd& normal_centers() const { return normal_centers_; }  // standardised units

 private:
  Eigen::MatrixXd transform(const Eigen::MatrixXd& x) const;
  KMeansDetectorOptions opt_;
  KMeansResult result_;
  Eigen::MatrixXd normal_centers_;
  Eigen::VectorXd mean_, scale_;
};

}  // namespace stackscope::analyze

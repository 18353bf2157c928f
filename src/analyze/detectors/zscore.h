// Z-score baseline (Reveal §4.3): standardise each feature by the training mean and standard deviation and
// score a row by how far its features lie from the training centre, in standard deviations.
#pragma once
#include <Eigen/Dense>
#include <string>

#include "analyze/detectors/detector.h"
#include "analyze/detectors/feature_scaling.h"

namespace stackscope::analyze {

struct ZScoreOptions {
  enum class Aggregate { mean_abs, max_abs };
  // mean_abs: Reveal's "mean absolute Z-score" of a row; max_abs: the single worst feature.
  Aggregate aggregate = Aggregate::mean_abs;
  // Floor on a feature's standard deviation (feature_scaling.h): a constant training column does not divide by
  // zero; a test value that differs from that constant then scores very high, which it should.
  ScaleFloor floor{.relative = 1e-9, .absolute = 1e-9};
};

class ZScore final : public AnomalyDetector {
 public:
  explicit ZScore(ZScoreOptions options = {}) : opt_(options) {}
  std::string name() const override { return "zscore"; }
  // Needs at least 2 rows.
  void fit(const Eigen::MatrixXd& x) override;
  Eigen::VectorXd score(const Eigen::MatrixXd& x) const override;

  // Per-feature signed z-scores (rows x features): which feature deviates, for attribution.
  Eigen::MatrixXd z(const Eigen::MatrixXd& x) const;
  const Eigen::VectorXd& means() const { return mean_; }
  const Eigen::VectorXd& stddevs() const { return std_; }  // after the floor
  const ZScoreOptions& options() const { return opt_; }

 private:
  ZScoreOptions opt_;
  Eigen::VectorXd mean_, std_;
};

}  // namespace stackscope::analyze

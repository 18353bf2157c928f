// Reveal §4.3: three complementary unsupervised detectors over window features -- Z-score (mean |z| above its
// 99th percentile), Mahalanobis distance in the PCA subspace keeping 95% of the variance (99th percentile),
// Isolation Forest (1% contamination) -- and their agreement: a window's score rises with the number of
// detectors that flag it. The detectors are the engine's (zscore.h, pca_mahalanobis.h, isolation_forest.h).
#pragma once
#include <Eigen/Dense>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "analyze/detectors/isolation_forest.h"
#include "analyze/detectors/pca_mahalanobis.h"
#include "analyze/detectors/zscore.h"

namespace stackscope::analyze {

enum RevealDetectorBit : uint8_t { kRevealZ = 1, kRevealMaha = 2, kRevealIf = 4 };
// "Z", "MAHA", "IF" joined by ", " as in the paper's Table 4.
std::string reveal_methods_label(uint8_t flags);

struct RevealEnsembleOptions {
  double zscore_quantile = 0.99;
  double mahalanobis_quantile = 0.99;
  double iforest_contamination = 0.01;
  double pca_variance = 0.95;
  int iforest_trees = 100;
  uint64_t seed = 0;
  // With column resolutions (fit's second argument): no feature is standardised by less than
  // max(floor.relative x |its baseline mean|, floor.absolute x its resolution), so a column that hardly moved in
  // the baseline does not turn a change of one event or one page into thousands of standard deviations; and a
  // column constant in the baseline counts as departed only beyond constant_min_z such floors.
  ScaleFloor floor{.relative = 0.01, .absolute = 1};
  double constant_min_z = 5;
  // With resolutions, the Z detector's mean |z| counts no feature beyond this many standard deviations: one
  // bursty column (the variance of a page-fault rate, z in the thousands) must not decide a window over hundreds
  // of others; a departure of several metrics together, or any the other two detectors see, still does.
  double z_clip = 10;
};

struct RevealEnsembleResult {
  Eigen::VectorXd z, maha, iforest;  // raw detector scores per window
  double z_threshold = 0, maha_threshold = 0, iforest_threshold = 0;
  std::vector<uint8_t> flags;        // RevealDetectorBit per window
  // Agreement count (0..3) plus, in [0, 1), how far the window reaches toward the detectors' thresholds on
  // average (each score / its threshold, capped): ordered first by agreement, continuous within.
  Eigen::VectorXd score;
  size_t flagged() const;
};

class RevealEnsemble {
 public:
  explicit RevealEnsemble(RevealEnsembleOptions options = {});
  // Learns the workload's baseline from windows x features; thresholds are quantiles of these rows' scores.
  // Constant columns are left out of the three detectors; a later window in which one of them moves (an error
  // counter that was zero all through a clean warm-up) is flagged by the Z detector. resolution: per column the
  // smallest change that means anything in its units (feature_resolution in attribution.h; 0 = unknown), which
  // switches the scale floors of the options on; empty: no floors, and any move of a constant column counts.
  // departure_counts: per column whether leaving a constant baseline counts at all (empty: every column). The
  // pipeline keeps it to error/event counters: zero until something goes wrong, the departure is the claim;
  // a dynamic signal flat through a short warm-up (an idle core's softirqs) has no spread to measure one in.
  // Throws DetectorInputError (fewer than 3 rows, non-finite values, resolutions not one per column).
  void fit(const Eigen::MatrixXd& features, std::span<const double> resolution = {},
           const std::vector<bool>& departure_counts = {});
  RevealEnsembleResult evaluate(const Eigen::MatrixXd& features) const;
  const RevealEnsembleOptions& options() const { return opt_; }
  // Columns of the input the detectors use (the varying ones).
  const std::vector<Eigen::Index>& used_columns() const { return used_; }

 private:
  Eigen::MatrixXd select(const Eigen::MatrixXd& x) const;
  Eigen::VectorXd z_score(const Eigen::MatrixXd& selected) const;
  RevealEnsembleOptions opt_;
  Eigen::RowVectorXd unit_;  // per input column: what the detectors see is x / unit (resolutions; else 1)
  bool floored_ = false;
  std::vector<Eigen::Index> used_;
  // Columns constant through the fit and their value: one that moves later has an infinite z (see evaluate).
  std::vector<std::pair<Eigen::Index, double>> constant_;
  Eigen::Index input_cols_ = 0;
  ZScore z_;
  PcaMahalanobis pca_;
  IsolationForest iforest_;
  double z_thr_ = 0, maha_thr_ = 0, if_thr_ = 0;
  bool fitted_ = false;
};

}  // namespace stackscope::analyze

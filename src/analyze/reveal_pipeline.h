// Reveal's per-host pipeline over a window-feature matrix: ensemble detection (reveal_ensemble.h), then for
// each flagged window its attribution (attribution.h), then runs of flagged windows with the same subsystem
// joined into one anomaly. Pure: the CLI feeds it features from a recording, the NAB eval from a CSV file.
//
// Two forms: run_reveal_pipeline over a whole matrix, and RevealStreamingPipeline for recordings too long to
// hold as one (a week at a 1 s stride is 600k windows): it fits on a sample of the windows (all of them when
// there are few, which makes the two forms agree), then takes every window in time order and keeps only the
// flagged ones and four scores a window.
#pragma once
#include <Eigen/Dense>
#include <span>
#include <vector>

#include "analyze/attribution.h"
#include "analyze/reveal_ensemble.h"

namespace stackscope::analyze {

struct RevealWindowReport {
  size_t window = 0;
  uint8_t methods = 0;  // RevealDetectorBit
  double score = 0;
  WindowAttribution attribution;
};

struct RevealAnomaly {
  size_t first_window = 0, last_window = 0;  // inclusive
  Subsystem subsystem = Subsystem::cpu;
  uint8_t methods = 0;  // union over its windows
  double score = 0;     // max over its windows
  std::vector<Contribution> reasons;  // strongest per subject over its windows, strongest first
};

struct RevealPipelineOptions {
  RevealEnsembleOptions ensemble;
  AttributionOptions attribution;
  size_t min_windows = 5;  // fewer: no baseline to speak of, nothing is flagged
  size_t max_reasons_per_anomaly = 5;
};

struct RevealPipelineResult {
  RevealEnsembleResult ensemble;
  std::vector<RevealWindowReport> windows;  // flagged windows only, in time order
  std::vector<RevealAnomaly> anomalies;
  bool too_short = false;
};

// Throws std::invalid_argument / DetectorInputError when columns and matrix disagree or values are not finite.
RevealPipelineResult run_reveal_pipeline(const Eigen::MatrixXd& features, const std::vector<AttributedColumn>& columns,
                                         const RevealPipelineOptions& options = {});

class RevealStreamingPipeline {
 public:
  RevealStreamingPipeline(std::vector<AttributedColumn> columns, RevealPipelineOptions options = {});
  // Learns the baseline (detectors, thresholds, attribution medians) from `sample` (rows = windows) standing for
  // a run of total_windows windows; too short (nothing flagged) below options.min_windows.
  void fit(const Eigen::MatrixXd& sample, size_t total_windows);
  // Window `window`'s features; windows in increasing order, each once.
  void add_window(size_t window, std::span<const double> row);
  RevealPipelineResult finish();

 private:
  std::vector<AttributedColumn> columns_;
  RevealPipelineOptions opt_;
  RevealEnsemble ensemble_;
  FeatureBaseline baseline_;
  RevealPipelineResult out_;
  std::vector<double> z_, maha_, iforest_, score_;
  bool fitted_ = false;
};

}  // namespace stackscope::analyze

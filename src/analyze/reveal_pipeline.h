// Reveal's per-host pipeline over a window-feature matrix: ensemble detection (reveal_ensemble.h), then for
// each flagged window its attribution (attribution.h), then runs of flagged windows with the same subsystem
// joined into one anomaly. Pure: the CLI feeds it features from a recording, the NAB eval from a CSV file.
#pragma once
#include <Eigen/Dense>
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

}  // namespace stackscope::analyze

// Reveal's per-host pipeline over a window-feature matrix: ensemble detection (reveal_ensemble.h), then for
// each flagged window its attribution (attribution.h), then flagged windows that overlap or touch in time joined
// into one incident, reported when it persists or when detectors agree. The 99th-percentile thresholds flag
// about 1 % of the windows of any run by design, scattered and each by one detector; Reveal looks for
// "persistent and meaningful bottlenecks" (§4.4) and lets agreement between its detectors cut false positives
// (§4.3), so a lone window that one detector flagged stays a flagged window, not a report.
// Pure: the CLI feeds it features from a recording, the NAB eval from a CSV file.
//
// Two forms: run_reveal_pipeline over a whole matrix, and RevealStreamingPipeline for recordings too long to
// hold as one (a week at a 1 s stride is 600k windows): it fits on a sample of the windows (all of them when
// there are few, which makes the two forms agree), then takes every window in time order and keeps only the
// flagged ones and four scores a window.
#pragma once
#include <Eigen/Dense>
#include <optional>
#include <span>
#include <vector>

#include "analyze/reveal/attribution.h"
#include "analyze/reveal/reveal_ensemble.h"

namespace stackscope::analyze {

struct RevealWindowReport {
  size_t window = 0;
  uint8_t methods = 0;  // RevealDetectorBit
  double score = 0;
  WindowAttribution attribution;
};

// An incident: flagged windows at most merge_gap_windows apart, split where the attribution turns to another
// subsystem for merge_gap_windows flagged windows in a row (a shorter flicker stays inside: one window's top
// reasons often mix subsystems), with the subsystem carrying most of its reasons' weight (reason_weight) and every
// subsystem's share.
struct RevealAnomaly {
  size_t first_window = 0, last_window = 0;  // inclusive
  Subsystem subsystem = Subsystem::cpu;
  std::vector<std::pair<Subsystem, double>> subsystems;  // share of the reasons' weight, largest first
  uint8_t methods = 0;         // union over its windows
  size_t flagged_windows = 0;  // of first..last
  int agreement = 0;           // most detectors that agreed on one of its windows
  double score = 0;            // max over its windows
  std::vector<Contribution> reasons;  // strongest per subject over its windows, strongest first
};

struct RevealPipelineOptions {
  RevealEnsembleOptions ensemble;
  AttributionOptions attribution;
  size_t min_windows = 5;  // fewer: no baseline to speak of, nothing is flagged
  size_t max_reasons_per_anomaly = 5;
  // Flagged windows whose indices differ by at most this join one incident: window / stride makes windows that
  // overlap or touch in time one incident (the CLI does so).
  size_t merge_gap_windows = 1;
  // An incident is reported when it holds at least this many flagged windows (it outlasts a window: with 3 s /
  // 1 s windows, one odd sample is in 3 windows but rarely flagged in all of them) ...
  size_t min_incident_windows = 3;
  // ... or when at least this many detectors agree on one of its windows (all three: Z and Mahalanobis, both
  // standardised distances, agree with each other far more often than with the Isolation Forest).
  int min_agreement = 3;
  // Either way, an incident whose strongest reason departs from the baseline by fewer robust standard deviations
  // (attribution's z) is not reported unless it holds at least long_incident_windows flagged windows: the
  // 99th-percentile thresholds flag the most extreme 1 % of the windows of any data, white noise included, and
  // there its reasons reach z 2 to 6. 0: no such floor.
  double min_reason_z = 0;
  size_t long_incident_windows = 0;
  // Scale floors from the columns' resolutions (AttributedColumn::resolution): see RevealEnsembleOptions::floor.
  bool use_resolutions = true;
};

struct RevealPipelineResult {
  RevealEnsembleResult ensemble;
  std::vector<RevealWindowReport> windows;  // flagged windows only, in time order
  std::vector<RevealAnomaly> anomalies;     // reported incidents, in time order
  size_t unconfirmed_incidents = 0;         // incidents neither persistent nor agreed on: not reported
  bool too_short = false;
  bool no_detector_columns = false;  // every column static or pruned away: nothing for the detectors to see
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
  std::vector<double> resolution_;  // per column, when options.use_resolutions
  std::vector<Eigen::Index> detected_;  // the columns the detectors see (AttributedColumn::detect)
  Eigen::RowVectorXd detected_row_;
  // The incident being built: its first flagged window (index into out_.windows), the subsystem it is about, and
  // where a run of windows attributed elsewhere began (kNone: none).
  static constexpr size_t kNone = static_cast<size_t>(-1);
  struct Open {
    size_t first;
    Subsystem subsystem;
    size_t turn;
  };
  std::optional<Open> open_;
  // Closes the open incident as out_.windows[first, end); reports it if it persists or detectors agree.
  void close_incident(size_t end);
  bool fitted_ = false;
};

// Incidents strongest first: detector agreement and reach toward the thresholds (score), then length.
std::vector<const RevealAnomaly*> rank_incidents(const std::vector<RevealAnomaly>& incidents);

// The subsystems after the main one that carry at least min_share of an incident's reasons ("also memory 32%").
std::vector<std::pair<Subsystem, double>> secondary_subsystems(const RevealAnomaly& incident, double min_share = 0.2);

}  // namespace stackscope::analyze

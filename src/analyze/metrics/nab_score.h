// The Numenta Anomaly Benchmark's scoring (NAB, numenta/NAB nab/sweeper.py): each detection inside a labelled
// window earns a scaled sigmoid of how early it came (only the best one per window counts), each detection
// outside costs A_FP times a sigmoid of its distance past the previous window, each missed window costs A_FN;
// the first 15% of a file (at most 750 rows) is probationary and not scored. A corpus score is normalised
// to 0 for the null detector (detects nothing) and 100 for the perfect one (first row of every window).
#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace stackscope::analyze {

struct NabProfile {
  double tp_weight = 1.0;
  double fp_weight = 0.11;
  double fn_weight = 1.0;
  static NabProfile standard() { return {}; }
  static NabProfile reward_low_fp() { return {1.0, 0.22, 1.0}; }
  static NabProfile reward_low_fn() { return {1.0, 0.11, 2.0}; }
};

// NAB's label window as row indices [first, last], inclusive, into the file's rows.
struct NabWindow {
  size_t first = 0;
  size_t last = 0;
};

double nab_scaled_sigmoid(double relative_position);

// One file's points prepared for scoring: the weighted score each row would earn if detected.
struct NabFileScoring {
  std::vector<double> sweep_score;  // per row
  std::vector<int> window_of;       // per row: window index, -1 outside, -2 probationary
  size_t scored_windows = 0;        // windows with a non-probationary row
};
NabFileScoring nab_prepare(size_t rows, const std::vector<NabWindow>& windows, const NabProfile& profile,
                           double probation_percent = 0.15);

struct NabRawScore {
  double score = 0;  // sum of the best TP per window, FP costs, FN costs
  size_t tp = 0, fp = 0, fn = 0, tn = 0;  // point counts (NAB's counters)
  size_t windows = 0, windows_detected = 0;
};
// Rows with detected[i] true count as detections.
NabRawScore nab_score_file(const NabFileScoring& prepared, std::span<const uint8_t> detected, const NabProfile& profile);

// 100 * (raw - null) / (perfect - null), where null = -A_FN * scored windows (the null detector's raw score)
// and perfect = A_TP * label windows (NAB's runner counts every labelled window there, even one wholly inside
// a probationary period; 0 = the scored windows).
double nab_normalized(double raw_total, size_t total_windows, const NabProfile& profile, size_t label_windows = 0);

// NAB's threshold optimiser (optimizer.py over sweeper.calcScoreByThreshold): every distinct anomaly score in the
// corpus is tried as the threshold (rows scoring at or above it are detections) and the best corpus raw score
// wins. scores[f] holds file f's per-row anomaly scores.
struct NabThreshold {
  double threshold = 0;
  double raw = 0;
};
NabThreshold nab_best_threshold(std::span<const NabFileScoring> files, std::span<const std::vector<double>> scores,
                                const NabProfile& profile);

}  // namespace stackscope::analyze

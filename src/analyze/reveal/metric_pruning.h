// Reveal §4.1: correlation-driven metric pruning. Per workload, metrics whose Pearson |r| with an already
// chosen representative reaches the threshold (default 0.5) are marked redundant; the representative of a
// correlated group is chosen by a fixed priority table (utilisation and throughput first), then by the
// variance of its correlations (the more varied a metric's relations, the more it tells apart). The kept
// set is the union over workloads. Pure: saving and reusing the list is the caller's business.
#pragma once
#include <Eigen/Dense>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace stackscope::analyze {

struct PruningWorkload {
  std::string name;                  // for the report ("run-a", a recording path...)
  std::vector<std::string> metrics;  // column names
  Eigen::MatrixXd values;            // rows: time (e.g. window means), columns: metrics
  // Alternatively the metrics' correlation matrix (metrics x metrics), e.g. from a CorrelationAccumulator
  // when the rows are too many to hold; used when non-empty, and values is then ignored.
  Eigen::MatrixXd correlation;
};

struct PruningOptions {
  double threshold = 0.5;  // |r| at or above which two metrics are redundant
};

struct MetricGroup {
  std::string workload;
  std::string representative;
  std::vector<std::string> redundant;  // with their |r| to the representative
  std::vector<double> abs_r;
};

struct PruningResult {
  std::vector<std::string> kept;  // union over workloads, sorted
  std::vector<MetricGroup> groups;
  std::vector<std::string> constant;  // no variance in any workload: nothing to correlate, not kept
};

// Lower ranks first. Utilisation/busy, then throughput (bytes, packets, sectors, operations), memory usage,
// frequency/power, pressure/stall, then error/event counters and everything else.
int metric_priority(std::string_view metric_name);

// Pearson correlation matrix of the columns; columns without variance get r = 0 with every other column.
Eigen::MatrixXd pearson_correlation(const Eigen::MatrixXd& values);

// The same matrix as pearson_correlation, accumulated row by row in O(columns^2) memory whatever the row count.
class CorrelationAccumulator {
 public:
  explicit CorrelationAccumulator(size_t columns);
  void add(std::span<const double> row);  // throws std::invalid_argument on a wrong size or non-finite value
  Eigen::MatrixXd correlation();
  size_t rows() const { return n_; }

 private:
  void flush();
  size_t cols_, n_ = 0;
  Eigen::RowVectorXd shift_, sum_, max_abs_;  // sums of (x - shift), shift = the first row (numerical stability)
  Eigen::MatrixXd cross_;                     // sum of (x - shift)^T (x - shift)
  Eigen::MatrixXd block_;                     // rows waiting for one matrix product
  Eigen::Index block_rows_ = 0;
};

// Throws std::invalid_argument when a workload's names and columns disagree, or values are not finite.
PruningResult prune_metrics(const std::vector<PruningWorkload>& workloads, const PruningOptions& options = {});

}  // namespace stackscope::analyze

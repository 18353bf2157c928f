// Reveal §4.1: correlation-driven metric pruning. Per workload, metrics whose Pearson |r| with an already
// chosen representative reaches the threshold (default 0.5) are marked redundant; the representative of a
// correlated group is chosen by a fixed priority table (utilisation and throughput first), then by the
// variance of its correlations (the more varied a metric's relations, the more it tells apart). The kept
// set is the union over workloads. Pure: saving and reusing the list is the caller's business.
#pragma once
#include <Eigen/Dense>
#include <string>
#include <string_view>
#include <vector>

namespace stackscope::analyze {

struct PruningWorkload {
  std::string name;                  // for the report ("run-a", a recording path...)
  std::vector<std::string> metrics;  // column names
  Eigen::MatrixXd values;            // rows: time (e.g. window means), columns: metrics
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

// Throws std::invalid_argument when a workload's names and columns disagree, or values are not finite.
PruningResult prune_metrics(const std::vector<PruningWorkload>& workloads, const PruningOptions& options = {});

}  // namespace stackscope::analyze

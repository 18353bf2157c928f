// Reveal §4.4 and Table 4: for an anomalous window, the metric-feature pairs that drove it (largest robust
// deviation from the workload's baseline), their subsystem and a one-line claim; and the cross-host check
// (the HugePages case): a host whose whole-run level of a metric deviates from the other hosts.
#pragma once
#include <Eigen/Dense>
#include <string>
#include <vector>

#include "analyze/window_features.h"
#include "model/series.h"

namespace stackscope::analyze {

// What one feature column describes, for people.
struct AttributedColumn {
  std::string subject;  // series key, "cpu.util{cpu3}"
  Subsystem subsystem = Subsystem::cpu;
  WindowFeature feature = WindowFeature::mean;
};

// Per column: the median and a robust scale (1.4826 x MAD; the standard deviation where the MAD is 0, as for
// a counter that is mostly idle). Computed over all windows.
struct FeatureBaseline {
  Eigen::VectorXd centre, scale;
};
FeatureBaseline robust_baseline(const Eigen::MatrixXd& features);

struct Contribution {
  Eigen::Index column = 0;
  std::string subject;
  Subsystem subsystem = Subsystem::cpu;
  WindowFeature feature = WindowFeature::mean;
  double value = 0, expected = 0;
  double z = 0;  // (value - expected) / scale, capped at +-1e6
  std::string claim;
};

struct WindowAttribution {
  std::vector<Contribution> reasons;  // strongest first, one per subject
  Subsystem subsystem = Subsystem::cpu;  // the subsystem with the largest summed |z| among the reasons
  double subsystem_share = 0;            // its part of that sum: below 1 when several subsystems act together
};

struct AttributionOptions {
  size_t max_reasons = 5;
  double min_abs_z = 3.0;  // weaker deviations are not reasons (the first reason is always kept)
};

// Throws std::invalid_argument when columns and row sizes disagree.
WindowAttribution attribute_window(const Eigen::VectorXd& row, const FeatureBaseline& baseline,
                                   const std::vector<AttributedColumn>& columns, const AttributionOptions& options = {});

// "cpu.util{cpu0}: within-window mean is above the baseline (0.97 vs 0.04, z=+41)."
std::string attribution_claim(const std::string& subject, Subsystem subsystem, WindowFeature feature, double value,
                              double expected, double z);

// Cross-host comparison: one entry per host and metric (the whole-run level).
struct HostLevel {
  std::string host;
  std::string subject;  // series key, equal across hosts
  Subsystem subsystem = Subsystem::cpu;
  double level = 0;
};

struct CrossHostOptions {
  size_t min_hosts = 3;            // with two, neither host is "the odd one"
  double min_robust_z = 4.0;       // |level - median of the others| / robust scale of the others
  double min_relative_gap = 0.10;  // and at least this share of the cluster median (or of the host's level)
};

struct HostDeviation {
  std::string host, subject;
  Subsystem subsystem = Subsystem::cpu;
  double level = 0, cluster_median = 0, robust_z = 0;
  std::string claim;
};

// Deviations sorted by |robust_z|, largest first.
std::vector<HostDeviation> cross_host_deviations(const std::vector<HostLevel>& levels,
                                                 const CrossHostOptions& options = {});

}  // namespace stackscope::analyze

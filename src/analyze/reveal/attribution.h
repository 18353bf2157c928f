// Reveal §4.4 and Table 4: for an anomalous window, the metric-feature pairs that drove it (largest robust
// deviation from the workload's baseline), their subsystem and a one-line claim; and the cross-host check
// (the HugePages case): a host whose whole-run level of a metric deviates from the other hosts.
#pragma once
#include <Eigen/Dense>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "analyze/reveal/window_features.h"
#include "model/series.h"

namespace stackscope::analyze {

// What one feature column describes, for people.
struct AttributedColumn {
  std::string subject;  // series key, "cpu.util{cpu3}"
  Subsystem subsystem = Subsystem::cpu;
  WindowFeature feature = WindowFeature::mean;
  double resolution = 0;  // smallest change that means anything, in the feature's units (0: unknown)
  // The detectors see this column (a metric kept by pruning); false: attribution only (a metric pruned as
  // redundant, which can still be what a flagged window is about: disk reads pruned into the CPU time they
  // moved with).
  bool detect = true;
};

// The resolution of a window feature of a series in `unit` (its counters analysed per second): one event, one
// MiB, 1 % of a core (a jiffy a second), 1 ms of stall a second...; for the shape features (skewness, kurtosis,
// autocorrelation, KPSS), their sampling error on a 30-sample window (3 s at 100 ms), whatever the unit. 0 for a
// unit not in the table: no absolute floor.
double feature_resolution(std::string_view unit, WindowFeature feature);

// Per column: the median and a robust scale (1.4826 x MAD; the standard deviation where the MAD is 0, as for
// a counter that is mostly idle), floored at max(relative x |median|, the column's resolution) when resolutions
// are given. Computed over the baseline's windows.
struct FeatureBaseline {
  Eigen::VectorXd centre, scale;
};
FeatureBaseline robust_baseline(const Eigen::MatrixXd& features, std::span<const double> resolution = {},
                                double relative = 0);

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
  Subsystem subsystem = Subsystem::cpu;  // the subsystem with the largest summed reason_weight among the reasons
  double subsystem_share = 0;            // its part of that sum: below 1 when several subsystems act together
};

struct AttributionOptions {
  size_t max_reasons = 5;
  double min_abs_z = 3.0;  // weaker deviations are not reasons (the first reason is always kept)
  bool variance_via_std_dev = true;  // a variance column is no reason: its standard deviation is
};

// Throws std::invalid_argument when columns and row sizes disagree.
WindowAttribution attribute_window(const Eigen::VectorXd& row, const FeatureBaseline& baseline,
                                   const std::vector<AttributedColumn>& columns, const AttributionOptions& options = {});

// How much a reason counts toward naming a subsystem: log(1 + |z|). Beyond a few tens of robust deviations a
// reason is certain either way, and how far beyond says more about its unit (KiB paged in, against a resolution
// of one) than about its importance: three storage reasons at z ~2000 outweigh one memory reason at z ~5e5.
double reason_weight(double z);

// What a metric family stands for, for the claim ("irq.LOC{cpu3}" -> "local timer interrupts"); empty if unknown.
std::string_view metric_meaning(std::string_view subject);

// "cpu.util{cpu0} (cpu): within-window mean is above the baseline (0.97 vs 0.04, z=+41)."
std::string attribution_claim(const std::string& subject, Subsystem subsystem, WindowFeature feature, double value,
                              double expected, double z);

// Cross-host comparison (Reveal §6, the HugePages case: one node "persistently exhibited abnormally higher memory
// usage", found against the cluster baseline). One entry per host and metric.
struct HostLevel {
  std::string host;
  std::string subject;  // series key, equal across hosts
  Subsystem subsystem = Subsystem::cpu;
  double level = 0;             // whole-run mean (a static series: its value)
  std::vector<double> windows;  // per-window levels (window means; sums for event counters); empty: static
  double resolution = 0;        // smallest meaningful difference (feature_resolution of the mean); 0: unknown
};

struct CrossHostOptions {
  size_t min_hosts = 3;            // with two, neither host is "the odd one"
  double min_robust_z = 4.0;       // |gap| / scale, scale as below
  double min_relative_gap = 0.10;  // minimum effect: |gap| at least this share of max(|median|, |level|)
  // Persistence: at least this share of the host's windows lie beyond half the gap, on the gap's side. A burst
  // (one compile, one page-fault storm) moves a host's mean, not most of its windows.
  double min_persistence = 0.8;
  double min_scale_rel = 0.05;     // never trust a cluster spread tighter than this share of the median
};

struct HostDeviation {
  std::string host, subject;
  Subsystem subsystem = Subsystem::cpu;
  double level = 0;           // the host's level: the median of its windows (a static series: its value)
  double cluster_median = 0;  // median level of the other hosts
  double scale = 0;           // the spread the gap was measured in
  double robust_z = 0;        // (level - cluster_median) / scale
  double persistence = 1;     // share of the host's windows beyond half the gap
  std::string claim;
};

// Each host against the others (leave-one-out, so the odd host does not hide in its own baseline): level =
// median of the host's windows; baseline = median of the other hosts' levels; scale = the largest of 1.4826 x
// MAD of the other hosts' levels, the typical within-host spread of the windows (noise every host shows is no
// deviation), min_scale_rel x |median| and the metric's resolution (2.7 % of a core against 0 is no imbalance). A metric on which half the hosts or more deviate has no cluster
// baseline: none of them is reported. Sorted by |robust_z|, largest first.
std::vector<HostDeviation> cross_host_deviations(const std::vector<HostLevel>& levels,
                                                 const CrossHostOptions& options = {});

// What an operator reads: one line per deviating host, the subsystem with the most deviating metrics (ties: the
// larger summed |z|), its strongest metrics, and a claim.
struct HostReport {
  std::string host;
  Subsystem subsystem = Subsystem::cpu;
  std::vector<HostDeviation> metrics;  // of that subsystem, strongest first (at most max_metrics)
  size_t deviating_metrics = 0;        // over every subsystem
  std::string claim;
};
std::vector<HostReport> cross_host_reports(const std::vector<HostDeviation>& deviations, size_t max_metrics = 5);

}  // namespace stackscope::analyze

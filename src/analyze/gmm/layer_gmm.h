// eACGM's per-layer analysis (the engine half of `stackscope analyze --detector gmm`): one GMM per layer and
// event-name group (or per GPU for NVML) over per-event feature rows (features/layer_features.h); the items
// lying beyond the radius of their most likely component, and materially off on a log scale, become findings
// with the feature that deviates. Pure: feature rows in, findings out.
#pragma once
#include <Eigen/Dense>
#include <string>
#include <vector>

#include "analyze/features/layer_features.h"
#include "model/finding.h"

namespace stackscope::analyze {

struct GroupReport {
  std::string layer, subject;
  Eigen::Index rows = 0;
  int components = 0;
  size_t anomalies = 0;
  std::vector<std::string> features;
  std::string skipped;  // why no model was fitted
  double radius = 0;
};

// Fits the group's model and appends its findings (the worst kFindingsPerGroup; the count of all is in the
// report). Throws DetectorInputError for input the detector cannot take.
GroupReport analyze_layer_group(const FeatureGroup& g, const std::string& host, std::vector<Finding>& findings);

}  // namespace stackscope::analyze

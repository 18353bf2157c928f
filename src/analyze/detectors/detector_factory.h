// One place that turns a method name and its options into a detector (CLI, online scorer, benchmarks).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "analyze/detectors/dbscan.h"
#include "analyze/detectors/detector.h"
#include "analyze/detectors/gmm_detector.h"
#include "analyze/detectors/isolation_forest.h"
#include "analyze/detectors/kmeans.h"
#include "analyze/detectors/pca_mahalanobis.h"
#include "analyze/detectors/zscore.h"

namespace stackscope::analyze {

struct DetectorConfig {
  std::string method = "gmm";  // gmm | kmeans | iforest | dbscan | zscore | pca
  GmmDetectorOptions gmm;
  KMeansDetectorOptions kmeans;
  IsolationForestOptions iforest;
  DbscanOptions dbscan;
  ZScoreOptions zscore;
  PcaMahalanobisOptions pca;
};

const std::vector<std::string>& detector_methods();
// Throws DetectorInputError for an unknown method.
std::unique_ptr<AnomalyDetector> make_detector(const DetectorConfig& config);

}  // namespace stackscope::analyze

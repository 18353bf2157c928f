#include "analyze/detectors/detector_factory.h"

namespace stackscope::analyze {

const std::vector<std::string>& detector_methods() {
  static const std::vector<std::string> m{"gmm", "kmeans", "iforest", "dbscan", "zscore", "pca"};
  return m;
}

std::unique_ptr<AnomalyDetector> make_detector(const DetectorConfig& c) {
  if (c.method == "gmm") return std::make_unique<GmmDetector>(c.gmm);
  if (c.method == "kmeans") return std::make_unique<KMeansDetector>(c.kmeans);
  if (c.method == "iforest") return std::make_unique<IsolationForest>(c.iforest);
  if (c.method == "dbscan") return std::make_unique<DbscanDetector>(c.dbscan);
  if (c.method == "zscore") return std::make_unique<ZScore>(c.zscore);
  if (c.method == "pca") return std::make_unique<PcaMahalanobis>(c.pca);
  throw DetectorInputError("unknown detector method '" + c.method + "' (gmm, kmeans, iforest, dbscan, zscore, pca)");
}

}  // namespace stackscope::analyze

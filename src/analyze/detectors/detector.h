// The one interface every anomaly detector of the engine implements (GMM, k-means, Isolation Forest, DBSCAN,
// z-score, PCA-Mahalanobis). Rows are items, columns features. Plain classes: no globals, no I/O.
#pragma once
#include <Eigen/Dense>
#include <memory>
#include <stdexcept>
#include <string>

namespace stackscope::analyze {

// Bad input to a detector (NaN, too few rows...). The message names the row or column.
class DetectorInputError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

class AnomalyDetector {
 public:
  virtual ~AnomalyDetector() = default;
  virtual std::string name() const = 0;
  virtual void fit(const Eigen::MatrixXd& x) = 0;
  // Higher is more anomalous. One score per row.
  virtual Eigen::VectorXd score(const Eigen::MatrixXd& x) const = 0;
};

}  // namespace stackscope::analyze

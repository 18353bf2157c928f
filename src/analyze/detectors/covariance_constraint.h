// The covariance constraint of a Gaussian mixture as a small policy (mlpack's diagonal_constraint /
// positive_definite_constraint): the M-step hands in the empirical weighted covariance and the policy makes it
// what the model allows, regularised so that its Cholesky factor exists.
#pragma once
#include <Eigen/Dense>
#include <optional>
#include <string_view>

namespace stackscope::analyze {

enum class CovarianceType { full, diagonal };

std::string_view covariance_type_name(CovarianceType t);
std::optional<CovarianceType> parse_covariance_type(std::string_view s);  // "full" | "diag" | "diagonal"

struct FullCovariance {
  static constexpr CovarianceType type = CovarianceType::full;
  // Adds `reg` to the diagonal (scikit-learn's reg_covar): a constant feature or a component holding a single
  // point stays positive definite.
  static void apply(Eigen::MatrixXd& cov, double reg) {
    cov.diagonal().array() += reg;
    cov = cov.selfadjointView<Eigen::Lower>();  // symmetric to the last bit
  }
  // Free parameters of one component's covariance (for BIC).
  static Eigen::Index parameters(Eigen::Index d) { return d * (d + 1) / 2; }
};

// A diagonal covariance is held as a d x 1 column of variances: no d x d matrix (10,000 columns would make
// 800 MB per component) and no d^3 factorisation.
struct DiagonalCovariance {
  static constexpr CovarianceType type = CovarianceType::diagonal;
  static void apply(Eigen::MatrixXd& variances, double reg) { variances.array() += reg; }
  static Eigen::Index parameters(Eigen::Index d) { return d; }
};

// Raises each variance to at least min_variance (per feature; empty: no floor). Raising diagonal entries adds a
// non-negative diagonal matrix, so a full covariance stays positive definite.
// A d x 1 `cov` is a diagonal covariance's variances.
inline void floor_variances(Eigen::MatrixXd& cov, const Eigen::VectorXd& min_variance) {
  if (min_variance.size() != cov.rows()) return;
  if (cov.cols() == 1) cov.col(0) = cov.col(0).cwiseMax(min_variance);
  else cov.diagonal() = cov.diagonal().cwiseMax(min_variance);
}

}  // namespace stackscope::analyze

#include "analyze/pca_mahalanobis.h"

#include <cmath>
#include <string>

#include "analyze/input_checks.h"

namespace stackscope::analyze {

PcaMahalanobis::PcaMahalanobis(PcaMahalanobisOptions options) : opt_(options) {
  if (!(opt_.variance_fraction > 0.0 && opt_.variance_fraction <= 1.0))
    throw DetectorInputError("pca: variance fraction must be in (0, 1], got " + std::to_string(opt_.variance_fraction));
}

void PcaMahalanobis::fit(const Eigen::MatrixXd& x) {
  require_finite_matrix(x, "pca fit", 2);
  const Eigen::Index d = x.cols();
  mean_ = x.colwise().mean().transpose();
  Eigen::MatrixXd centered = x.rowwise() - mean_.transpose();
  scale_ = Eigen::VectorXd::Ones(d);
  if (opt_.standardize) {
    for (Eigen::Index c = 0; c < d; ++c) {
      const double sd = std::sqrt(centered.col(c).squaredNorm() / static_cast<double>(x.rows() - 1));
      if (sd > 0) scale_(c) = sd;  // a constant column stays 0 after centring and adds no variance
    }
    centered = centered.array().rowwise() / scale_.transpose().array();
  }
  const Eigen::MatrixXd cov = (centered.adjoint() * centered) / static_cast<double>(x.rows() - 1);
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> eig(cov);
  if (eig.info() != Eigen::Success) throw DetectorInputError("pca fit: eigen decomposition failed");
  // Eigen sorts ascending; walk from the largest.
  const Eigen::VectorXd ev = eig.eigenvalues().reverse();
  const Eigen::MatrixXd vecs = eig.eigenvectors().rowwise().reverse();
  const double total = ev.cwiseMax(0.0).sum();
  if (!(total > 0)) throw DetectorInputError("pca fit: every column is constant, there is no variance to model");
  Eigen::Index k = 0;
  double kept = 0;
  while (k < d && kept < opt_.variance_fraction * total * (1 - 1e-12)) {
    if (ev(k) <= opt_.min_relative_eigenvalue * ev(0)) break;
    kept += ev(k);
    ++k;
  }
  k = std::max<Eigen::Index>(k, 1);
  eigenvalues_ = ev.head(k);
  basis_ = vecs.leftCols(k);
  explained_ = eigenvalues_.sum() / total;
  whitening_ = basis_;
  for (Eigen::Index j = 0; j < k; ++j) whitening_.col(j) /= std::sqrt(eigenvalues_(j));
  whitening_ = whitening_.array().colwise() / scale_.array();
}

Eigen::MatrixXd PcaMahalanobis::project(const Eigen::MatrixXd& x) const {
  require_scoring_input(x, mean_.size(), "pca score");
  return (x.rowwise() - mean_.transpose()) * whitening_;
}

Eigen::VectorXd PcaMahalanobis::score(const Eigen::MatrixXd& x) const {
  return project(x).rowwise().norm();
}

}  // namespace stackscope::analyze

#include "analyze/detectors/pca_mahalanobis.h"

#include <cmath>
#include <string>

#include "analyze/detectors/input_checks.h"

namespace stackscope::analyze {

PcaMahalanobis::PcaMahalanobis(PcaMahalanobisOptions options) : opt_(options) {
  if (!(opt_.variance_fraction > 0.0 && opt_.variance_fraction <= 1.0))
    throw DetectorInputError("pca: variance fraction must be in (0, 1], got " + std::to_string(opt_.variance_fraction));
}

void PcaMahalanobis::fit(const Eigen::MatrixXd& x) {
  require_finite_matrix(x, "pca fit", 2);
  const Eigen::Index d = x.cols();
  // Without a floor a constant column stays 0 after centring and adds no variance.
  const FeatureScaling s = opt_.standardize ? FeatureScaling::fit(x, opt_.floor) : FeatureScaling::identity(d);
  mean_ = s.center();
  scale_ = s.scale();
  std::vector<Eigen::Index> own_axis;  // constant in training, floored: scored on an axis of their own
  if (opt_.standardize && opt_.floor.active())
    for (Eigen::Index c : s.constant())
      if (s.min_variance()(c) > 0) own_axis.push_back(c);
  const Eigen::MatrixXd centered = s.apply(x);
  const Eigen::MatrixXd cov = (centered.adjoint() * centered) / static_cast<double>(x.rows() - 1);
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> eig(cov);
  if (eig.info() != Eigen::Success) throw DetectorInputError("pca fit: eigen decomposition failed");
  // Eigen sorts ascending; walk from the largest.
  const Eigen::VectorXd ev = eig.eigenvalues().reverse();
  const Eigen::MatrixXd vecs = eig.eigenvectors().rowwise().reverse();
  const double total = ev.cwiseMax(0.0).sum();
  if (!(total > 0) && own_axis.empty())
    throw DetectorInputError("pca fit: every column is constant, there is no variance to model");
  Eigen::Index k = 0;
  double kept = 0;
  while (total > 0 && k < d && kept < opt_.variance_fraction * total * (1 - 1e-12)) {
    if (ev(k) <= opt_.min_relative_eigenvalue * ev(0)) break;
    kept += ev(k);
    ++k;
  }
  if (own_axis.empty()) k = std::max<Eigen::Index>(k, 1);
  explained_ = total > 0 ? kept / total : 1.0;
  // A constant column's covariance row is 0, so its unit vector is orthogonal to every kept component.
  const auto extra = static_cast<Eigen::Index>(own_axis.size());
  eigenvalues_.resize(k + extra);
  basis_ = Eigen::MatrixXd::Zero(d, k + extra);
  eigenvalues_.head(k) = ev.head(k);
  basis_.leftCols(k) = vecs.leftCols(k);
  for (Eigen::Index j = 0; j < extra; ++j) {
    const Eigen::Index c = own_axis[static_cast<size_t>(j)];
    eigenvalues_(k + j) = s.min_variance()(c);
    basis_(c, k + j) = 1.0;
  }
  k += extra;
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

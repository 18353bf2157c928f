#include "analyze/detectors/gaussian_mixture.h"

#include <cmath>
#include <numbers>
#include <string>

#include "analyze/detectors/detector.h"
#include "analyze/detectors/gmm_kernels.h"
#include "analyze/detectors/input_checks.h"

namespace stackscope::analyze {

namespace {
constexpr Eigen::Index kBlockRows = 256;  // a block's temporaries stay in L1/L2
}

std::string_view covariance_type_name(CovarianceType t) { return t == CovarianceType::full ? "full" : "diag"; }

std::optional<CovarianceType> parse_covariance_type(std::string_view s) {
  if (s == "full") return CovarianceType::full;
  if (s == "diag" || s == "diagonal") return CovarianceType::diagonal;
  return std::nullopt;
}

GaussianMixture::GaussianMixture(Eigen::VectorXd weights, Eigen::MatrixXd means,
                                 std::vector<Eigen::MatrixXd> covariances, CovarianceType type)
    : weights_(std::move(weights)), means_(std::move(means)), covariances_(std::move(covariances)), type_(type) {
  const Eigen::Index k = weights_.size(), d = means_.cols();
  if (k == 0 || means_.rows() != k || static_cast<Eigen::Index>(covariances_.size()) != k)
    throw DetectorInputError("gaussian mixture: weights, means and covariances disagree on the number of components");
  log_weights_ = weights_.array().log();
  prec_chol_.resize(static_cast<size_t>(k));
  shifted_means_.resize(d, k);
  inv_std_.resize(k, d);
  log_det_.resize(k);
  for (Eigen::Index c = 0; c < k; ++c) {
    Eigen::MatrixXd& cov = covariances_[static_cast<size_t>(c)];
    if (type_ == CovarianceType::diagonal) {
      if (cov.rows() == d && cov.cols() == d && d > 1) cov = Eigen::MatrixXd(cov.diagonal());
      if (cov.rows() != d || cov.cols() != 1)
        throw DetectorInputError("gaussian mixture: variances of component " + std::to_string(c) + " are not " +
                                 std::to_string(d) + "x1");
      if (!(cov.array() > 0).all() || !cov.allFinite())
        throw DetectorInputError("gaussian mixture: covariance of component " + std::to_string(c) +
                                 " is not positive definite (raise the covariance regularisation)");
      Eigen::MatrixXd& p = prec_chol_[static_cast<size_t>(c)];
      p = cov.array().rsqrt().matrix();
      shifted_means_.col(c) = means_.row(c).transpose().cwiseProduct(p.col(0));
      inv_std_.row(c) = p.col(0).transpose();
      log_det_(c) = p.array().log().sum();
      continue;
    }
    if (cov.rows() != d || cov.cols() != d)
      throw DetectorInputError("gaussian mixture: covariance " + std::to_string(c) + " is not " + std::to_string(d) +
                               "x" + std::to_string(d));
    Eigen::LLT<Eigen::MatrixXd> llt(cov);
    if (llt.info() != Eigen::Success || !(cov.diagonal().array() > 0).all())
      throw DetectorInputError("gaussian mixture: covariance of component " + std::to_string(c) +
                               " is not positive definite (raise the covariance regularisation)");
    // Sigma = L L^T, so Sigma^-1 = L^-T L^-1 = P P^T with P = L^-T (upper-triangular).
    const Eigen::MatrixXd linv =
        llt.matrixL().solve(Eigen::MatrixXd::Identity(d, d));
    Eigen::MatrixXd& p = prec_chol_[static_cast<size_t>(c)];
    p = linv.transpose();
    p.triangularView<Eigen::StrictlyLower>().setZero();
    shifted_means_.col(c) = (means_.row(c) * p).transpose();
    inv_std_.row(c) = p.diagonal().transpose();  // exact for a diagonal covariance
    log_det_(c) = p.diagonal().array().log().sum();
  }
}

void GaussianMixture::log_densities_block(const Eigen::MatrixXd& x, Eigen::Index begin, Eigen::Index rows,
                                          Eigen::MatrixXd& out) const {
  const Eigen::Index k = components(), d = dims();
  const double log2pi_term = -0.5 * static_cast<double>(d) * std::log(2.0 * std::numbers::pi);
  out.resize(rows, k);
  if (type_ == CovarianceType::diagonal) {
    for (Eigen::Index c = 0; c < k; ++c)
      kernels::squared_mahalanobis_diagonal(x.data(), x.rows(), begin, rows, d,
                                            prec_chol_[static_cast<size_t>(c)].data(), shifted_means_.col(c).data(),
                                            out.col(c).data());
  } else {
    for (Eigen::Index c = 0; c < k; ++c) {
      kernels::squared_mahalanobis_upper(x.data(), x.rows(), begin, rows, d, prec_chol_[static_cast<size_t>(c)].data(),
                                         shifted_means_.col(c).data(), out.col(c).data());
    }
  }
  out = ((-0.5 * out.array()).rowwise() + (log_det_.transpose().array() + log2pi_term)).matrix();
}

Eigen::VectorXd GaussianMixture::variances(Eigen::Index c) const {
  const Eigen::MatrixXd& cov = covariances_[static_cast<size_t>(c)];
  return type_ == CovarianceType::diagonal ? Eigen::VectorXd(cov.col(0)) : Eigen::VectorXd(cov.diagonal());
}

Eigen::MatrixXd GaussianMixture::component_log_densities(const Eigen::MatrixXd& x) const {
  require_scoring_input(x, dims(), "gaussian mixture");
  Eigen::MatrixXd out(x.rows(), components()), block;
  for (Eigen::Index b = 0; b < x.rows(); b += kBlockRows) {
    const Eigen::Index r = std::min(kBlockRows, x.rows() - b);
    log_densities_block(x, b, r, block);
    out.middleRows(b, r) = block;
  }
  return out;
}

Eigen::VectorXd GaussianMixture::log_likelihood(const Eigen::MatrixXd& x) const {
  Eigen::MatrixXd w = component_log_densities(x).rowwise() + log_weights_.transpose();
  const Eigen::VectorXd mx = w.rowwise().maxCoeff();
  return mx.array() + (w.colwise() - mx).array().exp().rowwise().sum().log();
}

Eigen::MatrixXd GaussianMixture::responsibilities(const Eigen::MatrixXd& x) const {
  Eigen::MatrixXd w = component_log_densities(x).rowwise() + log_weights_.transpose();
  const Eigen::VectorXd mx = w.rowwise().maxCoeff();
  w = (w.colwise() - mx).array().exp().matrix();
  return w.array().colwise() / w.rowwise().sum().array();
}

void GaussianMixture::best_component(const Eigen::MatrixXd& x, Eigen::VectorXd& log_density,
                                     Eigen::VectorXi& component) const {
  require_scoring_input(x, dims(), "gaussian mixture");
  log_density.resize(x.rows());
  component.resize(x.rows());
  Eigen::MatrixXd block;
  for (Eigen::Index b = 0; b < x.rows(); b += kBlockRows) {
    const Eigen::Index r = std::min(kBlockRows, x.rows() - b);
    log_densities_block(x, b, r, block);
    for (Eigen::Index i = 0; i < r; ++i) {
      Eigen::Index best;
      log_density(b + i) = block.row(i).maxCoeff(&best);
      component(b + i) = static_cast<int>(best);
    }
  }
}

Eigen::Index GaussianMixture::free_parameters() const {
  const Eigen::Index k = components(), d = dims();
  const Eigen::Index cov = type_ == CovarianceType::full ? FullCovariance::parameters(d)
                                                         : DiagonalCovariance::parameters(d);
  return (k - 1) + k * d + k * cov;
}

double GaussianMixture::bic(const Eigen::MatrixXd& x) const {
  return -2.0 * log_likelihood(x).sum() + static_cast<double>(free_parameters()) * std::log(static_cast<double>(x.rows()));
}

}  // namespace stackscope::analyze

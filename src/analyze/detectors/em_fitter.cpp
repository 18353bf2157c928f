#include "analyze/detectors/em_fitter.h"

#include <cmath>
#include <limits>
#include <string>

#include "analyze/detectors/detector.h"
#include "analyze/detectors/input_checks.h"
#include "analyze/detectors/kmeans.h"

namespace stackscope::analyze {

namespace {
template <class Constraint>
GaussianMixture maximize_with(const Eigen::MatrixXd& x, const Eigen::MatrixXd& resp, double reg,
                              const Eigen::VectorXd& min_variance) {
  const Eigen::Index k = resp.cols(), d = x.cols();
  // 10 * eps like scikit-learn: an empty component keeps a finite mean.
  const Eigen::VectorXd nk = resp.colwise().sum().transpose().array() + 10 * std::numeric_limits<double>::epsilon();
  Eigen::MatrixXd means = resp.transpose() * x;
  means = means.array().colwise() / nk.array();
  std::vector<Eigen::MatrixXd> covs(static_cast<size_t>(k));
  Eigen::MatrixXd w;  // the weighted rows of a full covariance's update; a diagonal one needs none
  for (Eigen::Index c = 0; c < k; ++c) {
    Eigen::MatrixXd& cov = covs[static_cast<size_t>(c)];
    if constexpr (Constraint::type == CovarianceType::diagonal) {
      const Eigen::VectorXd var =
          (resp.col(c).transpose() * (x.rowwise() - means.row(c)).array().square().matrix()).transpose() / nk(c);
      cov = var;
    } else {
      // sum_i r_ik (x_i - mu)(x_i - mu)^T as one symmetric rank-N update (SYRK) of sqrt(r)-weighted rows.
      w = (x.rowwise() - means.row(c)).array().colwise() * resp.col(c).array().sqrt();
      cov = Eigen::MatrixXd::Zero(d, d);
      cov.selfadjointView<Eigen::Lower>().rankUpdate(w.transpose(), 1.0 / nk(c));
    }
    Constraint::apply(cov, reg);
    floor_variances(cov, min_variance);
  }
  Eigen::VectorXd weights = nk / nk.sum();
  return GaussianMixture(std::move(weights), std::move(means), std::move(covs), Constraint::type);
}
// One EM iteration in one pass over the data: the E-step of each block of rows feeds the M-step's sufficient
// statistics at once (sums of r, r (x - m), r (x - m)(x - m)^T about the current means m, which keeps the
// covariance update free of cancellation). Same update as the textbook two-pass form; the data is read once.
template <class Constraint>
GaussianMixture em_iteration(const GaussianMixture& model, const Eigen::MatrixXd& x, double reg,
                             const Eigen::VectorXd& min_variance, double& mean_ll) {
  constexpr Eigen::Index kBlock = 256;
  const Eigen::Index k = model.components(), d = x.cols(), n = x.rows();
  const Eigen::RowVectorXd log_w = model.weights().array().log().transpose();
  const Eigen::MatrixXd& mu = model.means();
  Eigen::VectorXd s0 = Eigen::VectorXd::Zero(k);
  Eigen::MatrixXd s1 = Eigen::MatrixXd::Zero(k, d);
  // The d x d sums only for a full covariance (no d x d value is built at all for a diagonal one: 20,000
  // columns would cost 3.2 GB), the d sums per component only for a diagonal one.
  std::vector<Eigen::MatrixXd> s2;
  Eigen::MatrixXd s2_diag;
  if constexpr (Constraint::type == CovarianceType::full) {
    s2.resize(static_cast<size_t>(k));
    for (Eigen::MatrixXd& m : s2) m.setZero(d, d);
  } else {
    s2_diag.setZero(k, d);
  }
  Eigen::MatrixXd resp, diff(kBlock, d);
  Eigen::VectorXd mx, total;
  double ll = 0;
  for (Eigen::Index b = 0; b < n; b += kBlock) {
    const Eigen::Index r = std::min(kBlock, n - b);
    model.log_densities_block(x, b, r, resp);
    resp.rowwise() += log_w;
    mx = resp.rowwise().maxCoeff();
    resp = (resp.colwise() - mx).array().exp().matrix();
    total = resp.rowwise().sum();
    ll += (mx.array() + total.array().log()).sum();
    resp = resp.array().colwise() / total.array();
    const auto xb = x.middleRows(b, r);
    for (Eigen::Index c = 0; c < k; ++c) {
      auto dc = diff.topRows(r);
      dc = xb.rowwise() - mu.row(c);
      s0(c) += resp.col(c).sum();
      s1.row(c).noalias() += resp.col(c).transpose() * dc;
      if constexpr (Constraint::type == CovarianceType::diagonal) {
        s2_diag.row(c).noalias() += resp.col(c).transpose() * dc.array().square().matrix();
      } else {
        dc = dc.array().colwise() * resp.col(c).array().sqrt();
        s2[static_cast<size_t>(c)].selfadjointView<Eigen::Lower>().rankUpdate(dc.transpose());
      }
    }
  }
  mean_ll = ll / static_cast<double>(n);
  const Eigen::VectorXd nk = s0.array() + 10 * std::numeric_limits<double>::epsilon();
  const Eigen::MatrixXd shift = s1.array().colwise() / nk.array();  // new mean - old mean
  std::vector<Eigen::MatrixXd> covs(static_cast<size_t>(k));
  for (Eigen::Index c = 0; c < k; ++c) {
    Eigen::MatrixXd& cov = covs[static_cast<size_t>(c)];
    if constexpr (Constraint::type == CovarianceType::diagonal) {
      cov = (s2_diag.row(c).array() / nk(c) - shift.row(c).array().square()).matrix().transpose();
    } else {
      cov = s2[static_cast<size_t>(c)] / nk(c);
      cov.triangularView<Eigen::Lower>() -= shift.row(c).transpose() * shift.row(c);
    }
    Constraint::apply(cov, reg);
    floor_variances(cov, min_variance);
  }
  return GaussianMixture(nk / nk.sum(), mu + shift, std::move(covs), Constraint::type);
}

}  // namespace

EmFitter::EmFitter(EmOptions options) : opt_(options) {
  if (opt_.components < 1) throw DetectorInputError("gmm: components must be >= 1");
  if (!(opt_.reg_covar >= 0)) throw DetectorInputError("gmm: covariance regularisation must be >= 0");
}

GaussianMixture EmFitter::maximize(const Eigen::MatrixXd& x, const Eigen::MatrixXd& resp) const {
  if (opt_.covariance == CovarianceType::diagonal)
    return maximize_with<DiagonalCovariance>(x, resp, opt_.reg_covar, opt_.min_variance);
  return maximize_with<FullCovariance>(x, resp, opt_.reg_covar, opt_.min_variance);
}

double EmFitter::expect(const GaussianMixture& model, const Eigen::MatrixXd& x, Eigen::MatrixXd& resp) {
  resp = model.component_log_densities(x).rowwise() + model.weights().array().log().matrix().transpose();
  const Eigen::VectorXd mx = resp.rowwise().maxCoeff();
  resp = (resp.colwise() - mx).array().exp().matrix();
  const Eigen::VectorXd total = resp.rowwise().sum();
  resp = resp.array().colwise() / total.array();
  return (mx.array() + total.array().log()).mean();
}

GaussianMixture EmFitter::initial_model(const Eigen::MatrixXd& x, uint64_t seed) const {
  const KMeansResult km = fit_kmeans(x, {.clusters = opt_.components,
                                         .max_iterations = std::max(1, opt_.kmeans_iterations),
                                         .tolerance = 1e-4,
                                         .restarts = 1,
                                         .seed = seed});
  Eigen::MatrixXd resp = Eigen::MatrixXd::Zero(x.rows(), opt_.components);
  for (Eigen::Index i = 0; i < x.rows(); ++i) resp(i, km.labels(i)) = 1.0;
  return maximize(x, resp);
}

EmResult EmFitter::run(const Eigen::MatrixXd& x, GaussianMixture start) const {
  EmResult r;
  r.model = std::move(start);
  double previous = -std::numeric_limits<double>::infinity();
  for (r.iterations = 1; r.iterations <= opt_.max_iterations; ++r.iterations) {
    double ll = 0;
    r.model = opt_.covariance == CovarianceType::diagonal
                  ? em_iteration<DiagonalCovariance>(r.model, x, opt_.reg_covar, opt_.min_variance, ll)
                  : em_iteration<FullCovariance>(r.model, x, opt_.reg_covar, opt_.min_variance, ll);
    r.mean_log_likelihood = ll;
    if (std::abs(ll - previous) < opt_.tolerance) {
      r.converged = true;
      break;
    }
    previous = ll;
  }
  r.iterations = std::min(r.iterations, opt_.max_iterations);
  r.mean_log_likelihood = r.model.mean_log_likelihood(x);  // of the model actually returned
  return r;
}

EmResult EmFitter::fit(const Eigen::MatrixXd& x) const {
  require_finite_matrix(x, "gmm fit", 1);
  if (opt_.min_variance.size() != 0 && opt_.min_variance.size() != x.cols())
    throw DetectorInputError("gmm fit: " + std::to_string(opt_.min_variance.size()) + " variance floors for " +
                             std::to_string(x.cols()) + " columns");
  // More columns than rows: a full covariance is singular (only the regularisation holds it up) and costs d x d
  // per component and d^3 per iteration (50 rows x 10,001 columns took 617 s and 7 GB); a diagonal one is O(d).
  if (opt_.covariance == CovarianceType::full && x.cols() > x.rows())
    throw DetectorInputError("gmm fit: " + std::to_string(x.rows()) + " rows for " + std::to_string(x.cols()) +
                             " columns: a full covariance needs at least as many rows as columns (use a diagonal "
                             "covariance, fewer columns or more rows)");
  if (x.rows() < opt_.components)
    throw DetectorInputError("gmm fit: " + std::to_string(x.rows()) + " rows is fewer than the " +
                             std::to_string(opt_.components) + " components asked for");
  EmResult best;
  best.mean_log_likelihood = -std::numeric_limits<double>::infinity();
  bool have = false;
  for (int restart = 0; restart < std::max(1, opt_.restarts); ++restart) {
    EmResult r = run(x, initial_model(x, opt_.seed * 1000003ull + static_cast<uint64_t>(restart)));
    if (!have || r.mean_log_likelihood > best.mean_log_likelihood) {
      best = std::move(r);
      have = true;
    }
  }
  return best;
}

EmResult fit_gmm_by_bic(const Eigen::MatrixXd& x, EmOptions options, int max_components, std::vector<double>* bic_by_k,
                        double min_component_fraction) {
  require_finite_matrix(x, "gmm fit", 1);
  const int kmax = static_cast<int>(std::min<Eigen::Index>(std::max(1, max_components), x.rows()));
  EmResult best;
  double best_bic = std::numeric_limits<double>::infinity();
  if (bic_by_k) bic_by_k->clear();
  for (int k = 1; k <= kmax; ++k) {
    options.components = k;
    EmResult r = EmFitter(options).fit(x);
    const double bic = -2.0 * r.mean_log_likelihood * static_cast<double>(x.rows()) +
                       static_cast<double>(r.model.free_parameters()) * std::log(static_cast<double>(x.rows()));
    if (bic_by_k) bic_by_k->push_back(bic);
    const double smallest = r.model.weights().minCoeff() * static_cast<double>(x.rows());
    const double needed = std::max(static_cast<double>(x.cols() + 1), min_component_fraction * static_cast<double>(x.rows()));
    const bool eligible = k == 1 || smallest >= needed;
    if (eligible && bic < best_bic) best_bic = bic, best = std::move(r);
  }
  return best;
}

}  // namespace stackscope::analyze

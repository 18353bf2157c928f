#include "analyze/em_fitter.h"

#include <cmath>
#include <limits>
#include <string>

#include "analyze/detector.h"
#include "analyze/input_checks.h"
#include "analyze/kmeans.h"

namespace stackscope::analyze {

namespace {
template <class Constraint>
GaussianMixture maximize_with(const Eigen::MatrixXd& x, const Eigen::MatrixXd& resp, double reg) {
  const Eigen::Index k = resp.cols(), d = x.cols();
  // 10 * eps like scikit-learn: an empty component keeps a finite mean.
  const Eigen::VectorXd nk = resp.colwise().sum().transpose().array() + 10 * std::numeric_limits<double>::epsilon();
  Eigen::MatrixXd means = resp.transpose() * x;
  means = means.array().colwise() / nk.array();
  std::vector<Eigen::MatrixXd> covs(static_cast<size_t>(k));
  Eigen::MatrixXd w(x.rows(), d);
  for (Eigen::Index c = 0; c < k; ++c) {
    Eigen::MatrixXd& cov = covs[static_cast<size_t>(c)];
    if constexpr (Constraint::type == CovarianceType::diagonal) {
      const Eigen::VectorXd var =
          (resp.col(c).transpose() * (x.rowwise() - means.row(c)).array().square().matrix()).transpose() / nk(c);
      cov = var.asDiagonal();
    } else {
      // sum_i r_ik (x_i - mu)(x_i - mu)^T as one symmetric rank-N update (SYRK) of sqrt(r)-weighted rows.
      w = (x.rowwise() - means.row(c)).array().colwise() * resp.col(c).array().sqrt();
      cov = Eigen::MatrixXd::Zero(d, d);
      cov.selfadjointView<Eigen::Lower>().rankUpdate(w.transpose(), 1.0 / nk(c));
    }
    Constraint::apply(cov, reg);
  }
  Eigen::VectorXd weights = nk / nk.sum();
  return GaussianMixture(std::move(weights), std::move(means), std::move(covs), Constraint::type);
}
}  // namespace

EmFitter::EmFitter(EmOptions options) : opt_(options) {
  if (opt_.components < 1) throw DetectorInputError("gmm: components must be >= 1");
  if (!(opt_.reg_covar >= 0)) throw DetectorInputError("gmm: covariance regularisation must be >= 0");
}

GaussianMixture EmFitter::maximize(const Eigen::MatrixXd& x, const Eigen::MatrixXd& resp) const {
  if (opt_.covariance == CovarianceType::diagonal) return maximize_with<DiagonalCovariance>(x, resp, opt_.reg_covar);
  return maximize_with<FullCovariance>(x, resp, opt_.reg_covar);
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
  Eigen::MatrixXd resp;
  double previous = -std::numeric_limits<double>::infinity();
  for (r.iterations = 1; r.iterations <= opt_.max_iterations; ++r.iterations) {
    const double ll = expect(r.model, x, resp);
    r.model = maximize(x, resp);
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

EmResult fit_gmm_by_bic(const Eigen::MatrixXd& x, EmOptions options, int max_components, std::vector<double>* bic_by_k) {
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
    if (bic < best_bic) best_bic = bic, best = std::move(r);
  }
  return best;
}

}  // namespace stackscope::analyze

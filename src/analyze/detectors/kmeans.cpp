#include "analyze/detectors/kmeans.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "analyze/detectors/input_checks.h"

namespace stackscope::analyze {

Eigen::MatrixXd squared_distances(const Eigen::MatrixXd& x, const Eigen::MatrixXd& centers) {
  Eigen::MatrixXd d = -2.0 * (x * centers.transpose());
  d.colwise() += x.rowwise().squaredNorm();
  d.rowwise() += centers.rowwise().squaredNorm().transpose();
  return d.cwiseMax(0.0);
}

Eigen::MatrixXd kmeans_plus_plus(const Eigen::MatrixXd& x, int clusters, std::mt19937_64& rng) {
  const Eigen::Index n = x.rows();
  Eigen::MatrixXd centers(clusters, x.cols());
  std::uniform_int_distribution<Eigen::Index> pick(0, n - 1);
  centers.row(0) = x.row(pick(rng));
  Eigen::VectorXd closest = squared_distances(x, centers.topRows(1)).col(0);
  const int trials = 2 + static_cast<int>(std::log(static_cast<double>(clusters)));
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (int c = 1; c < clusters; ++c) {
    const double total = closest.sum();
    Eigen::MatrixXd candidates(trials, x.cols());
    for (int t = 0; t < trials; ++t) {
      Eigen::Index chosen = pick(rng);  // all points coincide with centres: any point will do
      if (total > 0) {
        double u = unit(rng) * total;
        for (Eigen::Index i = 0; i < n; ++i) {
          u -= closest(i);
          if (u <= 0) {
            chosen = i;
            break;
          }
        }
      }
      candidates.row(t) = x.row(chosen);
    }
    // Greedy: keep the candidate that lowers the potential most.
    const Eigen::MatrixXd dist = squared_distances(x, candidates);
    Eigen::Index best = 0;
    double best_pot = std::numeric_limits<double>::infinity();
    for (int t = 0; t < trials; ++t) {
      const double pot = closest.cwiseMin(dist.col(t)).sum();
      if (pot < best_pot) best_pot = pot, best = t;
    }
    centers.row(c) = candidates.row(best);
    closest = closest.cwiseMin(dist.col(best));
  }
  return centers;
}

namespace {
KMeansResult lloyd(const Eigen::MatrixXd& x, Eigen::MatrixXd centers, const KMeansOptions& opt, double tol_abs) {
  KMeansResult r;
  const Eigen::Index n = x.rows(), k = centers.rows();
  r.labels.resize(n);
  for (r.iterations = 1; r.iterations <= opt.max_iterations; ++r.iterations) {
    const Eigen::MatrixXd dist = squared_distances(x, centers);
    Eigen::MatrixXd sums = Eigen::MatrixXd::Zero(k, x.cols());
    Eigen::VectorXd counts = Eigen::VectorXd::Zero(k);
    for (Eigen::Index i = 0; i < n; ++i) {
      Eigen::Index best;
      dist.row(i).minCoeff(&best);
      r.labels(i) = static_cast<int>(best);
      sums.row(best) += x.row(i);
      counts(best) += 1;
    }
    Eigen::MatrixXd next = centers;  // an empty cluster keeps its centre
    for (Eigen::Index c = 0; c < k; ++c)
      if (counts(c) > 0) next.row(c) = sums.row(c) / counts(c);
    const double shift = (next - centers).rowwise().squaredNorm().maxCoeff();
    centers = next;
    if (shift <= tol_abs) break;
  }
  r.iterations = std::min(r.iterations, opt.max_iterations);
  const Eigen::MatrixXd dist = squared_distances(x, centers);
  r.inertia = 0;
  for (Eigen::Index i = 0; i < n; ++i) {
    Eigen::Index best;
    r.inertia += dist.row(i).minCoeff(&best);
    r.labels(i) = static_cast<int>(best);
  }
  r.centers = std::move(centers);
  return r;
}
}  // namespace

KMeansResult fit_kmeans(const Eigen::MatrixXd& x, const KMeansOptions& opt) {
  if (opt.clusters < 1) throw DetectorInputError("k-means: clusters must be >= 1");
  require_finite_matrix(x, "k-means fit", opt.clusters);
  const Eigen::RowVectorXd mean = x.colwise().mean();
  const double mean_var = (x.rowwise() - mean).array().square().mean();
  const double tol_abs = opt.tolerance * mean_var;
  std::mt19937_64 rng(opt.seed);
  KMeansResult best;
  best.inertia = std::numeric_limits<double>::infinity();
  for (int run = 0; run < std::max(1, opt.restarts); ++run) {
    KMeansResult r = lloyd(x, kmeans_plus_plus(x, opt.clusters, rng), opt, tol_abs);
    if (r.inertia < best.inertia) best = std::move(r);
  }
  return best;
}

Eigen::MatrixXd KMeansDetector::transform(const Eigen::MatrixXd& x) const {
  return (x.rowwise() - mean_.transpose()).array().rowwise() / scale_.transpose().array();
}

void KMeansDetector::fit(const Eigen::MatrixXd& x) {
  require_finite_matrix(x, "k-means fit", 1);
  // A constant column without a floor is centred only.
  const FeatureScaling s = opt_.standardize ? FeatureScaling::fit(x, opt_.floor) : FeatureScaling::identity(x.cols());
  mean_ = s.center();
  scale_ = s.scale();
  KMeansOptions o = opt_.kmeans;
  o.clusters = static_cast<int>(std::min<Eigen::Index>(o.clusters, x.rows()));
  result_ = fit_kmeans(transform(x), o);
  const Eigen::Index k = result_.centers.rows();
  Eigen::VectorXd counts = Eigen::VectorXd::Zero(k);
  for (Eigen::Index i = 0; i < result_.labels.size(); ++i) counts(result_.labels(i)) += 1;
  std::vector<Eigen::Index> keep;
  for (Eigen::Index c = 0; c < k; ++c)
    if (counts(c) >= opt_.min_cluster_fraction * static_cast<double>(x.rows())) keep.push_back(c);
  if (keep.empty()) keep.push_back(0);  // cannot happen (the counts sum to N), kept for safety
  normal_centers_ = result_.centers(keep, Eigen::all);
}

Eigen::VectorXd KMeansDetector::score(const Eigen::MatrixXd& x) const {
  require_scoring_input(x, mean_.size(), "k-means score");
  return squared_distances(transform(x), normal_centers_).rowwise().minCoeff().array().sqrt();
}

}  // namespace stackscope::analyze

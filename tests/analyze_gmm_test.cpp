// The engine's Gaussian mixture (model, EM fitter, BIC), its detector and the k-means / DBSCAN baselines.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <set>

#include "analyze/detectors/dbscan.h"
#include "analyze/detectors/em_fitter.h"
#include "analyze/detectors/gmm_detector.h"
#include "analyze/detectors/kmeans.h"
#include "analyze/detectors/thresholds.h"

using namespace stackscope::analyze;

namespace {

struct Mixture {
  Eigen::MatrixXd x;
  Eigen::VectorXi truth;
};

// Three well-separated 2-D clusters with weights 0.5/0.3/0.2 and different (correlated) shapes.
Mixture three_clusters(int n, unsigned seed = 11) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> g(0, 1);
  std::uniform_real_distribution<double> u(0, 1);
  const double means[3][2] = {{0, 0}, {10, 10}, {-10, 8}};
  Mixture m{Eigen::MatrixXd(n, 2), Eigen::VectorXi(n)};
  for (int i = 0; i < n; ++i) {
    const double r = u(rng);
    const int k = r < 0.5 ? 0 : (r < 0.8 ? 1 : 2);
    const double a = g(rng), b = g(rng);
    m.x(i, 0) = means[k][0] + a * (k == 1 ? 2.0 : 1.0);
    m.x(i, 1) = means[k][1] + (k == 2 ? 0.8 * a + 0.6 * b : b);
    m.truth(i) = k;
  }
  return m;
}

// Index of the fitted component whose mean is nearest to (mx, my).
Eigen::Index nearest_component(const GaussianMixture& g, double mx, double my) {
  Eigen::Index best;
  (g.means().rowwise() - Eigen::RowVector2d(mx, my)).rowwise().squaredNorm().minCoeff(&best);
  return best;
}

}  // namespace

TEST(AnalyzeGmm, EmRecoversKnownMixtureFullAndDiagonal) {
  const Mixture m = three_clusters(3000);
  for (CovarianceType t : {CovarianceType::full, CovarianceType::diagonal}) {
    const EmResult r = EmFitter({.components = 3, .covariance = t, .restarts = 2, .seed = 1}).fit(m.x);
    EXPECT_TRUE(r.converged);
    const auto& g = r.model;
    const double mu[3][2] = {{0, 0}, {10, 10}, {-10, 8}};
    const double w[3] = {0.5, 0.3, 0.2};
    std::set<Eigen::Index> seen;
    for (int k = 0; k < 3; ++k) {
      const Eigen::Index c = nearest_component(g, mu[k][0], mu[k][1]);
      seen.insert(c);
      EXPECT_NEAR(g.means()(c, 0), mu[k][0], 0.15) << covariance_type_name(t);
      EXPECT_NEAR(g.means()(c, 1), mu[k][1], 0.15);
      EXPECT_NEAR(g.weights()(c), w[k], 0.03);
    }
    EXPECT_EQ(seen.size(), 3u);
    EXPECT_NEAR(g.weights().sum(), 1.0, 1e-12);
    if (t == CovarianceType::full) {
      const Eigen::Index c = nearest_component(g, -10, 8);
      EXPECT_NEAR(g.covariances()[static_cast<size_t>(c)](0, 1), 0.8, 0.12);  // the correlated cluster
      EXPECT_NEAR(g.covariances()[static_cast<size_t>(nearest_component(g, 10, 10))](0, 0), 4.0, 0.4);
    } else {
      for (const auto& cov : g.covariances()) EXPECT_EQ(cov.cols(), 1);  // the variances alone, no d x d
    }
  }
}

TEST(AnalyzeGmm, DensitiesMatchClosedForm) {
  Eigen::MatrixXd cov(2, 2);
  cov << 2.0, 0.5, 0.5, 1.0;
  GaussianMixture g(Eigen::VectorXd::Ones(1), Eigen::RowVector2d(1.0, -1.0), {cov}, CovarianceType::full);
  Eigen::MatrixXd x(1, 2);
  x << 2.0, 0.5;
  const Eigen::Vector2d diff(1.0, 1.5);
  const double expected = -0.5 * diff.dot(cov.inverse() * diff) - 0.5 * std::log(cov.determinant()) - std::log(2 * M_PI);
  EXPECT_NEAR(g.component_log_densities(x)(0, 0), expected, 1e-12);
  EXPECT_NEAR(g.log_likelihood(x)(0), expected, 1e-12);
  // Diagonal model, 11 rows (the vector kernel's 8-row steps and the scalar tail).
  Eigen::MatrixXd dcov = Eigen::Vector3d(0.5, 2.0, 4.0).asDiagonal();
  GaussianMixture gd(Eigen::VectorXd::Ones(1), Eigen::RowVector3d(1, 2, 3), {dcov}, CovarianceType::diagonal);
  const Eigen::MatrixXd xs = Eigen::MatrixXd::Random(11, 3) * 3;
  const Eigen::MatrixXd ld = gd.component_log_densities(xs);
  for (Eigen::Index r = 0; r < xs.rows(); ++r) {
    double want = 0;
    for (int j = 0; j < 3; ++j)
      want += -0.5 * std::pow(xs(r, j) - (j + 1), 2) / dcov(j, j) - 0.5 * std::log(2 * M_PI * dcov(j, j));
    EXPECT_NEAR(ld(r, 0), want, 1e-10) << r;
  }
  Eigen::MatrixXd bad(2, 2);
  bad << 1, 2, 2, 1;  // not positive definite
  EXPECT_THROW(GaussianMixture(Eigen::VectorXd::Ones(1), Eigen::RowVector2d(0, 0), {bad}, CovarianceType::full),
               DetectorInputError);
}

TEST(AnalyzeGmm, BicChoosesTheTrueNumberOfComponents) {
  const Mixture m = three_clusters(1500, 5);
  std::vector<double> bic;
  const EmResult r = fit_gmm_by_bic(m.x, {.restarts = 2, .seed = 3}, 6, &bic);
  EXPECT_EQ(r.model.components(), 3);
  ASSERT_EQ(bic.size(), 6u);
  EXPECT_EQ(std::min_element(bic.begin(), bic.end()) - bic.begin(), 2);
  GmmDetector d({.components = 0, .max_components = 5, .seed = 2});
  d.fit(m.x);
  EXPECT_EQ(d.chosen_components(), 3);
}

TEST(AnalyzeGmm, DetectorFlagsPlantedOutliersByDeltaAndQuantile) {
  Mixture m = three_clusters(2000, 9);
  Eigen::MatrixXd x(m.x.rows() + 4, 2);
  x.topRows(m.x.rows()) = m.x;
  x.bottomRows(4) << 5, 5, -5, 20, 20, -5, 0, 25;  // between or far from the clusters
  GmmDetector d({.components = 3, .seed = 4});
  d.fit(x);
  const Eigen::VectorXd s = d.score(x);
  EXPECT_TRUE(s.allFinite());
  // Paper criterion: density under the most likely component below delta.
  const Eigen::VectorXi flags = flag_above(s, GmmDetector::threshold_for_delta(1e-6));
  for (Eigen::Index r = x.rows() - 4; r < x.rows(); ++r) EXPECT_EQ(flags(r), 1) << r;
  EXPECT_LT(flags.head(m.x.rows()).sum(), 5);
  // Same ranking as the definition: -log of the best component density.
  const Eigen::MatrixXd logd = d.model().component_log_densities(x);
  for (Eigen::Index r : {Eigen::Index(0), x.rows() - 1}) EXPECT_NEAR(s(r), -logd.row(r).maxCoeff(), 1e-9);
  // Extreme points: densities underflow to 0 but scores stay finite.
  Eigen::MatrixXd far(1, 2);
  far << 1e6, -1e6;
  EXPECT_TRUE(std::isfinite(d.score(far)(0)));
  // Which feature deviates: the planted (0, 25) deviates in y.
  const Eigen::MatrixXd z = d.feature_deviations(x.bottomRows(1));
  EXPECT_GT(std::abs(z(0, 1)), std::abs(z(0, 0)));
}

TEST(AnalyzeGmm, DegenerateInputs) {
  Mixture m = three_clusters(300, 2);
  Eigen::MatrixXd x(300, 3);
  x << m.x, Eigen::VectorXd::Constant(300, 7.0);  // a constant column: regularisation keeps it finite
  GmmDetector d({.components = 2});
  d.fit(x);
  EXPECT_TRUE(d.score(x).allFinite());
  // Fewer rows than components.
  GmmDetector many({.components = 5});
  try {
    many.fit(x.topRows(3));
    ADD_FAILURE();
  } catch (const DetectorInputError& e) {
    EXPECT_NE(std::string(e.what()).find("fewer than the 5 components"), std::string::npos) << e.what();
  }
  // BIC mode with few rows caps K at the row count.
  GmmDetector bic({.components = 0, .max_components = 8});
  bic.fit(x.topRows(4));
  EXPECT_LE(bic.chosen_components(), 4);
  EXPECT_TRUE(bic.score(x).allFinite());
  x(17, 1) = NAN;
  try {
    d.fit(x);
    ADD_FAILURE();
  } catch (const DetectorInputError& e) {
    EXPECT_NE(std::string(e.what()).find("row 17, column 1"), std::string::npos) << e.what();
  }
  GmmDetector unfitted;
  EXPECT_THROW(unfitted.score(m.x), DetectorInputError);
  // Identical rows (zero variance everywhere) still fit.
  GmmDetector same({.components = 1});
  same.fit(Eigen::MatrixXd::Constant(20, 2, 3.0));
  EXPECT_TRUE(same.score(Eigen::MatrixXd::Constant(2, 2, 4.0)).allFinite());
}

TEST(AnalyzeKMeans, RecoversCentresAndFlagsOutliers) {
  const Mixture m = three_clusters(1500, 4);
  const KMeansResult r = fit_kmeans(m.x, {.clusters = 3, .restarts = 3, .seed = 1});
  for (auto [cx, cy] : {std::pair{0.0, 0.0}, {10.0, 10.0}, {-10.0, 8.0}})
    EXPECT_LT((r.centers.rowwise() - Eigen::RowVector2d(cx, cy)).rowwise().norm().minCoeff(), 0.3);
  Eigen::MatrixXd x(m.x.rows() + 3, 2);
  x << m.x, Eigen::RowVector2d(30, 30), Eigen::RowVector2d(-30, -20), Eigen::RowVector2d(0, 40);
  KMeansDetector d({.kmeans = {.clusters = 3, .restarts = 2, .seed = 0}});
  d.fit(x);
  const Eigen::VectorXd s = d.score(x);
  const double thr = threshold_at_quantile(s.head(m.x.rows()), 0.999);
  EXPECT_EQ(flag_above(s, thr).tail(3).sum(), 3);
}

TEST(AnalyzeDbscan, FlagsNoiseAndFindsClusters) {
  const Mixture m = three_clusters(1200, 6);
  Eigen::MatrixXd x(m.x.rows() + 3, 2);
  x << m.x, Eigen::RowVector2d(30, 30), Eigen::RowVector2d(-30, -20), Eigen::RowVector2d(0, 40);
  DbscanDetector d({.eps = 0, .min_points = 5});
  d.fit(x);
  EXPECT_GT(d.eps(), 0);
  EXPECT_EQ(d.clusters(), 3);
  const Eigen::VectorXd s = d.score(x);
  for (Eigen::Index r = x.rows() - 3; r < x.rows(); ++r) {
    EXPECT_GT(s(r), 1.0) << r;  // DBSCAN noise
    EXPECT_EQ(d.training_labels()(r), -1);
  }
  EXPECT_LT((s.head(m.x.rows()).array() > 1.0).count(), 0.05 * m.x.rows());
  // No core point at all is a clear error.
  DbscanDetector tight({.eps = 1e-9, .min_points = 3, .standardize = false});
  EXPECT_THROW(tight.fit(x), DetectorInputError);
}

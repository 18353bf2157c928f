// Baseline detectors of the engine (z-score, PCA-Mahalanobis, Isolation Forest), thresholds and metrics.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "analyze/metrics/classification_metrics.h"
#include "analyze/detectors/isolation_forest.h"
#include "analyze/detectors/pca_mahalanobis.h"
#include "analyze/detectors/thresholds.h"
#include "analyze/detectors/zscore.h"

using namespace stackscope::analyze;

namespace {

// n normal rows (standard normal, d features) followed by `planted` rows far away (|x| ~ 8 sd).
Eigen::MatrixXd data_with_outliers(int n, int d, int planted, unsigned seed = 7) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> g(0, 1);
  Eigen::MatrixXd x(n + planted, d);
  for (int r = 0; r < n; ++r)
    for (int c = 0; c < d; ++c) x(r, c) = g(rng);
  for (int r = n; r < n + planted; ++r)
    for (int c = 0; c < d; ++c) x(r, c) = (c % 2 ? -8.0 : 8.0) + 0.1 * g(rng);
  return x;
}

std::set<Eigen::Index> top_k(const Eigen::VectorXd& s, int k) {
  std::vector<Eigen::Index> idx(static_cast<size_t>(s.size()));
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](auto a, auto b) { return s(a) > s(b); });
  return {idx.begin(), idx.begin() + k};
}

std::set<Eigen::Index> range_set(Eigen::Index from, Eigen::Index to) {
  std::set<Eigen::Index> r;
  for (auto i = from; i < to; ++i) r.insert(i);
  return r;
}

void expect_flags_planted(AnomalyDetector& det) {
  const Eigen::MatrixXd x = data_with_outliers(600, 4, 6);
  det.fit(x);
  const Eigen::VectorXd s = det.score(x);
  ASSERT_EQ(s.size(), x.rows());
  EXPECT_TRUE(s.allFinite());
  EXPECT_EQ(top_k(s, 6), range_set(600, 606)) << det.name();
  // A 99th-percentile threshold on the training scores flags the planted rows.
  const double thr = threshold_at_quantile(s, 0.99);
  const Eigen::VectorXi flags = flag_above(s, thr);
  for (int r = 600; r < 606; ++r) EXPECT_EQ(flags(r), 1) << det.name() << " row " << r;
}

}  // namespace

TEST(AnalyzeThresholds, QuantileInterpolatesLikeNumpy) {
  const std::vector<double> v{5, 1, 4, 2, 3};
  EXPECT_DOUBLE_EQ(threshold_at_quantile(v, 0.0), 1.0);
  EXPECT_DOUBLE_EQ(threshold_at_quantile(v, 1.0), 5.0);
  EXPECT_DOUBLE_EQ(threshold_at_quantile(v, 0.5), 3.0);
  EXPECT_DOUBLE_EQ(threshold_at_quantile(v, 0.9), 4.6);  // numpy.quantile([1..5], 0.9) == 4.6
  EXPECT_THROW(threshold_at_quantile(std::vector<double>{}, 0.5), DetectorInputError);
  EXPECT_THROW(threshold_at_quantile(v, 1.5), DetectorInputError);
  EXPECT_THROW(threshold_at_quantile(std::vector<double>{1, NAN}, 0.5), DetectorInputError);
}

TEST(AnalyzeZScore, FlagsPlantedOutliers) {
  ZScore z;
  expect_flags_planted(z);
  ZScore zmax({.aggregate = ZScoreOptions::Aggregate::max_abs});
  expect_flags_planted(zmax);
}

TEST(AnalyzeZScore, MatchesDefinitionAndToleratesConstantColumn) {
  Eigen::MatrixXd x(4, 2);
  x << 1, 7, 2, 7, 3, 7, 4, 7;
  ZScore z;
  z.fit(x);
  EXPECT_DOUBLE_EQ(z.means()(0), 2.5);
  EXPECT_NEAR(z.stddevs()(0), std::sqrt(5.0 / 3.0), 1e-12);
  Eigen::MatrixXd t(2, 2);
  t << 2.5, 7, 2.5, 8;
  const Eigen::VectorXd s = z.score(t);
  EXPECT_TRUE(s.allFinite());
  EXPECT_DOUBLE_EQ(s(0), 0.0);
  EXPECT_GT(s(1), 1e6);  // departing from a constant is very anomalous, but finite
}

TEST(AnalyzePcaMahalanobis, FlagsPlantedOutliers) {
  PcaMahalanobis p;
  expect_flags_planted(p);
}

TEST(AnalyzePcaMahalanobis, CatchesJointDepartureInsideMarginalRanges) {
  // Two strongly correlated features; the planted rows break the correlation but each value is ordinary.
  std::mt19937 rng(3);
  std::normal_distribution<double> g(0, 1);
  Eigen::MatrixXd x(503, 3);
  for (int r = 0; r < 500; ++r) {
    const double a = g(rng);
    x.row(r) << a, a + 0.05 * g(rng), g(rng);
  }
  x.row(500) << 1.5, -1.5, 0;
  x.row(501) << -1.2, 1.2, 0.1;
  x.row(502) << 2.0, -1.8, -0.2;
  PcaMahalanobis p({.variance_fraction = 0.999});
  p.fit(x);
  EXPECT_EQ(top_k(p.score(x), 3), range_set(500, 503));
}

TEST(AnalyzePcaMahalanobis, KeepsRequestedVarianceAndScoresAreDistances) {
  const Eigen::MatrixXd x = data_with_outliers(400, 6, 0);
  PcaMahalanobis p;
  p.fit(x);
  EXPECT_GE(p.explained_variance(), 0.95 - 1e-9);
  EXPECT_LT(p.components(), 7);
  const Eigen::MatrixXd proj = p.project(x);
  // Whitened training coordinates have unit variance per component.
  for (Eigen::Index j = 0; j < proj.cols(); ++j)
    EXPECT_NEAR(proj.col(j).squaredNorm() / (x.rows() - 1), 1.0, 1e-9);
  EXPECT_NEAR(p.score(x)(0), proj.row(0).norm(), 1e-12);
}

TEST(AnalyzePcaMahalanobis, ConstantColumnIsIgnoredAllConstantIsAnError) {
  Eigen::MatrixXd x = data_with_outliers(200, 3, 0);
  x.col(1).setConstant(4.0);
  PcaMahalanobis p;
  p.fit(x);
  EXPECT_TRUE(p.score(x).allFinite());
  Eigen::MatrixXd c = Eigen::MatrixXd::Constant(10, 2, 1.0);
  EXPECT_THROW(p.fit(c), DetectorInputError);
}

TEST(AnalyzeIsolationForest, FlagsPlantedOutliers) {
  IsolationForest f({.trees = 100, .max_samples = 256, .seed = 1});
  expect_flags_planted(f);
}

TEST(AnalyzeIsolationForest, ReproducibleAndBoundedScores) {
  const Eigen::MatrixXd x = data_with_outliers(300, 3, 3);
  IsolationForest a({.seed = 5}), b({.seed = 5});
  a.fit(x);
  b.fit(x);
  const Eigen::VectorXd sa = a.score(x), sb = b.score(x);
  EXPECT_EQ(sa, sb);
  EXPECT_GT(sa.minCoeff(), 0.0);
  EXPECT_LE(sa.maxCoeff(), 1.0);
  EXPECT_EQ(a.samples_per_tree(), 256);
  EXPECT_DOUBLE_EQ(IsolationForest::average_path_length(2), 1.0);
  EXPECT_NEAR(IsolationForest::average_path_length(256), 10.2448, 1e-3);
}

TEST(AnalyzeIsolationForest, CompleteTreeLayoutScoresLikeThePointerWalk) {
  const Eigen::MatrixXd x = data_with_outliers(700, 5, 4, 9);
  for (int samples : {2, 3, 100, 256, 700}) {
    IsolationForest fast({.trees = 40, .max_samples = samples, .seed = 3});
    IsolationForest slow({.trees = 40, .max_samples = samples, .seed = 3, .complete_layout = false});
    fast.fit(x);
    slow.fit(x);
    const Eigen::VectorXd a = fast.mean_path_length(x), b = slow.mean_path_length(x.topRows(333));
    EXPECT_LT((a.head(333) - b).cwiseAbs().maxCoeff(), 1e-12) << samples;
  }
}

TEST(AnalyzeIsolationForest, IdenticalRowsDoNotLoop) {
  Eigen::MatrixXd x = Eigen::MatrixXd::Constant(50, 2, 3.0);
  IsolationForest f;
  f.fit(x);
  const Eigen::VectorXd s = f.score(x);
  EXPECT_TRUE(s.allFinite());
}

TEST(AnalyzeDetectorInput, BadInputNamesRowAndColumn) {
  Eigen::MatrixXd x = data_with_outliers(20, 3, 0);
  x(7, 2) = std::numeric_limits<double>::quiet_NaN();
  ZScore z;
  PcaMahalanobis p;
  IsolationForest f;
  for (AnomalyDetector* d : std::vector<AnomalyDetector*>{&z, &p, &f}) {
    try {
      d->fit(x);
      ADD_FAILURE() << d->name() << " accepted NaN";
    } catch (const DetectorInputError& e) {
      EXPECT_NE(std::string(e.what()).find("row 7, column 2"), std::string::npos) << e.what();
    }
    EXPECT_THROW(d->fit(Eigen::MatrixXd(1, 3)), DetectorInputError) << d->name();  // too few rows
    EXPECT_THROW(d->fit(Eigen::MatrixXd(0, 0)), DetectorInputError) << d->name();
  }
  ZScore unfitted;
  EXPECT_THROW(unfitted.score(x), DetectorInputError);
  z.fit(data_with_outliers(20, 3, 0));
  EXPECT_THROW(z.score(Eigen::MatrixXd::Zero(3, 2)), DetectorInputError);  // wrong width
  Eigen::MatrixXd inf = Eigen::MatrixXd::Zero(3, 3);
  inf(1, 0) = INFINITY;
  EXPECT_THROW(z.score(inf), DetectorInputError);
}

TEST(AnalyzeClassificationMetrics, CountsAndRatios) {
  const std::vector<int> y{1, 1, 1, 0, 0, 0, 0, 0};
  const std::vector<int> p{1, 1, 0, 1, 0, 0, 0, 0};
  const auto m = classification_metrics(y, p);
  EXPECT_EQ(m.true_positives, 2u);
  EXPECT_EQ(m.false_positives, 1u);
  EXPECT_EQ(m.false_negatives, 1u);
  EXPECT_EQ(m.true_negatives, 4u);
  EXPECT_DOUBLE_EQ(m.accuracy, 6.0 / 8.0);
  EXPECT_DOUBLE_EQ(m.precision, 2.0 / 3.0);
  EXPECT_DOUBLE_EQ(m.recall, 2.0 / 3.0);
  EXPECT_DOUBLE_EQ(m.f1, 2.0 / 3.0);
  const auto none = classification_metrics(std::vector<int>{0, 0}, std::vector<int>{0, 0});
  EXPECT_DOUBLE_EQ(none.f1, 0.0);
  EXPECT_DOUBLE_EQ(none.accuracy, 1.0);
  EXPECT_THROW(classification_metrics(std::vector<int>{1}, std::vector<int>{}), std::invalid_argument);
}

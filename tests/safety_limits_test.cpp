// No user-chosen parameter may take the host down. A tiny window or stride, a wide table for the
// GMM, a huge table for DBSCAN: each ends with a clear error naming the limit, quickly, instead of growing until
// the OOM killer strikes or running for hours.
#include <gtest/gtest.h>

#include <chrono>
#include <random>

#include "analyze/detectors/dbscan.h"
#include "analyze/detectors/detector.h"
#include "analyze/detectors/em_fitter.h"
#include "analyze/detectors/gmm_detector.h"
#include "analyze/features/window_layer_features.h"
#include "analyze/features/window_limits.h"
#include "analyze/reveal/windows.h"
#include "model/clock.h"
#include "store/recording_writer.h"
#include "test_util.h"

using namespace stackscope;
using namespace stackscope::analyze;

namespace {

constexpr int64_t kS = 1'000'000'000;

std::string bin() { return STACKSCOPE_BIN; }

// 3.5 s of 40 host gauges at 100 Hz: little, yet enough for a tiny window to exhaust the host's memory unchecked.
void write_host_recording(const std::string& path) {
  RecordingWriter w(path);
  w.set_meta("host", "h");
  std::vector<SeriesId> ids;
  for (int s = 0; s < 40; ++s)
    ids.push_back(w.add_series({0, "host.metric" + std::to_string(s), Subsystem::cpu, "ratio", SeriesKind::gauge,
                                SeriesCategory::dynamic, "h", "", "procfs"}));
  const int64_t t0 = monotonic_ns();  // the span reveal reads runs from the recording's start
  std::mt19937 rng(1);
  std::normal_distribution<double> noise(0, 1);
  std::vector<Sample> batch;
  for (int64_t t = t0; t <= t0 + 3 * kS + kS / 2; t += kS / 100)
    for (SeriesId id : ids) batch.push_back({id, t, 50 + noise(rng)});
  w.append_samples(batch);
  w.close();
}

struct Timed {
  int rc;
  std::string out;
  double seconds;
};

Timed timed_run(const std::string& cmd) {
  const auto t0 = std::chrono::steady_clock::now();
  Timed t;
  t.rc = run_command(cmd, &t.out);
  t.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return t;
}

}  // namespace

TEST(WindowLimits, GridAndSlidingWindowsRefusePastTheLimit) {
  // 3.5 s cut every 1 us: 3.5 M windows.
  try {
    make_window_grid(0, 3 * kS + kS / 2, 1000);
    FAIL() << "3.5 M windows accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("limit of 1000000"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("at least 3.5e-06 s"), std::string::npos) << e.what();
  }
  EXPECT_EQ(make_window_grid(0, 10 * kS, 10'000).count, kMaxWindows);  // exactly the limit: accepted
  EXPECT_THROW(window_count(0, 3 * kS + kS / 2, {3 * kS / 1'000'000, 1}), std::invalid_argument);
  EXPECT_EQ(window_count(0, 3 * kS + kS / 2, {3 * kS, kS}), 1u);
  EXPECT_THROW(check_window_cells(1'000'000, 1000, 8, "t"), std::invalid_argument);  // 8 GB
  EXPECT_NO_THROW(check_window_cells(1'000'000, 100, 8, "t"));
}

TEST(WindowLimits, TinyFeaturesWindowEndsWithAnErrorNotTheOomKiller) {
  TempDir dir;
  write_host_recording(dir.file("r.sdb"));
  // Before: grew to 24 GB in 35 s (OOM killer). Now: refused before any table is built.
  for (const char* window : {"1e-6", "1e-9", "1e-12"}) {
    const Timed t = timed_run(bin() + " features " + dir.file("r.sdb") + " --layer host --window " + window + " -o " +
                              dir.file("f.csv"));
    EXPECT_EQ(t.rc, 1) << window << ": " << t.out;
    EXPECT_NE(t.out.find("limit"), std::string::npos) << t.out;
    EXPECT_LT(t.seconds, 20) << window;
  }
  const Timed ok = timed_run(bin() + " features " + dir.file("r.sdb") + " --layer host --window 0.1 -o " +
                             dir.file("f.csv"));
  EXPECT_EQ(ok.rc, 0) << ok.out;
}

TEST(WindowLimits, TinyRevealStrideAndIncidentWindowAreRefused) {
  TempDir dir;
  write_host_recording(dir.file("r.sdb"));
  const Timed reveal = timed_run(bin() + " analyze " + dir.file("r.sdb") +
                                 " --detector reveal --window 3s --stride 1ns --no-store -q");
  EXPECT_NE(reveal.rc, 0) << reveal.out;
  EXPECT_NE(reveal.out.find("limit of 1000000"), std::string::npos) << reveal.out;
  EXPECT_LT(reveal.seconds, 20);
  const Timed small = timed_run(bin() + " analyze " + dir.file("r.sdb") +
                                " --detector reveal --window 10ms --stride 1ms --no-store -q");
  EXPECT_EQ(small.rc, 0) << small.out;  // 3,500 windows: fine
  const Timed incidents = timed_run(bin() + " analyze " + dir.file("r.sdb") +
                                    " --detector incidents --incident-window 1e-8 --no-store -q");
  EXPECT_NE(incidents.rc, 0) << incidents.out;
  EXPECT_NE(incidents.out.find("limit"), std::string::npos) << incidents.out;
}

TEST(DetectorLimits, WideInputDiagonalGmmFitsWithoutSquareMatrices) {
  // 50 rows x 10,001 columns: before, 617 s and 7.1 GB (d x d matrices even for a diagonal covariance).
  std::mt19937 rng(3);
  std::normal_distribution<double> n01(0, 1);
  Eigen::MatrixXd x(50, 10'001);
  for (Eigen::Index i = 0; i < x.size(); ++i) x.data()[i] = n01(rng);
  const auto t0 = std::chrono::steady_clock::now();
  GmmDetector diag({.components = 2, .covariance = CovarianceType::diagonal, .restarts = 1});
  diag.fit(x);
  const Eigen::VectorXd s = diag.score(x);
  EXPECT_TRUE(s.allFinite());
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 30);
  for (const Eigen::MatrixXd& v : diag.model().covariances()) {
    EXPECT_EQ(v.rows(), 10'001);
    EXPECT_EQ(v.cols(), 1);  // variances only
  }
  // A full covariance over more columns than rows is refused, naming both.
  GmmDetector full({.components = 1, .covariance = CovarianceType::full});
  try {
    full.fit(x);
    FAIL() << "full covariance on 50 x 10001 accepted";
  } catch (const DetectorInputError& e) {
    EXPECT_NE(std::string(e.what()).find("50 rows for 10001 columns"), std::string::npos) << e.what();
  }
}

TEST(DetectorLimits, DiagonalMixtureMatchesTheFullOneOnUncorrelatedData) {
  // The d x 1 variances path scores as a full covariance with those variances on its diagonal.
  Eigen::VectorXd w(1);
  w << 1.0;
  Eigen::MatrixXd mu(1, 3);
  mu << 1, -2, 0.5;
  Eigen::MatrixXd var(3, 1);
  var << 4, 0.25, 1;
  Eigen::MatrixXd cov = Eigen::MatrixXd(var.col(0).asDiagonal());
  const GaussianMixture d(w, mu, {var}, CovarianceType::diagonal), f(w, mu, {cov}, CovarianceType::full);
  const GaussianMixture d_square(w, mu, {cov}, CovarianceType::diagonal);  // a d x d one is reduced
  Eigen::MatrixXd x(4, 3);
  x << 0, 0, 0, 1, -2, 0.5, 3, 1, -1, -5, 2, 2;
  EXPECT_TRUE(d.log_likelihood(x).isApprox(f.log_likelihood(x), 1e-12));
  EXPECT_TRUE(d_square.log_likelihood(x).isApprox(f.log_likelihood(x), 1e-12));
  EXPECT_TRUE(d.variances(0).isApprox(var.col(0)));
}

namespace {
// Rows on a 3-dimensional surface in 16 columns with a little noise: window features are like this (a few
// latent factors, many near-identical rows), and a kd-tree prunes well on them. Every call is on one surface.
Eigen::MatrixXd structured_rows(Eigen::Index n, uint32_t seed) {
  std::mt19937 mix_rng(1), rng(seed);
  std::normal_distribution<double> n01(0, 1);
  Eigen::MatrixXd mix(3, 16);
  for (Eigen::Index i = 0; i < mix.size(); ++i) mix.data()[i] = n01(mix_rng);
  Eigen::MatrixXd x(n, 16);
  for (Eigen::Index i = 0; i < n; ++i) {
    Eigen::RowVector3d latent(n01(rng), n01(rng), n01(rng));
    x.row(i) = latent * mix;
    for (Eigen::Index c = 0; c < 16; ++c) x(i, c) += 0.05 * n01(rng);
  }
  return x;
}
}  // namespace

TEST(DetectorLimits, DbscanSpatialIndexGivesTheBruteForceResultsForLittleWork) {
  const Eigen::MatrixXd train = structured_rows(6000, 5), x = structured_rows(20000, 6);
  DbscanDetector chosen, chosen_brute({.spatial_index = false});
  chosen.fit(train);
  chosen_brute.fit(train);
  EXPECT_NEAR(chosen.eps(), chosen_brute.eps(), 1e-9 * chosen.eps());  // the same k-distances
  // A given eps (no point exactly on the radius): the same core points, clusters, noise and scores.
  const double eps = 1.01 * chosen.eps();
  DbscanDetector indexed({.eps = eps}), brute({.eps = eps, .spatial_index = false});
  indexed.fit(train);
  brute.fit(train);
  EXPECT_EQ(indexed.core_points(), brute.core_points());
  EXPECT_GT(indexed.core_points(), 5000);
  EXPECT_EQ(indexed.clusters(), brute.clusters());
  EXPECT_EQ((indexed.training_labels().array() < 0).count(), (brute.training_labels().array() < 0).count());
  const Eigen::VectorXd a = indexed.score(x), b = brute.score(x);
  EXPECT_LT((a - b).cwiseAbs().maxCoeff(), 1e-6);
  // The index answered, for a small share of brute force's distance terms.
  const auto plan = indexed.plan_score(x);
  EXPECT_TRUE(plan.spatial_index);
  EXPECT_LT(plan.terms, 0.25 * brute.plan_score(x).terms);  // its cost counts a tree step as 6 brute-force terms
}

TEST(DetectorLimits, DbscanOnAMillionRowsShapeEndsInBoundedTime) {
  // 300,000 x 16 rows, fit (sub-sampled to 20,000) and scored whole, as `detect --method dbscan` does: without the
  // index, 1 M x 16 rows still run after 300 s (docs/benchmarks/analyze-scale.md has the 1 M figure).
  const Eigen::MatrixXd x = structured_rows(300'000, 7);
  const auto t0 = std::chrono::steady_clock::now();
  DbscanDetector db;
  db.fit(x);
  const Eigen::VectorXd s = db.score(x);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_TRUE(s.allFinite());
  EXPECT_GT(db.core_points(), 15000);
  EXPECT_LT((s.array() > 1.0).cast<double>().mean(), 0.1);
  EXPECT_LT(seconds, 60) << "brute force alone would compute ~9e10 distance terms";
}

TEST(DetectorLimits, DbscanRefusesAJobTheIndexCannotHelpQuickly) {
  // High-dimensional noise: the tree prunes little, so the job costs about brute force's terms; past the limit it
  // is refused at once with the numbers, while the same limit lets structured rows through the index.
  std::mt19937 rng(5);
  std::normal_distribution<double> n01(0, 1);
  Eigen::MatrixXd train(4000, 16), noise(40'000, 16);
  for (Eigen::Index i = 0; i < train.size(); ++i) train.data()[i] = n01(rng);
  for (Eigen::Index i = 0; i < noise.size(); ++i) noise.data()[i] = n01(rng);
  DbscanDetector db({.eps = 100, .min_points = 2, .max_score_terms = 1e9});  // every training row a core point
  db.fit(train);
  ASSERT_EQ(db.core_points(), 4000);
  const auto t0 = std::chrono::steady_clock::now();
  try {
    db.score(noise);  // 40 k x 4 k x 16 = 2.6e9 terms
    FAIL() << "a 2.6e9-term scoring job accepted past a 1e9 limit";
  } catch (const DetectorInputError& e) {
    EXPECT_NE(std::string(e.what()).find("limit"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5);
  EXPECT_TRUE(db.score(noise.topRows(1000)).allFinite());
  DbscanDetector structured({.max_score_terms = 1e9});
  structured.fit(structured_rows(4000, 8));
  EXPECT_TRUE(structured.score(structured_rows(40'000, 9)).allFinite());
}

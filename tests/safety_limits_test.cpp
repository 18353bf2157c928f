// Issue 19: no user-chosen parameter may take the host down. A tiny window or stride, a wide table for the
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

// 3.5 s of 40 host gauges at 100 Hz: the recording of the report (a 3.5 s one).
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

TEST(DetectorLimits, DbscanRefusesAHugeScoringJobQuickly) {
  std::mt19937 rng(5);
  std::normal_distribution<double> n01(0, 1);
  Eigen::MatrixXd train(4000, 16), big(400'000, 16);
  for (Eigen::Index i = 0; i < train.size(); ++i) train.data()[i] = n01(rng);
  for (Eigen::Index i = 0; i < big.size(); ++i) big.data()[i] = n01(rng);
  DbscanDetector db({.eps = 100, .min_points = 2});  // every training row a core point
  db.fit(train);
  ASSERT_EQ(db.core_points(), 4000);
  const auto t0 = std::chrono::steady_clock::now();
  try {
    db.score(big);  // 400 k x 4 k x 16 = 2.6e10 terms
    FAIL() << "a 2.6e10-term scoring job accepted";
  } catch (const DetectorInputError& e) {
    EXPECT_NE(std::string(e.what()).find("limit"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5);
  EXPECT_TRUE(db.score(big.topRows(1000)).allFinite());
}

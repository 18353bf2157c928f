// The variance floor shared by the detectors (analyze/feature_scaling.h): scales and component variances never
// fall below it, and the GMM's scores stay densities in the data's own units when it standardises.
#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <nlohmann/json.hpp>
#include <random>

#include "analyze/detectors/feature_scaling.h"
#include "analyze/detectors/gmm_detector.h"
#include "analyze/detectors/zscore.h"
#include "store/recording_writer.h"
#include "test_util.h"

using namespace stackscope::analyze;

namespace {
Eigen::MatrixXd gaussian_rows(int n, const std::vector<double>& mean, const std::vector<double>& sd, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> g(0, 1);
  Eigen::MatrixXd x(n, static_cast<Eigen::Index>(mean.size()));
  for (int i = 0; i < n; ++i)
    for (size_t c = 0; c < mean.size(); ++c) x(i, static_cast<Eigen::Index>(c)) = mean[c] + sd[c] * g(rng);
  return x;
}
}  // namespace

TEST(VarianceFloor, ScaleIsTheDeviationOrTheFloorWhicheverIsLarger) {
  Eigen::MatrixXd x = gaussian_rows(400, {100, 3, 0}, {5, 1e-4, 0}, 1);
  const FeatureScaling s = FeatureScaling::fit(x, {.relative = 0.01, .absolute = 0.02});
  EXPECT_NEAR(s.scale()(0), 5, 0.5);      // the deviation (above 1 % of 100)
  EXPECT_NEAR(s.scale()(1), 0.03, 1e-6);  // 1 % of the level 3 beats the absolute 0.02
  EXPECT_NEAR(s.scale()(2), 0.02, 1e-12); // constant at 0: the absolute floor
  EXPECT_EQ(s.constant(), (std::vector<Eigen::Index>{2}));
  EXPECT_NEAR(s.min_variance()(2), 1.0, 1e-12);  // where the floor binds, one scaled unit
  EXPECT_NEAR(s.min_variance()(0), std::pow(0.01 * s.center()(0) / s.scale()(0), 2), 1e-12);  // (1 % of ~100) / sd
  // A near-constant call rate moved by 0.1 (a factor 1.26) is a few floored deviations, not thousands.
  ZScore z({.aggregate = ZScoreOptions::Aggregate::max_abs, .floor = {.relative = 0, .absolute = 0.025}});
  z.fit(x.col(1));
  Eigen::MatrixXd moved(1, 1);
  moved << 3.1;
  EXPECT_NEAR(z.score(moved)(0), 4.0, 0.1);
}

TEST(VarianceFloor, StandardisedGmmKeepsDensitiesInTheOriginalUnits) {
  const Eigen::MatrixXd x = gaussian_rows(500, {1000, -3}, {50, 0.2}, 2);
  GmmDetector raw({.components = 1, .covariance = CovarianceType::diagonal, .reg_covar = 0});
  GmmDetector standardised({.components = 1, .covariance = CovarianceType::diagonal, .reg_covar = 0,
                            .standardize = true});
  raw.fit(x);
  standardised.fit(x);
  const Eigen::MatrixXd probe = gaussian_rows(20, {1000, -3}, {150, 0.6}, 3);
  const Eigen::VectorXd a = raw.score(probe), b = standardised.score(probe);
  for (Eigen::Index i = 0; i < a.size(); ++i) EXPECT_NEAR(a(i), b(i), 1e-6 * std::max(1.0, std::abs(a(i)))) << i;
}

TEST(VarianceFloor, NoComponentIsNarrowerThanTheFloor) {
  Eigen::MatrixXd x = gaussian_rows(300, {0, 5}, {1, 1e-3}, 4);
  x.col(0).setConstant(2.0);  // constant in training
  for (auto cov : {CovarianceType::full, CovarianceType::diagonal}) {
    GmmDetector g({.components = 2, .covariance = cov, .standardize = true,
                   .floor = {.relative = 0, .absolute = 0.05}});
    g.fit(x);
    for (Eigen::Index k = 0; k < g.model().components(); ++k) {
      EXPECT_GE(g.model().variances(k)(0), 1.0 - 1e-12);  // in scaled units: one floor
      EXPECT_GE(g.model().variances(k)(1), 1.0 - 1e-12);  // sd 1e-3 < floor 0.05: the floor binds here too
    }
    Eigen::MatrixXd probe(2, 2);
    probe << 2.0, 5.0,   // as in training
        2.5, 5.0;        // the constant column moved by 10 floors
    const Eigen::VectorXd m2 = g.squared_mahalanobis(probe);
    EXPECT_LT(m2(0), 1.0);
    EXPECT_NEAR(m2(1), 100.0, 1.0);
    EXPECT_TRUE(g.score(probe).allFinite());
  }
}

// `analyze`: a call rate that is exactly 5/s for a whole run (two latency modes, so two components, each with
// no rate spread at all) and then drops to 1/s. The drop is found, and reported as a few floored deviations,
// not the thousands a component of zero rate variance would give.
TEST(VarianceFloor, AnalyzeReportsAConstantRateDropInFlooredDeviations) {
  TempDir dir;
  const std::string rec = dir.file("r.sdb");
  std::vector<int64_t> drops;
  {
    stackscope::RecordingWriter w(rec);
    std::mt19937 rng(5);
    std::lognormal_distribution<double> jitter(0.0, 0.05);
    const int64_t ms = 1'000'000;
    int64_t t = 1000 * ms;
    auto add = [&](int i) {
      stackscope::Event e;
      e.layer = stackscope::Layer::cuda;
      e.pid = 1;
      e.tid = 1;
      e.start_ns = t;
      e.duration_ns = static_cast<int64_t>((i % 2 ? 50'000.0 : 500'000.0) * jitter(rng));
      e.name = "cudaStreamSynchronize";
      w.append_event(std::move(e));
    };
    for (int i = 0; i < 400; ++i, t += 200 * ms) add(i);
    for (int i = 0; i < 3; ++i) {
      t += 2000 * ms;  // nothing in the second before each
      drops.push_back(t);
      add(i);
    }
    w.close();
  }
  std::string out;
  ASSERT_EQ(run_command(std::string(STACKSCOPE_BIN) + " analyze " + rec + " --detector gmm --no-store --json", &out),
            0)
      << out;
  const auto j = nlohmann::json::parse(out)["gmm"]["recordings"][0];
  std::vector<int64_t> flagged;
  for (const auto& f : j["findings"]) {
    const auto& why = f["evidence"][0];
    if (why["feature"] != "calls_per_s") continue;
    flagged.push_back(f["t_start_ns"].get<int64_t>());
    EXPECT_LT(std::abs(why["deviation_sd"].get<double>()), 60.0) << f.dump();  // 0.7 in log10 over a 0.025 floor: 28
    EXPECT_GT(std::abs(why["deviation_sd"].get<double>()), 4.0) << f.dump();
  }
  std::sort(flagged.begin(), flagged.end());
  EXPECT_EQ(flagged, drops) << out;
}

// OnlineAnomalyScorer: sliding-horizon training, scoring as items arrive, background refit without stalls.
#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <random>

#include "analyze/detectors/online_scorer.h"
#include "analyze/detectors/zscore.h"

using namespace stackscope::analyze;

namespace {
constexpr int64_t kSecond = 1'000'000'000;

// A detector whose fit blocks until released: proves scoring goes on with the old model during a refit.
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  bool open = true;
  int fits_started = 0;
};
class GatedZScore final : public AnomalyDetector {
 public:
  explicit GatedZScore(Gate* g) : gate_(g) {}
  std::string name() const override { return "gated-zscore"; }
  void fit(const Eigen::MatrixXd& x) override {
    std::unique_lock lock(gate_->mu);
    ++gate_->fits_started;
    gate_->cv.notify_all();
    gate_->cv.wait(lock, [&] { return gate_->open; });
    inner_.fit(x);
  }
  Eigen::VectorXd score(const Eigen::MatrixXd& x) const override { return inner_.score(x); }

 private:
  Gate* gate_;
  ZScore inner_;
};
}  // namespace

TEST(AnalyzeOnlineScorer, ScoresAsItemsArriveAndFlagsPlantedOutliers) {
  OnlineScorerOptions o;
  o.min_train_items = 200;
  o.refit_interval_ns = 100 * kSecond;
  o.detector.method = "gmm";
  o.detector.gmm.components = 1;
  OnlineAnomalyScorer s(2, o);
  std::mt19937 rng(1);
  std::normal_distribution<double> g(0, 1);
  int64_t t = 0;
  for (int i = 0; i < 199; ++i) EXPECT_FALSE(s.observe(t += kSecond, Eigen::RowVector2d(g(rng), g(rng))).scored);
  s.observe(t += kSecond, Eigen::RowVector2d(g(rng), g(rng)));  // 200th item starts the first fit
  s.wait_for_refit();
  ASSERT_TRUE(s.model());
  EXPECT_EQ(s.model()->version, 1u);
  EXPECT_EQ(s.model()->trained_items, 200u);
  int false_alarms = 0;
  for (int i = 0; i < 300; ++i) false_alarms += s.observe(t += kSecond, Eigen::RowVector2d(g(rng), g(rng))).anomaly;
  EXPECT_LT(false_alarms, 15);
  const OnlineScore planted = s.observe(t += kSecond, Eigen::RowVector2d(9, -9));
  EXPECT_TRUE(planted.scored);
  EXPECT_TRUE(planted.anomaly);
  s.wait_for_refit();
  EXPECT_GE(s.refits(), 2u);  // refit every 100 s of items
  EXPECT_THROW(s.observe(t, Eigen::RowVector3d(1, 2, 3)), DetectorInputError);
  EXPECT_THROW(s.observe(t, Eigen::RowVector2d(NAN, 0)), DetectorInputError);
}

TEST(AnalyzeOnlineScorer, TrainsOnlyOnTheHorizon) {
  OnlineScorerOptions o;
  o.horizon_ns = 3600 * kSecond;
  o.refit_interval_ns = 600 * kSecond;
  o.min_train_items = 100;
  o.detector.method = "zscore";
  OnlineAnomalyScorer s(1, o);
  std::mt19937 rng(2);
  std::normal_distribution<double> g(0, 1);
  int64_t t = 0;
  // Hour 1: level 0. Hours 2-3: level 50. One item every 10 s.
  for (int i = 0; i < 360; ++i) s.observe(t += 10 * kSecond, Eigen::RowVectorXd::Constant(1, g(rng)));
  s.wait_for_refit();
  for (int i = 0; i < 720; ++i) {
    s.observe(t += 10 * kSecond, Eigen::RowVectorXd::Constant(1, 50 + g(rng)));
    s.wait_for_refit();  // deterministic for the test: each due refit completes
  }
  const auto m = s.model();
  ASSERT_TRUE(m);
  EXPECT_GE(m->trained_from_ns, t - 3600 * kSecond - 600 * kSecond);  // no item older than the horizon
  EXPECT_LE(m->trained_items, 361u);
  EXPECT_LE(s.horizon_items(), 360u + 256u);  // old chunks were dropped
  // The old level is now anomalous, the new one normal.
  EXPECT_TRUE(s.observe(t += kSecond, Eigen::RowVectorXd::Constant(1, 0.0)).anomaly);
  EXPECT_FALSE(s.observe(t += kSecond, Eigen::RowVectorXd::Constant(1, 50.0)).anomaly);
}

TEST(AnalyzeOnlineScorer, ScoringContinuesWhileARefitRuns) {
  Gate gate;
  OnlineScorerOptions o;
  o.min_train_items = 50;
  o.refit_interval_ns = 10 * kSecond;
  o.make_detector = [&gate] { return std::make_unique<GatedZScore>(&gate); };
  OnlineAnomalyScorer s(1, o);
  int64_t t = 0;
  for (int i = 0; i < 50; ++i) s.observe(t += kSecond, Eigen::RowVectorXd::Constant(1, i % 7));
  s.wait_for_refit();
  ASSERT_TRUE(s.model());
  {
    std::lock_guard lock(gate.mu);
    gate.open = false;  // the next fit blocks
  }
  for (int i = 0; i < 10; ++i) s.observe(t += kSecond, Eigen::RowVectorXd::Constant(1, i % 7));  // due refit starts
  {
    std::unique_lock lock(gate.mu);
    gate.cv.wait(lock, [&] { return gate.fits_started == 2; });
  }
  EXPECT_TRUE(s.refitting());
  // Thousands of items are scored by model 1 while model 2 is still being fitted.
  for (int i = 0; i < 5000; ++i) {
    const OnlineScore r = s.observe(t += kSecond / 100, Eigen::RowVectorXd::Constant(1, i % 7));
    ASSERT_TRUE(r.scored);
    ASSERT_EQ(r.model_version, 1u);
  }
  {
    std::lock_guard lock(gate.mu);
    gate.open = true;
  }
  gate.cv.notify_all();
  s.wait_for_refit();
  EXPECT_EQ(s.model()->version, 2u);
  EXPECT_EQ(s.observe(t += kSecond, Eigen::RowVectorXd::Constant(1, 3)).model_version, 2u);
}

TEST(AnalyzeOnlineScorer, FailedFitKeepsServingAndSaysWhy) {
  OnlineScorerOptions o;
  o.min_train_items = 10;
  o.detector.method = "pca";  // all-constant data cannot be fitted by PCA
  OnlineAnomalyScorer s(2, o);
  int64_t t = 0;
  for (int i = 0; i < 10; ++i) s.observe(t += kSecond, Eigen::RowVector2d(1, 1));
  s.wait_for_refit();
  EXPECT_FALSE(s.model());
  EXPECT_NE(s.last_error().find("constant"), std::string::npos) << s.last_error();
  EXPECT_FALSE(s.observe(t += kSecond, Eigen::RowVector2d(1, 1)).scored);
  EXPECT_FALSE(s.refitting());  // no refit storm: the next try waits for the refit interval
}

// learn_flagged = false: what the model flags stays out of the horizon, so a repeated fault stays anomalous; by
// default it joins the horizon, and a second identical burst is no longer above the threshold.
TEST(AnalyzeOnlineScorer, FlaggedItemsStayOutOfTheHorizonWhenAsked) {
  auto run = [](bool learn_flagged) {
    OnlineScorerOptions o;
    o.horizon_ns = 600 * kSecond;
    o.refit_interval_ns = 10 * kSecond;
    o.min_train_items = 100;
    o.quantile = 0.99;
    o.detector.method = "zscore";
    o.learn_flagged = learn_flagged;
    OnlineAnomalyScorer s(1, o);
    std::mt19937 rng(4);
    std::normal_distribution<double> g(0, 1);
    int64_t t = 0;
    auto feed = [&](int n, double level) {
      int flagged = 0;
      for (int i = 0; i < n; ++i) {
        flagged += s.observe(t += kSecond, Eigen::RowVectorXd::Constant(1, level + g(rng))).anomaly;
        s.wait_for_refit();
      }
      return flagged;
    };
    feed(200, 0);
    const int first = feed(30, 8);  // a burst
    feed(60, 0);
    const int second = feed(30, 8);  // the same burst again, its first one still in the horizon
    return std::tuple{first, second, s.horizon_items()};
  };
  const auto [first_default, second_default, items_default] = run(true);
  const auto [first_kept_out, second_kept_out, items_kept_out] = run(false);
  EXPECT_GE(first_default, 5);  // flagged when it starts, then learnt
  EXPECT_LT(first_default, 30);
  EXPECT_LT(second_default, 5);
  EXPECT_EQ(first_kept_out, 30);
  EXPECT_EQ(second_kept_out, 30);
  EXPECT_EQ(items_default, 320u);
  EXPECT_LE(items_kept_out, 320u - 60u);  // both bursts and the few normal items flagged
  EXPECT_GE(items_kept_out, 320u - 60u - 10u);
}

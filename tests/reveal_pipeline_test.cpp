// Reveal pipeline pieces (src/analyze): windows, window features, pruning, ensemble, attribution, agreement, NAB.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "analyze/reveal/attribution.h"
#include "analyze/reveal/metric_pruning.h"
#include "analyze/metrics/nab_score.h"
#include "analyze/reveal/reveal_ensemble.h"
#include "analyze/reveal/window_agreement.h"
#include "analyze/reveal/window_features.h"
#include "analyze/reveal/windows.h"

using namespace stackscope;
using namespace stackscope::analyze;

namespace {
constexpr int64_t kMs = 1'000'000;
constexpr int64_t kS = 1'000'000'000;
double feature(const std::array<double, kDynamicFeatureCount>& f, WindowFeature w) {
  return f[static_cast<size_t>(w)];
}
}  // namespace

TEST(RevealWindows, CountsAndBounds) {
  WindowSpec spec;  // 3 s / 1 s
  EXPECT_EQ(window_count(0, 10 * kS, spec), 8u);  // starts 0..7
  EXPECT_EQ(window_at(0, 7, spec).end_ns, 10 * kS);
  EXPECT_EQ(window_count(0, 2 * kS, spec), 1u);   // shorter than one window: still one
  EXPECT_EQ(window_count(5, 5, spec), 0u);
  EXPECT_THROW(validate_window_spec({kS, 2 * kS}), std::invalid_argument);
  EXPECT_EQ(parse_duration_ns("1.5s"), 1'500'000'000);
  EXPECT_EQ(parse_duration_ns("500ms"), 500 * kMs);
  EXPECT_EQ(parse_duration_ns("3"), 3 * kS);
  EXPECT_FALSE(parse_duration_ns("3 parsecs"));
  EXPECT_FALSE(parse_duration_ns("-1s"));
  EXPECT_FALSE(parse_duration_ns("0s"));
}

TEST(RevealWindows, CounterDifferencerHandlesReset) {
  CounterDifferencer d;
  EXPECT_FALSE(d.push(0, 100));
  auto a = d.push(500 * kMs, 150);
  ASSERT_TRUE(a);
  EXPECT_DOUBLE_EQ(a->increment, 50);
  EXPECT_DOUBLE_EQ(a->rate_per_s, 100);
  auto b = d.push(kS, 7);  // counter restarted
  ASSERT_TRUE(b);
  EXPECT_DOUBLE_EQ(b->increment, 7);
}

TEST(RevealWindowFeatures, MomentsTrendAndAutocorrelation) {
  std::vector<double> x = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  std::vector<int64_t> t;
  for (size_t i = 0; i < x.size(); ++i) t.push_back(static_cast<int64_t>(i) * 100 * kMs);
  std::array<double, kDynamicFeatureCount> f;
  dynamic_window_features(x, t, f);
  EXPECT_DOUBLE_EQ(feature(f, WindowFeature::mean), 5.5);
  EXPECT_DOUBLE_EQ(feature(f, WindowFeature::variance), 8.25);  // population variance
  EXPECT_DOUBLE_EQ(feature(f, WindowFeature::min), 1);
  EXPECT_DOUBLE_EQ(feature(f, WindowFeature::max), 10);
  EXPECT_NEAR(feature(f, WindowFeature::skewness), 0, 1e-12);
  EXPECT_NEAR(feature(f, WindowFeature::kurtosis), -1.2242424, 1e-6);  // uniform-like: platykurtic
  EXPECT_NEAR(feature(f, WindowFeature::trend_slope), 10.0, 1e-9);     // 1 per 100 ms
  EXPECT_NEAR(feature(f, WindowFeature::autocorr_lag1), 0.7, 1e-12);   // statsmodels acf(1) of 1..10
  // A trending window is far less stationary than white noise.
  std::mt19937 rng(1);
  std::normal_distribution<double> noise;
  std::vector<double> w(x.size());
  for (double& v : w) v = noise(rng);
  std::array<double, kDynamicFeatureCount> g;
  dynamic_window_features(w, t, g);
  EXPECT_GT(feature(f, WindowFeature::stationarity), feature(g, WindowFeature::stationarity));
}

TEST(RevealWindowFeatures, DegenerateWindowsAreFinite) {
  std::array<double, kDynamicFeatureCount> f;
  std::vector<double> c(30, 42.0);
  std::vector<int64_t> t(30);
  for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<int64_t>(i) * 100 * kMs;
  dynamic_window_features(c, t, f);
  for (double v : f) EXPECT_TRUE(std::isfinite(v));
  EXPECT_EQ(feature(f, WindowFeature::variance), 0);
  EXPECT_EQ(feature(f, WindowFeature::mean), 42);
  dynamic_window_features(std::span<const double>(), std::span<const int64_t>(), f);
  for (double v : f) EXPECT_EQ(v, 0);
  std::vector<double> one = {3};
  std::vector<int64_t> t1 = {5};
  dynamic_window_features(one, t1, f);
  EXPECT_EQ(feature(f, WindowFeature::mean), 3);
}

TEST(RevealWindowFeatures, ExtractorStreamsRunsCountersAndEvents) {
  // 10 s at 100 ms: a gauge, a cumulative byte counter (dynamic: rate) and an error counter (window sums).
  WindowFeatureExtractor ex(WindowSpec{}, 0, 10 * kS);
  ex.add_series(1, SeriesKind::gauge, SeriesCategory::dynamic);
  ex.add_series(2, SeriesKind::counter, SeriesCategory::dynamic);
  ex.add_series(3, SeriesKind::counter, SeriesCategory::event_counter);
  ex.add_series(4, SeriesKind::static_value, SeriesCategory::static_value);
  std::vector<int64_t> t;
  std::vector<double> gauge, bytes, errors, fixed;
  for (int i = 0; i < 100; ++i) {
    t.push_back(i * 100 * kMs);
    gauge.push_back(i < 50 ? 1.0 : 2.0);
    bytes.push_back(1000.0 * i);                 // 10 000 bytes/s
    errors.push_back(i >= 60 ? 5.0 * (i - 59) : 0);  // 5 errors per sample from 6 s on
    fixed.push_back(64);
  }
  // Delivered in blocks of 7, as a recording would.
  for (size_t b = 0; b < t.size(); b += 7) {
    size_t n = std::min<size_t>(7, t.size() - b);
    std::span<const int64_t> tt(t.data() + b, n);
    ex.add_samples(1, tt, std::span<const double>(gauge.data() + b, n));
    ex.add_samples(2, tt, std::span<const double>(bytes.data() + b, n));
    ex.add_samples(3, tt, std::span<const double>(errors.data() + b, n));
    ex.add_samples(4, tt, std::span<const double>(fixed.data() + b, n));
  }
  ex.finish();
  ASSERT_EQ(ex.window_count(), 8u);
  ASSERT_EQ(ex.columns().size(), 2 * kDynamicFeatureCount + 1);  // static series: no columns
  const auto& m = ex.features();
  EXPECT_TRUE(m.allFinite());
  EXPECT_DOUBLE_EQ(m(0, 0), 1.0);                                                      // gauge mean, window [0,3)
  EXPECT_DOUBLE_EQ(m(7, 0), 2.0);                                                      // window [7,10)
  EXPECT_NEAR(m(3, static_cast<Eigen::Index>(kDynamicFeatureCount)), 10'000.0, 1e-6);  // byte rate
  const auto sum_col = static_cast<Eigen::Index>(2 * kDynamicFeatureCount);
  EXPECT_DOUBLE_EQ(m(0, sum_col), 0);
  EXPECT_DOUBLE_EQ(m(7, sum_col), 150);  // 30 samples x 5 errors
  auto levels = ex.series_levels();
  ASSERT_EQ(levels.size(), 4u);
  EXPECT_DOUBLE_EQ(levels[3].mean, 64);  // static series still have a level for cross-host comparison
}

TEST(RevealWindowFeatures, RowSinkHandsOverTheSameRowsInOrderWithBoundedPending) {
  // Two series, one of which stops half-way: the streaming extractor must give the matrix mode's rows where
  // both series are present, in window order, while never holding more than max_pending rows.
  auto feed = [](WindowFeatureExtractor& ex) {
    ex.add_series(1, SeriesKind::gauge, SeriesCategory::dynamic);
    ex.add_series(2, SeriesKind::counter, SeriesCategory::event_counter);
    for (int64_t block = 0; block < 60; ++block) {  // 1 s blocks of 100 ms samples, both series per block
      std::vector<int64_t> t;
      std::vector<double> a, b;
      for (int i = 0; i < 10; ++i) {
        t.push_back((block * 10 + i) * 100 * kMs);
        a.push_back(std::sin(static_cast<double>(block * 10 + i)) + (block == 40 ? 5 : 0));
        b.push_back(static_cast<double>(block * 10 + i) / 3);
      }
      ex.add_samples(1, t, a);
      if (block < 30) ex.add_samples(2, t, b);
    }
    ex.finish();
  };
  WindowFeatureExtractor batch(WindowSpec{}, 0, 60 * kS);
  feed(batch);
  WindowFeatureExtractor streaming(WindowSpec{}, 0, 60 * kS);
  std::vector<size_t> order;
  std::vector<std::vector<double>> rows;
  streaming.set_row_sink([&](size_t w, std::span<const double> r) {
    order.push_back(w);
    rows.emplace_back(r.begin(), r.end());
  }, 8);
  feed(streaming);
  ASSERT_EQ(rows.size(), batch.window_count());
  EXPECT_TRUE(streaming.features().size() == 0);
  for (size_t w = 0; w < rows.size(); ++w) {
    EXPECT_EQ(order[w], w);
    // Windows series 2 completed before it stopped (a window completes when a later sample arrives; its last
    // window, ending at 30 s, only at finish(), after its row was handed over with the pending bound of 8).
    const bool both = w + 3 < 30;
    for (size_t c = 0; c < rows[w].size(); ++c) {
      if (both || streaming.columns()[c].series == 1) {
        EXPECT_NEAR(rows[w][c], batch.features()(static_cast<Eigen::Index>(w), static_cast<Eigen::Index>(c)), 1e-9)
            << "window " << w << " column " << c;
      }
    }
  }
  EXPECT_THROW(streaming.set_row_sink([](size_t, std::span<const double>) {}), std::logic_error);
}

TEST(RevealPruning, CorrelationAccumulatorMatchesTheMatrixForm) {
  std::mt19937 rng(5);
  std::normal_distribution<double> n01;
  Eigen::MatrixXd x(1000, 4);
  for (int i = 0; i < 1000; ++i) {
    const double a = n01(rng);
    x.row(i) << 1e9 + 1e3 * a, -a + 0.5 * n01(rng), n01(rng), 7.0;  // large offset, correlated, free, constant
  }
  CorrelationAccumulator acc2(4);
  for (int i = 0; i < 1000; ++i) {
    std::vector<double> r = {x(i, 0), x(i, 1), x(i, 2), x(i, 3)};
    acc2.add(r);
  }
  const Eigen::MatrixXd want = pearson_correlation(x), got = acc2.correlation();
  EXPECT_EQ(acc2.rows(), 1000u);
  EXPECT_LT((want - got).cwiseAbs().maxCoeff(), 1e-6);
  EXPECT_EQ(got(3, 3), 0.0);
  EXPECT_LT(got(0, 1), -0.5);
  EXPECT_THROW(acc2.add(std::vector<double>{1, 2}), std::invalid_argument);
  PruningWorkload w{"w", {"a", "b", "c", "d"}, Eigen::MatrixXd(), got};
  auto pr = prune_metrics({w});
  EXPECT_EQ(pr.kept.size(), 2u);  // a-or-b, and c; d is constant
  EXPECT_EQ(pr.constant, std::vector<std::string>{"d"});
}

TEST(RevealPruning, KeepsOneRepresentativePerCorrelatedGroup) {
  std::mt19937 rng(7);
  std::normal_distribution<double> n01;
  const int rows = 200;
  Eigen::MatrixXd v(rows, 4);
  for (int i = 0; i < rows; ++i) {
    double a = n01(rng), b = n01(rng);
    v(i, 0) = 3 * a + 0.1 * n01(rng);   // disk sectors (throughput)
    v(i, 1) = a + 0.05 * n01(rng);      // disk reads merged: same signal
    v(i, 2) = b;                        // cpu util: independent
    v(i, 3) = 0;                        // constant
  }
  PruningWorkload w{"run", {"disk.sectors_read", "disk.reads_merged", "cpu.util", "mem.hugepages"}, v, {}};
  auto r = prune_metrics({w});
  EXPECT_EQ(r.kept, (std::vector<std::string>{"cpu.util", "disk.sectors_read"}));
  EXPECT_EQ(r.constant, std::vector<std::string>{"mem.hugepages"});
  // Union over workloads: a second workload where the merge counter is independent keeps it too.
  Eigen::MatrixXd v2 = v;
  for (int i = 0; i < rows; ++i) v2(i, 1) = n01(rng);
  auto r2 = prune_metrics({w, PruningWorkload{"run2", w.metrics, v2, {}}});
  EXPECT_EQ(r2.kept, (std::vector<std::string>{"cpu.util", "disk.reads_merged", "disk.sectors_read"}));
  EXPECT_THROW(prune_metrics({PruningWorkload{"bad", {"x"}, v, {}}}), std::invalid_argument);
}

TEST(RevealEnsembleTest, AgreementRisesOnAnInjectedShift) {
  std::mt19937 rng(3);
  std::normal_distribution<double> n01;
  Eigen::MatrixXd x(300, 6);
  for (int i = 0; i < x.rows(); ++i)
    for (int j = 0; j < x.cols(); ++j) x(i, j) = n01(rng);
  x.col(5).setConstant(1.0);  // constant column: ignored, not an error
  for (int i = 200; i < 203; ++i) x(i, 2) += 12;  // a burst in one metric
  RevealEnsemble e;
  e.fit(x);
  auto r = e.evaluate(x);
  EXPECT_EQ(e.used_columns().size(), 5u);
  for (int i = 200; i < 203; ++i) {
    EXPECT_EQ(r.flags[static_cast<size_t>(i)], kRevealZ | kRevealMaha | kRevealIf) << i;
    EXPECT_GE(r.score(i), 3.0);
  }
  EXPECT_LE(r.flagged(), 12u);  // about 1% per detector
  EXPECT_EQ(reveal_methods_label(kRevealZ | kRevealIf), "Z, IF");
  EXPECT_THROW(e.evaluate(Eigen::MatrixXd::Zero(2, 3)), DetectorInputError);
}

TEST(RevealAttribution, NamesTheMetricAndSubsystem) {
  std::mt19937 rng(5);
  std::normal_distribution<double> n01;
  Eigen::MatrixXd x(100, 3);
  for (int i = 0; i < 100; ++i) x.row(i) << 0.1 + 0.01 * n01(rng), 1e6 + 1e4 * n01(rng), 0;
  x(50, 0) = 0.95;  // cpu util mean jumps
  x(50, 2) = 40;    // and a few errors on a counter that is otherwise idle
  std::vector<AttributedColumn> cols = {{"cpu.util", Subsystem::cpu, WindowFeature::mean},
                                        {"disk.sectors_read{vda}", Subsystem::storage, WindowFeature::max},
                                        {"net.tx.errs{eth0}", Subsystem::network, WindowFeature::sum}};
  auto base = robust_baseline(x);
  auto a = attribute_window(x.row(50), base, cols);
  ASSERT_FALSE(a.reasons.empty());
  EXPECT_EQ(a.reasons[0].subject, "cpu.util");
  EXPECT_EQ(a.subsystem, Subsystem::cpu);
  EXPECT_NE(a.reasons[0].claim.find("within-window mean is above the baseline"), std::string::npos);
  for (const auto& k : a.reasons) EXPECT_TRUE(std::isfinite(k.z));
}

TEST(RevealAttribution, CrossHostFindsTheOddHost) {
  std::vector<HostLevel> levels;
  const char* hosts[] = {"h1", "h2", "h3", "h4", "h5"};
  for (int i = 0; i < 5; ++i) {
    levels.push_back({hosts[i], "mem.used", Subsystem::memory, (i == 3 ? 9.0 : 4.0 + 0.05 * i) * 1e9, {}, 0});
    levels.push_back({hosts[i], "cpu.util", Subsystem::cpu, 0.5 + 0.01 * i, {}, 0});
  }
  auto d = cross_host_deviations(levels);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].host, "h4");
  EXPECT_EQ(d[0].subject, "mem.used");
  EXPECT_EQ(d[0].subsystem, Subsystem::memory);
  // Two hosts: no odd one out.
  levels.resize(4);
  EXPECT_TRUE(cross_host_deviations(levels).empty());
}

TEST(RevealWindowAgreement, IouAndHitRates) {
  std::vector<Interval> a = {{0, 10}, {20, 30}, {50, 60}};
  std::vector<Interval> b = {{5, 15}, {25, 26}};
  auto r = window_agreement(a, b);
  EXPECT_EQ(r.length_a, 30);
  EXPECT_EQ(r.length_b, 11);
  EXPECT_EQ(r.length_both, 6);
  EXPECT_DOUBLE_EQ(r.iou, 6.0 / 35.0);
  EXPECT_DOUBLE_EQ(r.hit_by_count, 2.0 / 3.0);
  EXPECT_DOUBLE_EQ(r.hit_by_length, 6.0 / 30.0);
  EXPECT_EQ(merge_intervals({{0, 5}, {3, 8}, {8, 9}}).size(), 1u);
  auto same = window_agreement(a, a);
  EXPECT_DOUBLE_EQ(same.iou, 1.0);
  EXPECT_DOUBLE_EQ(window_agreement({}, {}).iou, 1.0);
}

TEST(RevealNabScore, MatchesNabSweeperRules) {
  EXPECT_NEAR(nab_scaled_sigmoid(-1.0), 0.98661, 1e-5);
  EXPECT_NEAR(nab_scaled_sigmoid(0.0), 0.0, 1e-12);
  EXPECT_EQ(nab_scaled_sigmoid(3.0), -1.0);
  // 1000 rows, probation = 150 rows; one window [400, 499].
  const auto profile = NabProfile::standard();
  auto p = nab_prepare(1000, {{400, 499}}, profile);
  EXPECT_EQ(p.scored_windows, 1u);
  std::vector<uint8_t> none(1000, 0);
  auto null_score = nab_score_file(p, none, profile);
  EXPECT_DOUBLE_EQ(null_score.score, -1.0);
  std::vector<uint8_t> perfect(1000, 0);
  perfect[400] = 1;
  auto best = nab_score_file(p, perfect, profile);
  EXPECT_NEAR(best.score, 1.0, 1e-12);
  EXPECT_NEAR(nab_normalized(best.score, 1, profile), 100.0, 1e-9);
  EXPECT_NEAR(nab_normalized(null_score.score, 1, profile), 0.0, 1e-9);
  // A late detection earns less; a far false positive costs A_FP; a detection in probation is ignored.
  std::vector<uint8_t> late(1000, 0);
  late[490] = 1;
  late[900] = 1;
  late[10] = 1;
  auto l = nab_score_file(p, late, profile);
  EXPECT_EQ(l.fp, 1u);
  EXPECT_LT(l.score, 1.0 - 0.11 + 1e-9);
  EXPECT_GT(l.score, -1.0);
  EXPECT_NEAR(l.score, nab_scaled_sigmoid(-10.0 / 100.0) / nab_scaled_sigmoid(-1.0) - 0.11, 1e-9);
}

TEST(RevealNabScore, BestThresholdAgreesWithScoringEveryCandidate) {
  // Two files; NAB's optimiser must pick the threshold whose corpus score, computed file by file with
  // nab_score_file, is the highest among all distinct anomaly scores.
  const auto profile = NabProfile::standard();
  std::vector<NabFileScoring> files = {nab_prepare(400, {{200, 239}}, profile),
                                       nab_prepare(300, {{100, 119}, {250, 269}}, profile)};
  std::vector<std::vector<double>> scores(2);
  uint64_t state = 12345;
  auto next = [&] {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<double>(state >> 40) / static_cast<double>(1ULL << 24);
  };
  for (size_t f = 0; f < 2; ++f) {
    scores[f].resize(files[f].sweep_score.size());
    for (double& s : scores[f]) s = std::round(next() * 50) / 100;  // ties on purpose
  }
  scores[0][205] = 0.9;  // early in file 0's window
  scores[1][255] = 0.95;
  auto corpus_at = [&](double thr) {
    double raw = 0;
    for (size_t f = 0; f < 2; ++f) {
      std::vector<uint8_t> det(scores[f].size());
      for (size_t i = 0; i < det.size(); ++i) det[i] = scores[f][i] >= thr;
      raw += nab_score_file(files[f], det, profile).score;
    }
    return raw;
  };
  double best_raw = corpus_at(2.0), best_thr = 2.0;  // nothing detected
  for (const auto& fs : scores)
    for (double t : fs)
      if (corpus_at(t) > best_raw) {
        best_raw = corpus_at(t);
        best_thr = t;
      }
  const NabThreshold got = nab_best_threshold(files, scores, profile);
  EXPECT_NEAR(got.raw, best_raw, 1e-9);
  EXPECT_NEAR(corpus_at(got.threshold), best_raw, 1e-9);
  EXPECT_GT(best_thr, 0.5);  // the two planted early detections beat the noise
  // NAB's normalisation counts every labelled window as the perfect score.
  EXPECT_NEAR(nab_normalized(3.0, 3, profile, 4), 100.0 * 6.0 / 7.0, 1e-9);
}

// Reveal reports (src/analyze): cross-host deviations against a robust cluster baseline, incidents from flagged
// windows (persistence or agreement), scale floors from metric resolutions, and the engine's recording passes.
#include <gtest/gtest.h>

#include <random>

#include "analyze/reveal/attribution.h"
#include "analyze/reveal/reveal_pipeline.h"
#include "analyze/reveal/reveal_recording.h"

using namespace stackscope;
using namespace stackscope::analyze;

namespace {
// Per-window levels around `level` with relative noise `rel`.
std::vector<double> noisy(double level, double rel, size_t n, std::mt19937& rng) {
  std::normal_distribution<double> e(0, 1);
  std::vector<double> v(n);
  for (double& x : v) x = level * (1 + rel * e(rng));
  return v;
}
}  // namespace

TEST(RevealCrossHost, OnlyTheHostThatPersistentlyDeviatesIsReported) {
  std::mt19937 rng(7);
  std::vector<HostLevel> levels;
  for (int h = 0; h < 4; ++h) {
    const std::string host = "host" + std::to_string(h);
    // host2 holds 4 GiB more, all along.
    levels.push_back({host, "mem.AnonPages", Subsystem::memory, 0, noisy(h == 2 ? 5.3e9 : 1.0e9, 0.02, 8, rng), 1 << 20});
    // host0: one page-fault storm in one window of eight moves its mean, not its windows.
    std::vector<double> faults = noisy(700, 0.1, 8, rng);
    if (h == 0) faults[3] = 2e5;
    levels.push_back({host, "vm.pgfault", Subsystem::memory, 0, faults, 1});
    // Two hosts of four high on dirty pages: two groups, no baseline and outliers.
    levels.push_back({host, "mem.Dirty", Subsystem::memory, 0, noisy(h < 2 ? 2e8 : 1e7, 0.05, 8, rng), 1 << 20});
    // 2.7 % of a core against 0: below the metric's resolution (one jiffy a second) times min_robust_z.
    levels.push_back({host, "cpu.time.system{cpu2}", Subsystem::cpu, 0, std::vector<double>(8, h == 1 ? 2.7 : 0.0), 1});
    // A static series: its value, no windows.
    levels.push_back({host, "mem.HugePages_Total", Subsystem::memory, h == 2 ? 4.0 : 0.0, {}, 1});
  }
  const auto dev = cross_host_deviations(levels);
  ASSERT_EQ(dev.size(), 2u);
  for (const HostDeviation& d : dev) {
    EXPECT_EQ(d.host, "host2");
    EXPECT_EQ(d.subsystem, Subsystem::memory);
    EXPECT_GE(d.persistence, 0.8);
  }
  EXPECT_EQ(dev[0].subject, "mem.AnonPages");
  EXPECT_GT(dev[0].robust_z, 4);
  EXPECT_NE(dev[0].claim.find("host host2 deviates from the cluster baseline on mem.AnonPages"), std::string::npos)
      << dev[0].claim;
  EXPECT_NE(dev[1].claim.find("from 0"), std::string::npos) << dev[1].claim;  // no percentage of nothing

  const auto reports = cross_host_reports(dev);
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0].host, "host2");
  EXPECT_EQ(reports[0].subsystem, Subsystem::memory);
  EXPECT_EQ(reports[0].deviating_metrics, 2u);
  EXPECT_NE(reports[0].claim.find("and 1 more memory metric"), std::string::npos) << reports[0].claim;

  // Without the odd host (and the split metric, where one host of three would be the odd one) nobody deviates;
  // with two hosts there is no odd one.
  std::vector<HostLevel> even;
  for (const HostLevel& l : levels)
    if (l.host != "host2" && l.subject != "mem.Dirty") even.push_back(l);
  EXPECT_TRUE(cross_host_deviations(even).empty());
  std::vector<HostLevel> two(levels.begin(), levels.begin() + 10);
  EXPECT_TRUE(cross_host_deviations(two).empty());
}

namespace {
// 120 windows x 6 columns of noise; rows [from, to) shifted on column 0 (cpu) by `shift` sds.
Eigen::MatrixXd windows_with_episode(size_t from, size_t to, double shift, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> e(0, 1);
  Eigen::MatrixXd x(120, 6);
  for (Eigen::Index i = 0; i < x.rows(); ++i)
    for (Eigen::Index j = 0; j < x.cols(); ++j) x(i, j) = 100 + 10 * e(rng);
  for (size_t i = from; i < to; ++i) x(static_cast<Eigen::Index>(i), 0) += shift * 10;
  return x;
}
std::vector<AttributedColumn> six_columns() {
  std::vector<AttributedColumn> c;
  const Subsystem subs[] = {Subsystem::cpu, Subsystem::memory, Subsystem::network, Subsystem::storage,
                            Subsystem::memory, Subsystem::network};
  for (int j = 0; j < 6; ++j) c.push_back({"m" + std::to_string(j), subs[j], WindowFeature::mean, 1});
  return c;
}
}  // namespace

TEST(RevealIncidents, PersistentEpisodeIsOneIncidentAndLoneWindowsAreNotReported) {
  RevealPipelineOptions opt;
  opt.merge_gap_windows = 3;  // 3 s windows, 1 s stride
  // Fitted on the first 60 windows (clean); an episode of 8 windows at 90.
  const Eigen::MatrixXd x = windows_with_episode(90, 98, 12, 3);
  RevealStreamingPipeline p(six_columns(), opt);
  p.fit(x.topRows(60), 120);
  std::vector<double> row(6);
  for (Eigen::Index i = 0; i < x.rows(); ++i) {
    for (Eigen::Index j = 0; j < 6; ++j) row[static_cast<size_t>(j)] = x(i, j);
    p.add_window(static_cast<size_t>(i), row);
  }
  const RevealPipelineResult r = p.finish();
  // The 99th-percentile thresholds flag some clean windows too; only the episode is reported.
  size_t episode = 0;
  for (const RevealAnomaly& a : r.anomalies) {
    const bool in_episode = a.last_window >= 90 && a.first_window < 98;
    episode += in_episode;
    EXPECT_TRUE(in_episode || a.flagged_windows >= opt.min_incident_windows || a.agreement >= opt.min_agreement);
  }
  ASSERT_EQ(episode, 1u);
  const RevealAnomaly& a = *std::find_if(r.anomalies.begin(), r.anomalies.end(),
                                         [](const RevealAnomaly& k) { return k.last_window >= 90; });
  EXPECT_EQ(a.subsystem, Subsystem::cpu);
  EXPECT_LE(a.first_window, 90u);
  EXPECT_GE(a.last_window, 97u);
  EXPECT_GE(a.flagged_windows, 8u);
  ASSERT_FALSE(a.reasons.empty());
  EXPECT_EQ(a.reasons[0].subject, "m0");
  ASSERT_FALSE(a.subsystems.empty());
  EXPECT_EQ(a.subsystems[0].first, Subsystem::cpu);
}

TEST(RevealIncidents, ResolutionFloorKeepsAQuietColumnFromFlaggingEveryWindow) {
  // Column 5 is an event counter at exactly 0 through the fit, then a single event now and then; column 4 a
  // gauge that barely moves in the fit (0.001 of its unit), then by a tenth of its resolution.
  Eigen::MatrixXd x = windows_with_episode(0, 0, 0, 5);
  for (Eigen::Index i = 0; i < x.rows(); ++i) {
    x(i, 5) = (i >= 60 && i % 7 == 0) ? 1 : 0;
    x(i, 4) = 50 + (i < 60 ? 0.001 * (i % 2) : 0.1 * (i % 3));
  }
  auto cols = six_columns();
  cols[5].feature = WindowFeature::sum;
  auto count_after_fit = [&](bool use_resolutions) {
    RevealPipelineOptions opt;
    opt.use_resolutions = use_resolutions;
    RevealStreamingPipeline p(cols, opt);
    p.fit(x.topRows(60), 120);
    std::vector<double> row(6);
    for (Eigen::Index i = 0; i < x.rows(); ++i) {
      for (Eigen::Index j = 0; j < 6; ++j) row[static_cast<size_t>(j)] = x(i, j);
      p.add_window(static_cast<size_t>(i), row);
    }
    const RevealPipelineResult r = p.finish();
    return std::count_if(r.windows.begin(), r.windows.end(), [](const RevealWindowReport& w) { return w.window >= 60; });
  };
  EXPECT_GT(count_after_fit(false), 40);  // without floors nearly every window after the fit is "anomalous"
  EXPECT_LE(count_after_fit(true), 6);    // with them, about the 1 % the thresholds allow, plus chance
}

TEST(RevealRecording, SurveyKeepsStaticSeriesForCrossHostOnlyAndReservoirIsInWindowOrder) {
  SampleStream s;
  s.begin_ns = 0;
  s.end_ns = 20'000'000'000;
  SeriesInfo gauge = series_info("mem.AnonPages", "", Subsystem::memory, "bytes", SeriesKind::gauge,
                                 SeriesCategory::dynamic);
  gauge.id = 1;
  SeriesInfo fixed = series_info("mem.MemTotal", "", Subsystem::memory, "bytes", SeriesKind::static_value,
                                 SeriesCategory::static_value);
  fixed.id = 2;
  // One core's share: compared within the host, not across hosts.
  SeriesInfo core = series_info("cpu.time.user", "cpu3", Subsystem::cpu, "jiffies", SeriesKind::counter,
                                SeriesCategory::dynamic);
  core.id = 3;
  s.series = {gauge, fixed, core};
  s.replay = [&](const SampleRunVisitor& visit) {
    std::vector<int64_t> t;
    std::vector<double> v, total;
    for (int i = 0; i < 200; ++i) {
      t.push_back(i * 100'000'000LL);
      v.push_back(1e9 + (i % 10) * 1e6);
      total.push_back(25e9);
    }
    visit(gauge, t, v);
    visit(fixed, t, total);
    visit(core, t, total);
  };
  const RecordingSurvey survey = survey_recording(s, WindowSpec{}, "h", "run", true);
  EXPECT_EQ(survey.windows, 18u);
  ASSERT_EQ(survey.levels.size(), 2u);
  for (const HostLevel& l : survey.levels) {
    if (l.subject == "mem.MemTotal") {
      EXPECT_TRUE(l.windows.empty());
      EXPECT_DOUBLE_EQ(l.level, 25e9);
    } else {
      EXPECT_EQ(l.windows.size(), 18u);
      EXPECT_EQ(l.resolution, 1 << 20);
    }
  }
  // Static: not correlated; the core is.
  EXPECT_EQ(survey.workload.metrics, (std::vector<std::string>{"mem.AnonPages", "cpu.time.user{cpu3}"}));

  RowReservoir r(4, 1);
  for (size_t w = 0; w < 100; ++w) r.add(w, std::vector<double>{static_cast<double>(w)});
  EXPECT_FALSE(r.holds_everything());
  const Eigen::MatrixXd m = r.matrix();
  ASSERT_EQ(m.rows(), 4);
  for (Eigen::Index i = 1; i < m.rows(); ++i) EXPECT_LT(m(i - 1, 0), m(i, 0));
  EXPECT_THROW(r.add(100, std::vector<double>{1, 2}), std::invalid_argument);
}

TEST(RevealIncidents, PrunedMetricsExplainAFlaggedWindowAndManyReasonsOutweighOneHugeOne) {
  // m5 stands for a metric pruned into m0 (they moved together): the detectors do not see it, attribution does.
  Eigen::MatrixXd x = windows_with_episode(90, 98, 12, 11);
  for (Eigen::Index i = 90; i < 98; ++i) x(i, 5) += 400;  // far more than m0 moves
  auto cols = six_columns();
  cols[5] = {"disk.read_bytes{vda}", Subsystem::storage, WindowFeature::mean, 1, false};
  RevealPipelineOptions opt;
  opt.merge_gap_windows = 3;
  RevealStreamingPipeline p(cols, opt);
  p.fit(x.topRows(60), 120);
  std::vector<double> row(6);
  for (Eigen::Index i = 0; i < x.rows(); ++i) {
    for (Eigen::Index j = 0; j < 6; ++j) row[static_cast<size_t>(j)] = x(i, j);
    p.add_window(static_cast<size_t>(i), row);
  }
  const RevealPipelineResult r = p.finish();
  auto it = std::find_if(r.anomalies.begin(), r.anomalies.end(), [](const RevealAnomaly& a) { return a.last_window >= 90; });
  ASSERT_NE(it, r.anomalies.end());
  ASSERT_FALSE(it->reasons.empty());
  EXPECT_EQ(it->reasons[0].subject, "disk.read_bytes{vda}");

  // One memory reason at z 5e5 (a counter in KiB against a resolution of one) against three storage reasons at
  // z ~2000: storage.
  Eigen::VectorXd w(4);
  w << 5e5, 2000, 1900, 1800;
  FeatureBaseline b{Eigen::VectorXd::Zero(4), Eigen::VectorXd::Ones(4)};
  std::vector<AttributedColumn> c = {{"vm.pgpgin", Subsystem::memory, WindowFeature::min, 1, true},
                                     {"disk.read_bytes{vda}", Subsystem::storage, WindowFeature::max, 1, true},
                                     {"disk.reads{vda}", Subsystem::storage, WindowFeature::mean, 1, true},
                                     {"softirq.BLOCK{cpu1}", Subsystem::storage, WindowFeature::min, 1, true}};
  EXPECT_EQ(attribute_window(w, b, c).subsystem, Subsystem::storage);
  // A variance is no reason of its own: its standard deviation speaks for it.
  c[0].feature = WindowFeature::variance;
  for (const Contribution& k : attribute_window(w, b, c).reasons) EXPECT_NE(k.feature, WindowFeature::variance);
}

// Reported order: the higher score first, then the longer incident; "also" subsystems only above their share.
TEST(RevealIncidents, RankedByScoreThenLengthAndSecondarySubsystemsAboveTheirShare) {
  std::vector<analyze::RevealAnomaly> incidents(3);
  incidents[0].score = 2;
  incidents[0].flagged_windows = 9;
  incidents[1].score = 3;
  incidents[1].flagged_windows = 3;
  incidents[2].score = 3;
  incidents[2].flagged_windows = 5;
  incidents[2].subsystems = {{Subsystem::cpu, 0.5}, {Subsystem::memory, 0.3},
                             {Subsystem::network, 0.15}, {Subsystem::storage, 0.05}};
  const auto ranked = analyze::rank_incidents(incidents);
  ASSERT_EQ(ranked.size(), 3u);
  EXPECT_EQ(ranked[0], &incidents[2]);
  EXPECT_EQ(ranked[1], &incidents[1]);
  EXPECT_EQ(ranked[2], &incidents[0]);
  const auto also = analyze::secondary_subsystems(incidents[2]);
  ASSERT_EQ(also.size(), 1u);
  EXPECT_EQ(also[0].first, Subsystem::memory);
  EXPECT_TRUE(analyze::secondary_subsystems(incidents[0]).empty());
}

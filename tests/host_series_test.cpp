// Host-series detection on data nobody tuned for: windows sized from the sampling interval,
// durations in h and d, the causal series detector (level shifts for as long as they last, bursts of counters
// that sit near zero) end to end on a synthetic host recording, and import's --on-disorder.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>

#include "analyze/detectors/series_novelty.h"
#include "analyze/reveal/window_sizing.h"
#include "analyze/reveal/windows.h"
#include "model/clock.h"
#include "store/recording_reader.h"
#include "store/recording_writer.h"
#include "store/series_csv.h"
#include "test_util.h"

using namespace stackscope;
using namespace stackscope::analyze;

namespace {
constexpr int64_t kMs = 1'000'000, kS = 1'000'000'000;
const std::string kBin = STACKSCOPE_BIN;

nlohmann::json run_json(const std::string& args, int expect_rc = 0) {
  std::string out;
  const int rc = run_command(kBin + " " + args + " 2>/dev/null", &out);
  EXPECT_EQ(rc, expect_rc) << out;
  auto j = nlohmann::json::parse(out, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << out;
  return j;
}

// NAB-like table: one value every `step_s` seconds from 2014-02-14 00:00:00 UTC, daily-ish wave plus noise,
// with `extra` added to rows [from, to).
std::string nab_like_csv(size_t rows, int step_s, size_t from = 0, size_t to = 0, double extra = 0) {
  std::mt19937 rng(7);
  std::normal_distribution<double> n01;
  std::string body = "timestamp,value\n";
  for (size_t i = 0; i < rows; ++i) {
    const int64_t t = 1392336000 + static_cast<int64_t>(i) * step_s;
    const double v =
        50 + 10 * std::sin(static_cast<double>(i) * 2 * M_PI / 288) + n01(rng) + (i >= from && i < to ? extra : 0);
    std::time_t secs = t;
    std::tm tm{};
    gmtime_r(&secs, &tm);
    char ts[32];
    std::strftime(ts, sizeof ts, "%Y-%m-%d %H:%M:%S", &tm);
    body += std::string(ts) + "," + std::to_string(v) + "\n";
  }
  return body;
}
}  // namespace

namespace {
// The findings of the series detector with options `o` over `series` (bin i = series[i]), once it finished.
std::vector<NoveltySpan> spans_of(const std::vector<double>& series, const SeriesNoveltyOptions& o) {
  SeriesNoveltyDetector d(o);
  for (size_t i = 0; i < series.size(); ++i) d.add(i, series[i]);
  d.finish();
  return d.spans();
}
}  // namespace

TEST(HostSeriesDurations, HoursAndDaysAndTheirNames) {
  EXPECT_EQ(parse_duration_ns("1h"), 3600 * kS);
  EXPECT_EQ(parse_duration_ns("1.5h"), 5400 * kS);
  EXPECT_EQ(parse_duration_ns("2d"), 2 * 86400 * kS);
  EXPECT_EQ(parse_duration_ns("5min"), 300 * kS);
  EXPECT_FALSE(parse_duration_ns("1w"));
  EXPECT_NE(std::string(duration_units()).find("h, d"), std::string::npos);
  EXPECT_EQ(format_duration(300 * kS), "5m");
  EXPECT_EQ(format_duration(3600 * kS), "1h");
  EXPECT_EQ(format_duration(1500 * kMs), "1.5s");
  EXPECT_EQ(format_duration(90 * kS), "1.5m");
  EXPECT_EQ(format_duration(250 * kMs), "250ms");
  EXPECT_EQ(format_duration(7), "7ns");
}

TEST(HostSeriesWindows, SizedFromTheSamplingInterval) {
  // procfs at 100 Hz keeps Reveal's 3 s / 1 s.
  auto fast = size_windows(10 * kMs, 3600 * kS);
  EXPECT_EQ(fast.spec.size_ns, 3 * kS);
  EXPECT_EQ(fast.spec.stride_ns, 1 * kS);
  // NAB's 5-minute rows: one window per row, twelve rows a window.
  auto slow = size_windows(300 * kS, 10'000 * 300 * kS);
  EXPECT_EQ(slow.spec.stride_ns, 300 * kS);
  EXPECT_EQ(slow.spec.size_ns, 3600 * kS);
  // A year at 10 ms: the stride grows so that at most kMaxAutoWindows windows are made.
  const int64_t year = 365LL * 86400 * kS;
  auto long_run = size_windows(10 * kMs, year);
  EXPECT_LE(year / long_run.spec.stride_ns, static_cast<int64_t>(kMaxAutoWindows));
  EXPECT_LE(long_run.spec.stride_ns, long_run.spec.size_ns);
  // No interval known: Reveal's defaults.
  EXPECT_EQ(size_windows(std::nullopt, 10 * kS).spec.size_ns, 3 * kS);

  EXPECT_TRUE(window_sample_warning(3 * kS, kS, 10 * kMs).empty());
  const std::string w = window_sample_warning(3 * kS, kS, 300 * kS);
  EXPECT_NE(w.find("at most one sample"), std::string::npos) << w;
  EXPECT_NE(w.find("--window 1h --stride 5m"), std::string::npos) << w;
  EXPECT_NE(w.find("300 windows per sample"), std::string::npos) << w;

  SamplingIntervalEstimator est;
  std::vector<int64_t> a = {0, 300 * kS, 600 * kS, 900 * kS, 1500 * kS}, b = {0, 10 * kMs, 20 * kMs};
  est.add_run(1, a);
  EXPECT_EQ(est.interval_ns(), 300 * kS);  // a gap of 600 s does not move the median
  est.add_run(2, b);
  est.add_run(3, a);
  EXPECT_EQ(est.interval_ns(), 300 * kS);  // median over series
}

TEST(HostSeriesDetector, LevelShiftIsOneFindingForItsWholeDuration) {
  SeriesNoveltyDetector d;
  std::mt19937 rng(3);
  std::normal_distribution<double> n01;
  for (size_t i = 0; i < 600; ++i) d.add(i, 5e6 + 4e5 * n01(rng) + (i >= 300 && i < 360 ? 45 * 5e6 : 0));
  d.finish();
  ASSERT_FALSE(d.spans().empty());
  const NoveltySpan* step = nullptr;
  for (const auto& s : d.spans())
    if (s.first_bin <= 360 && s.last_bin >= 300) step = &s;
  ASSERT_NE(step, nullptr);
  EXPECT_EQ(step->first_bin, 300u);
  EXPECT_EQ(step->last_bin, 359u);
  EXPECT_TRUE(step->above);
  EXPECT_FALSE(step->absorbed);
}

TEST(HostSeriesDetector, BurstOfACounterThatSitsNearZero) {
  SeriesNoveltyOptions o;
  o.range_floor = 100;  // 100 resolutions of one event a second
  SeriesNoveltyDetector d(o);
  std::mt19937 rng(5);
  std::poisson_distribution<int> quiet(0.3);
  for (size_t i = 0; i < 400; ++i) d.add(i, quiet(rng) + (i >= 250 && i < 255 ? 250.0 : 0.0));
  d.finish();
  ASSERT_EQ(d.spans().size(), 1u);
  EXPECT_EQ(d.spans()[0].first_bin, 250u);
  EXPECT_EQ(d.spans()[0].last_bin, 254u);
}

TEST(HostSeriesDetector, ALevelThatStaysBecomesTheNewNormal) {
  SeriesNoveltyOptions o;
  o.max_hold_bins = 50;
  SeriesNoveltyDetector d(o);
  for (size_t i = 0; i < 1000; ++i) d.add(i, (i % 7) + (i >= 300 ? 1000.0 : 0.0));
  d.finish();
  ASSERT_EQ(d.spans().size(), 1u);
  EXPECT_EQ(d.spans()[0].first_bin, 300u);
  EXPECT_TRUE(d.spans()[0].absorbed);
}

// A day view judged before it has a day of history has a range of 0 .. 0 on its first day-old bin, and the
// departure is divided by ~0 (on NAB, scores of 1e306 in 41 of 45 files: docs/benchmarks/host-series-nab.md).
TEST(HostSeriesDetector, DayViewIsJudgedOnlyOnceItHasAHistoryAndNoScoreIsAstronomic) {
  SeriesNoveltyOptions o;
  o.season_bins = 288;  // 5-minute bins
  SeriesNoveltyDetector d(o);
  std::mt19937 rng(13);
  std::normal_distribution<double> n01;
  for (size_t i = 0; i < 4 * 288; ++i) d.add(i, 50 + 10 * std::sin(static_cast<double>(i) * 2 * M_PI / 288) + n01(rng));
  d.finish();
  for (const auto& s : d.spans()) {
    EXPECT_LE(s.score, 1e3) << s.first_bin;
    if (s.view == NoveltyView::season) {
      EXPECT_LT(s.range_low, s.range_high) << s.first_bin;
    }
    // The view first has a bin a day earlier at bin 288 + 6 - 1; no finding may open there for want of history.
    EXPECT_FALSE(s.first_bin >= 288 && s.first_bin < 288 + 6 + 100) << s.first_bin << " " << s.score;
  }
  // A series that never moved and then does: a range of no width gives the largest score, not 1e300.
  SeriesNoveltyDetector flat;
  for (size_t i = 0; i < 300; ++i) flat.add(i, i < 200 ? 0.0 : 5.0);
  flat.finish();
  ASSERT_EQ(flat.spans().size(), 1u);
  EXPECT_EQ(flat.spans()[0].first_bin, 200u);
  EXPECT_EQ(flat.spans()[0].score, kMaxExcess);
}

// A level shift is one finding for as long as it lasts, also past 100 bins: a 1000-bin step of a per-second series
// is one finding, not its start plus a separate finding at its end. A level that stays becomes the new normal only
// after hold_bins().
TEST(HostSeriesDetector, LongLevelShiftIsOneFindingUntilItIsANewRegime) {
  std::mt19937 rng(17);
  std::normal_distribution<double> n01;
  SeriesNoveltyOptions o;
  o.bin_seconds = 1;
  SeriesNoveltyDetector d(o);
  // Only the spans that touch the step: noise findings elsewhere are not this test's subject.
  auto on = [](const SeriesNoveltyDetector& det, size_t from) {
    std::vector<NoveltySpan> out;
    for (const auto& s : det.spans())
      if (s.last_bin >= from) out.push_back(s);
    return out;
  };
  for (size_t i = 0; i < 3000; ++i) d.add(i, 100 + n01(rng) + (i >= 1400 && i < 2400 ? 30 : 0));
  d.finish();
  const auto step = on(d, 1400);
  ASSERT_EQ(step.size(), 1u);
  EXPECT_EQ(step[0].first_bin, 1400u);
  EXPECT_EQ(step[0].last_bin, 2399u);
  EXPECT_FALSE(step[0].absorbed);
  // A change of regime: the new level is taken as normal after hold_bins() (2,000 bins for per-second data).
  EXPECT_EQ(d.hold_bins(), 2000u);
  SeriesNoveltyDetector regime(o);
  for (size_t i = 0; i < 4000; ++i) regime.add(i, 100 + n01(rng) + (i >= 1000 ? 30 : 0));
  regime.finish();
  const auto change = on(regime, 1000);
  ASSERT_FALSE(change.empty());
  EXPECT_EQ(change[0].first_bin, 1000u);
  EXPECT_TRUE(change[0].absorbed);
  EXPECT_EQ(change[0].last_bin, 1000u + 2000u);
  // Then the new level is normal: nothing more than noise findings after it (none as large as the step's).
  for (size_t k = 1; k < change.size(); ++k) EXPECT_LT(change[k].score, 1.0) << change[k].first_bin;
}

// The cool-down and the time to a new normal were counted in bins only: on daily data the cool-down after a noise
// finding lasted 200 days and hid a 20-day step 93 days later. Both are bounded in time now.
TEST(HostSeriesDetector, CoolDownAndNewNormalAreBoundedInTime) {
  auto sized = [](double bin_seconds) {
    SeriesNoveltyOptions o;
    o.bin_seconds = bin_seconds;
    SeriesNoveltyDetector d(o);
    return std::pair{d.cooldown_bins(), d.hold_bins()};
  };
  EXPECT_EQ(sized(0), (std::pair<size_t, size_t>{100, 2000}));      // bin width unknown: bins only
  EXPECT_EQ(sized(1), (std::pair<size_t, size_t>{100, 2000}));      // per second
  EXPECT_EQ(sized(300), (std::pair<size_t, size_t>{100, 2000}));    // NAB's 5 minutes
  EXPECT_EQ(sized(3600), (std::pair<size_t, size_t>{24, 168}));     // hourly: a day, a week
  EXPECT_EQ(sized(86400), (std::pair<size_t, size_t>{1, 100}));     // daily: the next day; 100 days
  // Daily values 10 +- 1, one noise spike on day 187, a +8 step on days 280-299: the step is found, whole.
  std::mt19937 rng(19);
  std::normal_distribution<double> n01;
  SeriesNoveltyOptions o;
  o.bin_seconds = 86400;
  SeriesNoveltyDetector d(o);
  for (size_t i = 0; i < 400; ++i) d.add(i, 10 + n01(rng) + (i == 187 ? 6 : 0) + (i >= 280 && i < 300 ? 8 : 0));
  d.finish();
  const NoveltySpan* step = nullptr;
  for (const auto& s : d.spans())
    if (s.first_bin <= 299 && s.last_bin >= 280) step = &s;
  ASSERT_NE(step, nullptr);
  EXPECT_EQ(step->first_bin, 280u);
  EXPECT_EQ(step->last_bin, 299u);
}

// A daily pattern whose peak runs a few minutes early or late (a daily job): the peak at its usual time of day is no
// finding, the same peak at an unusual time is one. The day view compares the level with the same time a day
// earlier shifted by up to season_tolerance_bins; with no tolerance a peak one bin later than the day before was a
// change (a finding at a usual daily peak, every few days).
TEST(HostSeriesDetector, DailyPeakAtItsUsualTimeIsNoFindingAtAnUnusualTimeIsOne) {
  constexpr size_t kDay = 288, kDays = 10, kPeakAt = 108, kPeakLen = 6, kOddDay = 8, kOddAt = 36;
  std::mt19937 rng(23);
  std::normal_distribution<double> n01;
  std::uniform_int_distribution<int> jitter(-1, 1);  // bins early or late, day by day
  std::vector<double> series(kDays * kDay);
  std::vector<size_t> peaks;
  for (size_t day = 0; day < kDays; ++day) {
    const size_t start = day * kDay + static_cast<size_t>(static_cast<int>(kPeakAt) + jitter(rng));
    peaks.push_back(start);
    for (size_t i = 0; i < kDay; ++i) series[day * kDay + i] = 10 + 0.5 * n01(rng);
    for (size_t i = start; i < start + kPeakLen; ++i) series[i] = 40 + 0.5 * n01(rng);
  }
  const size_t odd = kOddDay * kDay + kOddAt;  // the same peak at 03:00 on day 8
  for (size_t i = odd; i < odd + kPeakLen; ++i) series[i] = 40 + 0.5 * n01(rng);
  auto run = [&](size_t tolerance) {
    SeriesNoveltyOptions o;
    o.season_bins = kDay;
    o.bin_seconds = 300;
    o.season_tolerance_bins = tolerance;
    return spans_of(series, o);
  };
  auto touches = [](const std::vector<NoveltySpan>& spans, size_t from, size_t len) {
    for (const auto& s : spans)
      if (s.first_bin < from + len && s.last_bin + 1 > from) return true;
    return false;
  };
  const auto spans = run(SeriesNoveltyOptions{}.season_tolerance_bins);
  EXPECT_TRUE(touches(spans, odd, kPeakLen)) << "the peak at an unusual time of day";
  // From day 2 on (day 0 is the warm-up, day 1 the day view's first history): no finding at a usual peak.
  for (size_t day = 2; day < kDays; ++day) EXPECT_FALSE(touches(spans, peaks[day], kPeakLen)) << "day " << day;
  // Without the tolerance some usual peak is a finding: what the tolerance is for.
  const auto strict = run(0);
  size_t flagged = 0;
  for (size_t day = 2; day < kDays; ++day) flagged += touches(strict, peaks[day], kPeakLen);
  EXPECT_GT(flagged, 0u);
  EXPECT_TRUE(touches(strict, odd, kPeakLen));
}

// A daily dip that starts to wander more than the day view's tolerance (a job run anywhere in an hour): its change
// from a day earlier varies day by day. The first such change past the day view's range is a finding; its values then join
// that range (clipped to season_learn_clip range widths beyond it), so the dip is not a finding every day. Without
// this, a finding's bins were never learnt, so a recurring daily change stayed new for longer.
TEST(HostSeriesDetector, ARecurringDailyShapeIsLearntNotAFindingEveryDay) {
  constexpr size_t kDay = 288, kDays = 14, kDipAt = 140, kDipLen = 4;
  std::mt19937 rng(29);
  std::normal_distribution<double> n01;
  std::uniform_int_distribution<int> wander(-6, 6);
  std::vector<double> series(kDays * kDay);
  std::vector<size_t> dips;
  for (size_t day = 0; day < kDays; ++day) {
    for (size_t i = 0; i < kDay; ++i) series[day * kDay + i] = 10 + 0.2 * n01(rng);
    // At the same time for three days, then anywhere within half an hour of it: the first day it wanders is new
    // to the day view (its values stay within the value and level ranges).
    const int shift = day >= 3 ? wander(rng) : 0;
    const size_t start = day * kDay + static_cast<size_t>(static_cast<int>(kDipAt) + shift);
    dips.push_back(start);
    for (size_t i = start; i < start + kDipLen; ++i) series[i] = 2 + 0.2 * n01(rng);
  }
  auto days_with_a_finding = [&](double clip, size_t from_day) {
    SeriesNoveltyOptions o;
    o.season_bins = kDay;
    o.bin_seconds = 300;
    o.season_learn_clip = clip;
    const auto spans = spans_of(series, o);
    size_t days = 0;
    for (size_t day = from_day; day < kDays; ++day) {
      bool hit = false;
      for (const auto& s : spans) hit = hit || (s.first_bin < dips[day] + kDipLen + 6 && s.last_bin + 6 > dips[day]);
      days += hit;
    }
    return days;
  };
  const size_t learnt = days_with_a_finding(SeriesNoveltyOptions{}.season_learn_clip, 3);
  EXPECT_GE(learnt, 1u);  // the wandering is new once
  EXPECT_LE(learnt, 3u) << "of " << kDays - 3 << " days";
  EXPECT_EQ(days_with_a_finding(SeriesNoveltyOptions{}.season_learn_clip, 7), 0u);  // then it is the normal
  // Learning only shortens that here (by a day); its effect on NAB: docs/benchmarks/host-series-nab.md.
  EXPECT_GE(days_with_a_finding(-1, 3), learnt);
}

// A heavy-tailed series (NAB's Twitter counts): after a big spike, smaller spikes are records of the range (which
// never learns a finding) but not new. A finding's values are remembered for repeat_memory_bins: a repeat no larger
// within them is no finding (and, like any bin that is none, the range learns it), a larger one is, and the same
// repeat is one again once the memory has passed.
TEST(HostSeriesDetector, ARepeatOfARecentFindingIsNotNewALargerOneIsAndTheMemoryEnds) {
  auto found = [](size_t memory, const std::vector<std::pair<size_t, double>>& spikes) {
    std::mt19937 rng(31);
    std::normal_distribution<double> n01;
    std::vector<double> series(2400);
    for (double& x : series) x = 100 + n01(rng);
    for (const auto& [at, height] : spikes) series[at] += height;
    SeriesNoveltyOptions o;
    o.repeat_memory_bins = memory;
    SeriesNoveltyDetector d(o);
    EXPECT_EQ(d.repeat_memory_bins(), memory);
    for (size_t i = 0; i < series.size(); ++i) d.add(i, series[i]);
    d.finish();
    std::vector<size_t> hits;
    for (const auto& spike : spikes) {
      bool hit = false;
      for (const auto& s : d.spans()) hit = hit || (s.first_bin <= spike.first && s.last_bin >= spike.first);
      if (hit) hits.push_back(spike.first);
    }
    return hits;
  };
  const size_t memory = SeriesNoveltyOptions{}.repeat_memory_bins;
  // A repeat after the first one's cool-down (100 bins), smaller than it; then a larger one.
  const std::vector<std::pair<size_t, double>> soon{{500, 40}, {700, 30}, {900, 60}};
  EXPECT_EQ(found(memory, soon), (std::vector<size_t>{500, 900}));
  EXPECT_EQ(found(0, soon), (std::vector<size_t>{500, 700, 900}));  // without the memory the repeat is new
  // The same repeat 1,200 bins later: past the memory, new again.
  EXPECT_EQ(found(memory, {{500, 40}, {1700, 30}}), (std::vector<size_t>{500, 1700}));
  // Bounded in time like the other durations: 1,000 bins at 5 minutes, a week of hourly bins, 7 daily.
  auto sized = [](double bin_seconds) {
    SeriesNoveltyOptions o;
    o.bin_seconds = bin_seconds;
    return SeriesNoveltyDetector(o).repeat_memory_bins();
  };
  EXPECT_EQ(sized(300), 1000u);
  EXPECT_EQ(sized(3600), 168u);
  EXPECT_EQ(sized(86400), 7u);
}

// Confirmation by a second view: a finding is reported only once its excess passes
// confirm_alone_excess or the detector on the value minus its local median agrees. It filters what the range
// detector found and never reports earlier: every confirmed finding is one of the unconfirmed run's, reported at or
// after the bin it opened, and every finding that reached confirm_alone_excess is kept. On heavy-tailed noise (NAB's
// Twitter-like counts: records of the range by a hair, not departures from the local level) it drops some; a clear
// spike is found at its bin either way.
TEST(HostSeriesDetector, AFindingIsReportedOnceASecondViewConfirmsItAClearSpikeAtOnce) {
  std::mt19937 rng(41);
  std::uniform_real_distribution<double> u01(1e-9, 1.0);
  std::vector<double> series(6000);
  for (double& x : series) x = 10 / std::pow(u01(rng), 1 / 2.5);  // Pareto, tail index 2.5
  series[5000] += 1e5;
  auto run = [&](size_t median_bins) {
    SeriesNoveltyOptions o;
    o.confirm_median_bins = median_bins;
    return spans_of(series, o);
  };
  const auto all = run(0), confirmed = run(96);
  EXPECT_EQ(SeriesNoveltyOptions{}.confirm_median_bins, 192u);  // on by default (docs/benchmarks/host-series-nab.md)
  size_t strong = 0;
  for (const auto& s : all) {
    EXPECT_EQ(s.opened_bin, s.first_bin);  // no confirmation: reported where it opened
    if (s.score > SeriesNoveltyOptions{}.confirm_alone_excess) {
      ++strong;
      EXPECT_TRUE(std::any_of(confirmed.begin(), confirmed.end(),
                              [&](const NoveltySpan& c) { return c.opened_bin == s.first_bin; }))
          << s.first_bin;
    }
  }
  for (const auto& c : confirmed) {
    EXPECT_GE(c.first_bin, c.opened_bin);
    EXPECT_LE(c.first_bin, c.last_bin);
    EXPECT_TRUE(std::any_of(all.begin(), all.end(), [&](const NoveltySpan& s) {
      return s.first_bin == c.opened_bin && s.score == c.score;
    })) << c.opened_bin;
  }
  EXPECT_GT(strong, 0u);
  EXPECT_LT(confirmed.size(), all.size()) << "no hair-record dropped";
  for (const auto* spans : {&all, &confirmed})
    EXPECT_TRUE(std::any_of(spans->begin(), spans->end(),
                            [](const NoveltySpan& s) { return s.first_bin == 5000 && s.last_bin >= 5000; }));
}

// A level shift held open as one finding (the range learns from it after learn_after_bins, the finding goes on while
// the value stays outside the range it left) hid a second, larger step: on NAB's rds_cpu_utilization_e47b3b a
// 17 -> 28 step was reported 400 bins late. A departure from the learnt range ends the held finding and opens one at
// its bin.
TEST(HostSeriesDetector, ASecondLargerStepDuringAHeldLevelShiftIsANewFindingAtOnce) {
  std::mt19937 rng(43);
  std::normal_distribution<double> n01;
  std::vector<double> series(3000);
  for (size_t i = 0; i < series.size(); ++i)
    series[i] = 100 + n01(rng) + (i >= 1000 && i < 1400 ? 20 : 0) + (i >= 1400 && i < 2400 ? 50 : 0);
  auto run = [&](bool yield) {
    SeriesNoveltyOptions o;
    o.new_departure_ends_held_finding = yield;
    return spans_of(series, o);
  };
  EXPECT_TRUE(SeriesNoveltyOptions{}.new_departure_ends_held_finding);
  auto starting = [](const std::vector<NoveltySpan>& spans, size_t from, size_t to) {
    const NoveltySpan* found = nullptr;
    for (const auto& s : spans)
      if (s.first_bin >= from && s.first_bin <= to) found = found ? found : &s;
    return found;
  };
  const auto spans = run(true);
  const NoveltySpan* first = starting(spans, 1000, 1000);
  ASSERT_NE(first, nullptr);
  EXPECT_GE(first->last_bin, 1390u);  // the first step, for as long as it lasted
  EXPECT_LT(first->last_bin, 1400u);
  const NoveltySpan* second = starting(spans, 1400, 1400);
  ASSERT_NE(second, nullptr) << "the second step at once";
  EXPECT_TRUE(second->above);
  EXPECT_GE(second->last_bin, 2390u);  // and for as long as it lasts
  // Without the rule the first finding goes on through the second step: nothing starts there.
  const auto held = run(false);
  EXPECT_EQ(starting(held, 1400, 1500), nullptr);
  const NoveltySpan* one = starting(held, 1000, 1000);
  ASSERT_NE(one, nullptr);
  EXPECT_GE(one->last_bin, 1500u);
}

// A level shift held until the range learnt from it leaves its level remembered but not its spreads: its first
// bins' 6-bin spreads straddle the step, and remembered for repeat_memory_bins they hid a noisier stretch 400 bins
// later (NAB's rds_cpu_utilization_cc0c53, its second window). Remembered, nothing starts in that stretch.
TEST(HostSeriesDetector, ANoisierStretchAfterALearntLevelShiftIsFound) {
  constexpr size_t kStep = 3000, kNoisy = 3400, kQuiet = 3600;
  std::mt19937 rng(53);
  std::normal_distribution<double> n01;
  std::vector<double> series(4000);
  for (size_t i = 0; i < series.size(); ++i)
    series[i] = (i < kStep ? 6 : 15) + (i >= kNoisy && i < kQuiet ? 2.0 : 0.5) * n01(rng);
  auto starts_in = [](const std::vector<NoveltySpan>& spans, size_t from, size_t to) {
    return std::any_of(spans.begin(), spans.end(), [&](auto& s) { return s.first_bin >= from && s.first_bin <= to; });
  };
  EXPECT_FALSE(SeriesNoveltyOptions{}.remember_learnt_spreads);
  const auto spans = spans_of(series, SeriesNoveltyOptions{});
  EXPECT_TRUE(starts_in(spans, kStep, kStep + 3)) << "the shift itself";
  EXPECT_TRUE(starts_in(spans, kNoisy, kNoisy + 50)) << "the noisier stretch, near its start";
  SeriesNoveltyOptions remembering;
  remembering.remember_learnt_spreads = true;
  EXPECT_FALSE(starts_in(spans_of(series, remembering), kNoisy, kQuiet));
}

// A level shift that returns (100 -> 130 -> 100, noise 1) is one finding whatever the noise does: a marginal noise
// departure while it is held used to end it (its return was then a finding of its own: one of three seeds in the
// Python port), and the spread windows straddling its return opened one once its spreads were no longer remembered.
// Now such a departure's unreported finding gives the held one back, the return ends it, and the spread views wait
// a robust-spread window after the return.
TEST(HostSeriesDetector, ALevelShiftThatReturnsIsOneFindingWhateverTheNoise) {
  auto findings_on_the_shift = [](unsigned seed, bool lasts_to_return) {
    std::mt19937 rng(seed);
    std::normal_distribution<double> n01;
    std::vector<double> series(3000);
    for (size_t i = 0; i < series.size(); ++i) series[i] = 100 + n01(rng) + (i >= 1400 && i < 2400 ? 30 : 0);
    SeriesNoveltyOptions o;
    o.bin_seconds = 1;
    o.held_shift_lasts_to_its_return = lasts_to_return;
    std::vector<NoveltySpan> on;
    for (const auto& s : spans_of(series, o))
      if (s.last_bin >= 1400 && s.first_bin < 2450) on.push_back(s);
    return on;
  };
  EXPECT_TRUE(SeriesNoveltyOptions{}.held_shift_lasts_to_its_return);
  size_t split_before = 0;
  for (unsigned seed = 1; seed <= 8; ++seed) {
    const auto on = findings_on_the_shift(seed, true);
    ASSERT_EQ(on.size(), 1u) << "seed " << seed;
    EXPECT_EQ(on[0].first_bin, 1400u) << "seed " << seed;
    EXPECT_GE(on[0].last_bin, 2390u) << "seed " << seed;
    EXPECT_LT(on[0].last_bin, 2410u) << "seed " << seed;
    split_before += findings_on_the_shift(seed, false).size() > 1;
  }
  EXPECT_GT(split_before, 0u) << "no seed shows what the rule is for";
}

// A shift that began with a spike (14 -> a 76 spike -> 17, NAB's rds_cpu_utilization_e47b3b) is held and learnt; a
// day later the day view compared the level with the spike's and reported a drop. The shift's first bins are
// clipped in the day view's history to the range of its bins since.
TEST(HostSeriesDetector, AShiftThatBeganWithASpikeIsNoDayViewFindingADayLater) {
  constexpr size_t kDay = 288, kShift = 1000;
  std::mt19937 rng(59);
  std::normal_distribution<double> n01;
  std::vector<double> series(2000);
  for (size_t i = 0; i < series.size(); ++i)
    series[i] = (i < kShift ? 14 : 17) + 0.3 * n01(rng) + (i == kShift + 1 ? 60 : 0);
  auto day_findings_a_day_later = [&](bool clipped) {
    SeriesNoveltyOptions o;
    o.season_bins = kDay;
    o.bin_seconds = 300;
    o.held_start_clipped_in_day_history = clipped;
    size_t n = 0;
    for (const auto& s : spans_of(series, o))
      n += s.first_bin >= kShift + kDay - 10 && s.first_bin <= kShift + kDay + 20 && s.view == NoveltyView::season;
    return n;
  };
  EXPECT_TRUE(SeriesNoveltyOptions{}.held_start_clipped_in_day_history);
  EXPECT_EQ(day_findings_a_day_later(true), 0u);
  EXPECT_EQ(day_findings_a_day_later(false), 1u);
}

// A sustained change of texture that stays inside the value range (a flat metric that starts oscillating between
// values its isolated spikes already reached) is hidden from the 6-bin spread by those spikes; the median absolute
// deviation of the last 36 bins ignores them and is found near the oscillation's start. The spikes alone are no
// robust-spread finding.
TEST(HostSeriesDetector, AnOscillationWithinTheRangeOfIsolatedSpikesIsFoundByTheRobustSpread) {
  constexpr size_t kStart = 2000, kEnd = 2600;
  auto series = [](bool oscillate) {
    std::mt19937 rng(47);
    std::normal_distribution<double> n01;
    std::vector<double> out(3000);
    for (size_t i = 0; i < out.size(); ++i) {
      out[i] = 10 + 0.2 * n01(rng);
      if (i >= 500 && i % 50 == 20) out[i] += (i / 50) % 2 == 0 ? 12 : -12;  // isolated spikes, up and down
      if (oscillate && i >= kStart && i < kEnd) out[i] += i % 2 == 0 ? 3 : -3;
    }
    return out;
  };
  auto run = [](const std::vector<double>& values, size_t robust_bins) {
    SeriesNoveltyOptions o;
    o.robust_spread_bins = robust_bins;
    return spans_of(values, o);
  };
  const size_t robust_bins = SeriesNoveltyOptions{}.robust_spread_bins;
  EXPECT_EQ(robust_bins, 36u);
  const auto spans = run(series(true), robust_bins);
  const NoveltySpan* found = nullptr;
  for (const auto& s : spans)
    if (s.first_bin >= kStart && s.first_bin < kEnd) found = found ? found : &s;
  ASSERT_NE(found, nullptr);
  EXPECT_EQ(found->view, NoveltyView::robust_spread);
  EXPECT_LE(found->first_bin, kStart + robust_bins) << "near its start";
  EXPECT_TRUE(found->above);
  EXPECT_EQ(novelty_view_name(found->view), "robust_spread");
  EXPECT_NE(novelty_view_description(found->view, SeriesNoveltyOptions{}).find("median absolute deviation of the last 36"),
            std::string::npos);
  // Without the view the oscillation is no finding: the other views see nothing new in it (only a spike that rides
  // on it is one, the 6-bin spread then).
  for (const auto& s : run(series(true), 0)) {
    if (s.last_bin >= kStart && s.first_bin < kEnd) {
      EXPECT_EQ(s.first_bin % 50, 20u) << s.first_bin;
    }
  }
  // The spikes alone are findings (the first ones) but no robust-spread finding.
  const auto spikes = run(series(false), robust_bins);
  EXPECT_FALSE(spikes.empty());
  for (const auto& s : spikes) EXPECT_NE(s.view, NoveltyView::robust_spread) << s.first_bin << " " << s.score;
}

namespace {
// 100 ms samples of a small host for `seconds`, with three planted episodes: dirty memory 45x for 30 s from
// 150 s, TCP retransmissions (a counter that sits near zero) 125x for 5 s from 220 s, CPU user time of the
// host from 5 % to 95 % of a core for 20 s from 260 s.
void write_planted_host(const std::string& path, double seconds) {
  RecordingWriter w(path);
  w.set_meta("host", "planted");
  struct S {
    SeriesInfo info;
    double base, noise, total = 0;
    SeriesId id = 0;
  };
  auto mk = [](std::string name, std::string dev, Subsystem sub, SeriesKind kind, SeriesCategory cat, std::string unit,
               double base, double noise) {
    SeriesInfo i = series_info(std::move(name), std::move(dev), sub, std::move(unit), kind, cat, "test");
    i.host = "planted";
    return S{i, base, noise};
  };
  std::vector<S> s = {
      mk("mem.Dirty", "", Subsystem::memory, SeriesKind::gauge, SeriesCategory::dynamic, "bytes", 5e6, 4e5),
      mk("mem.used", "", Subsystem::memory, SeriesKind::gauge, SeriesCategory::dynamic, "bytes", 2e9, 2e6),
      mk("net.tcp.retrans_segs", "", Subsystem::network, SeriesKind::counter, SeriesCategory::event_counter, "count", 2,
         1.5),
      mk("net.rx.bytes", "eth0", Subsystem::network, SeriesKind::counter, SeriesCategory::dynamic, "bytes", 2e5, 3e4),
      mk("cpu.time.user", "", Subsystem::cpu, SeriesKind::counter, SeriesCategory::dynamic, "jiffies", 5, 2),
      mk("disk.write_bytes", "vda", Subsystem::storage, SeriesKind::counter, SeriesCategory::dynamic, "bytes", 4e5,
         8e4),
  };
  for (auto& x : s) x.id = w.add_series(x.info);
  std::mt19937 rng(11);
  std::normal_distribution<double> n01;
  const int64_t t0 = monotonic_ns() + 10 * kMs;
  std::vector<Sample> batch;
  for (int i = 0; i <= static_cast<int>(seconds * 10); ++i) {
    const double t_s = i * 0.1;
    for (auto& x : s) {
      double v = x.base + x.noise * n01(rng);
      if (x.info.name == "mem.Dirty" && t_s >= 150 && t_s < 180) v = 45 * x.base + x.noise * n01(rng);
      if (x.info.name == "net.tcp.retrans_segs" && t_s >= 220 && t_s < 225) v = 125 * x.base;
      if (x.info.name == "cpu.time.user" && t_s >= 260 && t_s < 280) v = 95 + x.noise * n01(rng);
      v = std::max(0.0, v);
      if (x.info.kind == SeriesKind::counter) {
        x.total += v * 0.1;  // per 100 ms
        batch.push_back({x.id, t0 + i * 100 * kMs, std::floor(x.total)});
      } else {
        batch.push_back({x.id, t0 + i * 100 * kMs, v});
      }
    }
  }
  w.append_samples(batch);
  w.close();
}

const nlohmann::json* finding_on(const nlohmann::json& findings, const std::string& subject, double from_s,
                                 double to_s) {
  for (const auto& f : findings)
    if (f["subject"] == subject && f["t_end_s"].get<double>() > from_s && f["t_start_s"].get<double>() < to_s)
      return &f;
  return nullptr;
}
}  // namespace

TEST(HostSeriesCli, PlantedEpisodesAreFoundForTheirWholeDuration) {
  TempDir dir;
  const std::string rec = dir.file("host.sdb");
  write_planted_host(rec, 330);
  auto j = run_json("analyze --detector series --json --no-store " + rec);
  const auto& series = j["series"];
  ASSERT_TRUE(series.contains("findings")) << j.dump();
  const auto& fs = series["findings"];
  // Each episode one finding that covers it, start to end (1 s bins: within a bin or two of each edge).
  struct Planted {
    std::string subject;
    double from, to;
  };
  for (const Planted& p : {Planted{"mem.Dirty", 150, 180}, Planted{"net.tcp.retrans_segs", 220, 225},
                           Planted{"cpu.time.user", 260, 280}}) {
    size_t overlapping = 0;
    for (const auto& f : fs)
      overlapping +=
          f["subject"] == p.subject && f["t_end_s"].get<double>() > p.from && f["t_start_s"].get<double>() < p.to;
    EXPECT_EQ(overlapping, 1u) << p.subject << "\n" << fs.dump(1);
    const nlohmann::json* f = finding_on(fs, p.subject, p.from, p.to);
    ASSERT_NE(f, nullptr) << p.subject;
    EXPECT_NEAR((*f)["t_start_s"].get<double>(), p.from, 1.5) << f->dump();
    EXPECT_NEAR((*f)["t_end_s"].get<double>(), p.to, 2.5) << f->dump();
    EXPECT_EQ((*f)["direction"], "above");
    EXPECT_TRUE((*f)["start_utc"].get<std::string>().ends_with("Z"));
    EXPECT_TRUE((*f)["end_utc"].get<std::string>().ends_with("Z"));
  }
  // 1 s bins were chosen from the 100 ms sampling interval.
  EXPECT_EQ(series["recordings"][0]["bin_ns"], kS);
  EXPECT_EQ(series["recordings"][0]["sampling_interval_ns"], 100 * kMs);
}

TEST(HostSeriesCli, ImportedFiveMinuteSeriesGetSizedWindowsAndTheSeriesDetectorByDefault) {
  TempDir dir;
  const std::string csv = dir.file("nab.csv"), rec = dir.file("nab.sdb");
  write_file(csv, nab_like_csv(3000, 300, 2000, 2040, 60));
  std::string out;
  ASSERT_EQ(run_command(kBin + " import --format csv " + csv + " -o " + rec, &out), 0) << out;
  // The default on an imported table: the series detector, 5-minute bins, the step found as it began.
  auto j = run_json("analyze --json --no-store " + rec);
  ASSERT_TRUE(j.contains("series")) << j.dump();
  EXPECT_EQ(j["series"]["recordings"][0]["bin_ns"], 300 * kS);
  const auto& fs = j["series"]["findings"];
  const nlohmann::json* f = finding_on(fs, "value", 2000 * 300.0, 2040 * 300.0);
  ASSERT_NE(f, nullptr) << fs.dump(1);
  EXPECT_EQ((*f)["start_utc"], "2014-02-20T22:40:00.000Z");  // row 2000
  EXPECT_LE(fs.size(), 4u) << fs.dump(1);
  // Reveal sizes its windows too: one window per row, twelve rows long, no warning; a 3 s window is warned about.
  auto r = run_json("analyze --detector reveal --json --no-store " + rec);
  EXPECT_EQ(r["reveal"]["window_ns"], 3600 * kS);
  EXPECT_EQ(r["reveal"]["stride_ns"], 300 * kS);
  EXPECT_EQ(r["reveal"]["window_warning"], "");
  for (const auto& rf : r["reveal"]["findings"]) EXPECT_TRUE(rf.contains("start_utc") && rf.contains("end_utc"));
  write_file(dir.file("short.csv"), nab_like_csv(60, 300));
  ASSERT_EQ(run_command(kBin + " import --format csv " + dir.file("short.csv") + " -o " + dir.file("short.sdb"), &out),
            0);
  auto small = run_json("analyze --detector reveal --json --no-store --window 3s --stride 1s " + dir.file("short.sdb"));
  EXPECT_NE(small["reveal"]["window_warning"].get<std::string>().find("at most one sample"), std::string::npos)
      << small.dump();
  // Hours are a duration; a bad one names the units.
  auto h = run_json("analyze --detector reveal --json --no-store --window 2h --stride 10m " + rec);
  EXPECT_EQ(h["reveal"]["window_ns"], 7200 * kS);
  ASSERT_NE(run_command(kBin + " analyze --detector reveal --no-store --window 1w " + rec, &out), 0);
  EXPECT_NE(out.find("units: ns, us, ms, s"), std::string::npos) << out;
  EXPECT_NE(out.find("h, d"), std::string::npos) << out;
}

namespace {
// A table of `rows` values 10 +- 1, one every `step_s` seconds, +8 on rows [from, to) and +6 on row `spike`.
std::string step_csv(size_t rows, int64_t step_s, size_t from, size_t to, size_t spike) {
  std::mt19937 rng(23);
  std::normal_distribution<double> n01;
  std::string body = "timestamp,value\n";
  for (size_t i = 0; i < rows; ++i) {
    const std::time_t secs = 1262304000 + static_cast<int64_t>(i) * step_s;  // 2010-01-01
    std::tm tm{};
    gmtime_r(&secs, &tm);
    char ts[32];
    std::strftime(ts, sizeof ts, "%Y-%m-%d %H:%M:%S", &tm);
    const double v = 10 + n01(rng) + (i >= from && i < to ? 8 : 0) + (i == spike ? 6 : 0);
    body += std::string(ts) + "," + std::to_string(v) + "\n";
  }
  return body;
}
}  // namespace

// The same step (+8 on noise of 1) in a daily, an hourly and a per-second table: one finding from its first row to
// its last, whatever the sampling interval (before: missed on daily data, inside a 200-day cool-down after a noise
// finding; cut after 101 bins on hourly data; its start and a second finding at its end on per-second data).
TEST(HostSeriesCli, AStepIsOneFindingForItsWholeDurationAtAnySamplingInterval) {
  TempDir dir;
  struct Table {
    std::string name;
    size_t rows;
    int64_t step_s;
    size_t from, to, spike;
  };
  for (const Table& t : {Table{"daily", 400, 86400, 280, 300, 187}, Table{"hourly", 3000, 3600, 2100, 2250, 1900},
                         Table{"second", 20000, 1, 14000, 15000, 12000}}) {
    const std::string csv = dir.file(t.name + ".csv"), rec = dir.file(t.name + ".sdb");
    write_file(csv, step_csv(t.rows, t.step_s, t.from, t.to, t.spike));
    std::string out;
    ASSERT_EQ(run_command(kBin + " import --format csv " + csv + " -o " + rec, &out), 0) << out;
    auto j = run_json("analyze --json --no-store " + rec);
    const auto& fs = j["series"]["findings"];
    const double from_s = static_cast<double>(t.from * t.step_s), to_s = static_cast<double>(t.to * t.step_s);
    size_t overlapping = 0;
    for (const auto& f : fs) {
      EXPECT_LE(f["score"].get<double>(), 1e3) << t.name << " " << f.dump();
      overlapping += f["t_end_s"].get<double>() > from_s && f["t_start_s"].get<double>() < to_s;
    }
    EXPECT_EQ(overlapping, 1u) << t.name << "\n" << fs.dump(1);
    const nlohmann::json* f = finding_on(fs, "value", from_s, to_s);
    ASSERT_NE(f, nullptr) << t.name << "\n" << fs.dump(1);
    const double bin = static_cast<double>(t.step_s);
    EXPECT_NEAR((*f)["t_start_s"].get<double>(), from_s, 0.5 * bin) << t.name << " " << f->dump();
    EXPECT_NEAR((*f)["t_end_s"].get<double>(), to_s, 1.5 * bin) << t.name << " " << f->dump();
    EXPECT_FALSE((*f)["absorbed"].get<bool>()) << t.name;
  }
}

TEST(HostSeriesImport, OnDisorderSortDropOrErrorAndNoFileLeftBehind) {
  TempDir dir;
  const std::string csv = dir.file("d.csv"), rec = dir.file("d.sdb");
  // Line 4 goes back in time, line 5 repeats line 4's time.
  write_file(csv, "t,a\n10,1\n20,2\n15,3\n15,4\n30,5\n");
  std::string out;
  // error: refused, the line and the row before it named, and no recording left behind.
  ASSERT_NE(run_command(kBin + " import --format csv " + csv + " -o " + rec + " --on-disorder error", &out), 0);
  EXPECT_NE(out.find(":4: time goes backwards ('15' after '20' on line 3)"), std::string::npos) << out;
  EXPECT_FALSE(std::filesystem::exists(rec)) << "a failed import left " << rec;
  // A bad number on the last line: nothing written either (the file is checked before the recording is made).
  write_file(dir.file("bad.csv"), "t,a\n1,1\n2,2\n3,x\n");
  ASSERT_NE(run_command(kBin + " import --format csv " + dir.file("bad.csv") + " -o " + dir.file("bad.sdb"), &out), 0);
  EXPECT_NE(out.find(":4: column 'a': 'x' is not a number"), std::string::npos) << out;
  EXPECT_FALSE(std::filesystem::exists(dir.file("bad.sdb")));
  // sort (the default): every row, in time order.
  ASSERT_EQ(run_command(kBin + " import --format csv " + csv + " -o " + rec, &out), 0) << out;
  EXPECT_NE(out.find("2 rows out of time order sorted into place"), std::string::npos) << out;
  {
    RecordingReader r(rec);
    auto samples = r.load_samples();
    ASSERT_EQ(samples.size(), 1u);
    const auto& [t, v] = samples.begin()->second;
    EXPECT_EQ(v, (std::vector<double>{1, 3, 4, 2, 5}));
    EXPECT_TRUE(std::is_sorted(t.begin(), t.end()));
  }
  // drop: rows not later than every row before them go.
  ASSERT_EQ(run_command(kBin + " import --format csv " + csv + " -o " + rec + " --on-disorder drop", &out), 0) << out;
  EXPECT_NE(out.find("2 rows not later than the rows before them dropped"), std::string::npos) << out;
  {
    RecordingReader r(rec);
    const auto samples = r.load_samples();
    EXPECT_EQ(samples.begin()->second.second, (std::vector<double>{1, 2, 5}));
  }
  // A repeated time alone under error is refused too.
  write_file(csv, "t,a\n10,1\n10,2\n");
  ASSERT_NE(
      run_command(kBin + " import --format csv " + csv + " -o " + dir.file("r.sdb") + " --on-disorder error", &out), 0);
  EXPECT_NE(out.find(":3: time repeats"), std::string::npos) << out;
  ASSERT_NE(run_command(kBin + " import --format csv " + csv + " -o " + rec + " --on-disorder shuffle", &out), 0);
}

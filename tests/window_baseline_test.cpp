// Departures from the job's own recent baseline (analyze/window_feature_transforms.h) and `stackscope features`
// applied to a features CSV: a lasting level shift is absorbed, a short burst stands out, and the edges (start of
// the recording, NaN windows, a still baseline) give defined, finite values.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "analyze/features/window_feature_transforms.h"
#include "store/numeric_csv.h"
#include "test_util.h"

using namespace stackscope;
using namespace stackscope::analyze;

namespace {

// One column over `n` half-second windows, the values from `value(w)`.
template <typename F>
WindowFeatureTable one_column(size_t n, F value) {
  WindowFeatureTable t;
  t.grid = {0, 500'000'000, n};
  t.columns = {"gpu0.gpu.mem.used.mean"};
  t.values.resize(static_cast<Eigen::Index>(n), 1);
  for (size_t w = 0; w < n; ++w) t.values(static_cast<Eigen::Index>(w), 0) = value(w);
  t.filled = {0};
  return t;
}

// 0 for 100 windows, then a lasting step to 5; a burst of +3 in windows 150..157 on top of it.
double step_and_burst(size_t w) { return (w >= 100 ? 5.0 : 0.0) + (w >= 150 && w < 158 ? 3.0 : 0.0); }

double at(const WindowFeatureTable& t, size_t w) { return t.values(static_cast<Eigen::Index>(w), 0); }

}  // namespace

TEST(WindowBaseline, BothSidesAbsorbAStepAtOnceAndKeepAShortBurst) {
  const auto out = departure_from_baseline(one_column(200, step_and_burst), {.windows = 20});
  for (size_t w = 0; w < 200; ++w) {
    if (w >= 150 && w < 158)
      EXPECT_DOUBLE_EQ(at(out, w), 3.0) << "burst window " << w;
    else
      EXPECT_DOUBLE_EQ(at(out, w), 0.0) << "window " << w << " (the step at 100 agrees with one side)";
  }
}

TEST(WindowBaseline, PastSideAbsorbsAStepOnceItFillsHalfTheBaseline) {
  const auto out =
      departure_from_baseline(one_column(200, step_and_burst), {.windows = 20, .side = BaselineSide::past});
  for (size_t w = 0; w < 100; ++w) EXPECT_DOUBLE_EQ(at(out, w), 0.0) << w;
  // Window w sees w - 100 windows of the new level among its 20 neighbours: the median moves at half.
  for (size_t w = 100; w < 110; ++w) EXPECT_DOUBLE_EQ(at(out, w), 5.0) << w;
  EXPECT_DOUBLE_EQ(at(out, 110), 2.5);
  for (size_t w = 111; w < 150; ++w) EXPECT_DOUBLE_EQ(at(out, w), 0.0) << w;
  for (size_t w = 150; w < 158; ++w) EXPECT_DOUBLE_EQ(at(out, w), 3.0) << "burst window " << w;
  // The burst is not absorbed: 8 of 20 neighbours is less than half.
  for (size_t w = 158; w < 200; ++w) EXPECT_DOUBLE_EQ(at(out, w), 0.0) << w;
}

TEST(WindowBaseline, MadScalingGivesRobustZAndAFlooredScaleOnAStillBaseline) {
  // Alternating 10 +- 1: MAD 1, so a window at 16 is (16 - 10) / 1.4826 robust deviations out.
  auto noisy = [](size_t w) { return w == 60 ? 16.0 : (w % 2 ? 11.0 : 9.0); };
  const auto out = departure_from_baseline(one_column(121, noisy), {.windows = 20, .scale_by_mad = true});
  EXPECT_NEAR(at(out, 60), 6.0 / 1.4826, 1e-9);
  // A still baseline (MAD 0): the floor, 1 % of the level, sets the scale; finite, not infinite.
  const auto still = departure_from_baseline(one_column(41, [](size_t w) { return w == 20 ? 101.0 : 100.0; }),
                                             {.windows = 10, .scale_by_mad = true});
  EXPECT_NEAR(at(still, 20), 1.0, 1e-12);
  EXPECT_DOUBLE_EQ(at(still, 19), 0.0);
  // Floor switched off: the departure in the column's units rather than a division by 0.
  const auto unfloored = departure_from_baseline(
      one_column(41, [](size_t w) { return w == 20 ? 101.0 : 100.0; }),
      {.windows = 10, .scale_by_mad = true, .floor = {.relative = 0, .absolute = 0}});
  EXPECT_DOUBLE_EQ(at(unfloored, 20), 1.0);
}

TEST(WindowBaseline, EdgesAndMissingWindowsGiveDefinedFiniteValues) {
  // The first window has no past: side both takes its future (here 10 above it), side past gives 0.
  auto ramp_then_flat = [](size_t w) { return w == 0 ? 0.0 : 10.0; };
  EXPECT_DOUBLE_EQ(at(departure_from_baseline(one_column(30, ramp_then_flat), {.windows = 5}), 0), -10.0);
  EXPECT_DOUBLE_EQ(
      at(departure_from_baseline(one_column(30, ramp_then_flat), {.windows = 5, .side = BaselineSide::past}), 0), 0.0);
  // A table of one window: no neighbour at all.
  EXPECT_DOUBLE_EQ(at(departure_from_baseline(one_column(1, [](size_t) { return 7.0; }), {.windows = 5}), 0), 0.0);
  // NaN and infinite windows score 0 and stay out of their neighbours' baselines; everything is finite.
  auto gappy = [](size_t w) {
    if (w % 3 == 0) return static_cast<double>(NAN);
    if (w == 10) return static_cast<double>(INFINITY);
    return w == 20 ? 4.0 : 1.0;
  };
  for (bool mad : {false, true})
    for (auto side : {BaselineSide::both, BaselineSide::past}) {
      const auto out = departure_from_baseline(one_column(40, gappy), {.windows = 6, .side = side, .scale_by_mad = mad});
      ASSERT_TRUE(out.values.allFinite()) << "mad " << mad;
      EXPECT_DOUBLE_EQ(at(out, 3), 0.0);
      EXPECT_DOUBLE_EQ(at(out, 10), 0.0);
      EXPECT_DOUBLE_EQ(at(out, 11), 0.0);  // its neighbours are 1 (the NaN and the infinity left out)
      EXPECT_GT(at(out, 20), 0.0);
    }
  // A column that is NaN throughout.
  const auto empty = departure_from_baseline(one_column(10, [](size_t) { return static_cast<double>(NAN); }), {});
  EXPECT_TRUE(empty.values.isZero());
  EXPECT_THROW(departure_from_baseline(one_column(10, step_and_burst), {.windows = 0}), std::invalid_argument);
}

TEST(WindowBaseline, TableFromAFeaturesCsvChecksItsWindows) {
  const std::vector<std::string> cols{"t0_ns", "t1_ns", "a"};
  const auto t = window_table_from_columns(cols, std::vector<double>{10, 20, 1, 20, 30, 2}, "x.csv");
  EXPECT_EQ(t.grid.first_ns, 10);
  EXPECT_EQ(t.grid.width_ns, 10);
  EXPECT_EQ(t.grid.count, 2u);
  EXPECT_EQ(t.columns, std::vector<std::string>{"a"});
  EXPECT_DOUBLE_EQ(t.values(1, 0), 2.0);
  EXPECT_THROW(window_table_from_columns({"a", "b", "c"}, std::vector<double>{1, 2, 3}, "x.csv"), std::invalid_argument);
  EXPECT_THROW(window_table_from_columns(cols, std::vector<double>{10, 20, 1, 25, 35, 2}, "x.csv"),
               std::invalid_argument);  // a gap between the windows
  EXPECT_THROW(window_table_from_columns(cols, std::vector<double>{}, "x.csv"), std::invalid_argument);
  // Bounds no int64_t holds, or a grid that would run past one, are refused rather than converted.
  EXPECT_THROW(window_table_from_columns(cols, std::vector<double>{0, 1e30, 1}, "x.csv"), std::invalid_argument);
  EXPECT_THROW(window_table_from_columns(cols, std::vector<double>{0, 3e18, 1, 3e18, 6e18, 2}, "x.csv"),
               std::invalid_argument);
}

TEST(WindowBaseline, FeaturesCliTransformsAnEarlierTable) {
  TempDir dir;
  std::string csv = "t0_ns,t1_ns,x.log10_count,gpu0.gpu.mem.used.mean\n";
  for (int w = 0; w < 80; ++w)
    csv += std::to_string(w * 500'000'000LL) + "," + std::to_string((w + 1) * 500'000'000LL) + "," +
           (w >= 40 && w < 44 ? "2" : "1") + "," + (w >= 30 ? "7e9" : "6e9") + "\n";
  write_file(dir.file("raw.csv"), csv);
  std::string out;
  ASSERT_EQ(run_command(std::string(STACKSCOPE_BIN) + " features " + dir.file("raw.csv") + " --baseline 10 -o " +
                            dir.file("bl.csv"),
                        &out),
            0)
      << out;
  EXPECT_NE(out.find("departures from a 20-window baseline"), std::string::npos) << out;
  const NumericTable t = read_numeric_csv(dir.file("bl.csv"));
  ASSERT_EQ(t.columns, (std::vector<std::string>{"t0_ns", "t1_ns", "x.log10_count", "gpu0.gpu.mem.used.mean"}));
  ASSERT_EQ(t.rows(), 80u);
  for (size_t r = 0; r < t.rows(); ++r) {
    EXPECT_DOUBLE_EQ(t.values[r * 4], static_cast<double>(r) * 5e8);
    EXPECT_DOUBLE_EQ(t.values[r * 4 + 2], r >= 40 && r < 44 ? 1.0 : 0.0) << "burst column, window " << r;
    EXPECT_DOUBLE_EQ(t.values[r * 4 + 3], 0.0) << "memory step, window " << r;
  }
  // A recording still needs its layer; a CSV that is not a features table is refused by name.
  write_file(dir.file("bad.csv"), "t0_ns,t1_ns,a\n0,5,1\n7,12,1\n");
  EXPECT_NE(run_command(std::string(STACKSCOPE_BIN) + " features " + dir.file("bad.csv") + " --baseline 1 -o " +
                            dir.file("o.csv"),
                        &out),
            0);
  EXPECT_NE(out.find("back to back"), std::string::npos) << out;
}

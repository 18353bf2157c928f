// The tracer's cost budget attaches a hot probe family for only part of each second (trace.<family>.watching):
// the job's progress must be read per watched time, or every duty cycle looks like the job slowing down.
#include <gtest/gtest.h>

#include <span>
#include <vector>

#include "analyze/incidents/job_progress.h"

using namespace stackscope;
using namespace stackscope::analyze;
using namespace stackscope::analyze::incidents;

namespace {

// 2,000 launches a second for 60 s, recorded only while the family is watched: `share` of each second, at a
// phase that drifts so windows and watched slices do not line up; a stretch of `blind` seconds not watched at all.
JobProgress launches_under_duty_cycle(double share, int blind_from, int blind_to, bool one_sample_per_run = false) {
  const WindowGrid grid{0, 1'000'000'000, 60};
  JobProgressCounter counter(grid);
  std::vector<int64_t> t;
  std::vector<double> v;
  for (int s = 0; s < 60; ++s) {
    if (s >= blind_from && s < blind_to) continue;
    const int64_t on = s * 1'000'000'000LL + (s * 37 % 50) * 10'000'000LL;
    const int64_t off = on + static_cast<int64_t>(share * 1e9);
    t.push_back(on);
    v.push_back(1.0);
    t.push_back(off);
    v.push_back(0.0);
    for (int64_t at = on; at < off; at += 500'000) {  // one launch every 0.5 ms while watched
      CallRecord c;
      c.layer = Layer::cuda;
      c.pid = 7;
      c.instant = true;
      c.timed = false;
      c.start_ns = at;
      c.name = "cudaLaunchKernel";
      counter.add(c);
    }
  }
  if (one_sample_per_run) {  // as a recording's blocks or a live stream's batches split the series
    for (size_t i = 0; i < t.size(); ++i)
      counter.add_watching("trace.cuda.watching", std::span(t).subspan(i, 1), std::span(v).subspan(i, 1));
  } else {
    counter.add_watching("trace.cuda.watching", t, v);
  }
  return counter.finish();
}

}  // namespace

TEST(IncidentDutyCycle, LaunchRateIsPerWatchedTime) {
  const JobProgress p = launches_under_duty_cycle(0.1, 60, 60);
  ASSERT_EQ(p.signal.metric, "launches");
  for (size_t w = 0; w < 59; ++w) EXPECT_NEAR(p.signal.per_window[w], 2000, 2000 * 0.05) << "window " << w;
}

TEST(IncidentDutyCycle, SeriesSplitIntoRunsGivesTheSameRate) {
  const JobProgress p = launches_under_duty_cycle(0.1, 60, 60, true);
  ASSERT_EQ(p.signal.metric, "launches");
  for (size_t w = 0; w < 59; ++w) EXPECT_NEAR(p.signal.per_window[w], 2000, 2000 * 0.05) << "window " << w;
}

TEST(IncidentDutyCycle, UnwatchedSecondsTakeTheLastWatchedRate) {
  const JobProgress p = launches_under_duty_cycle(0.2, 20, 25);
  ASSERT_EQ(p.signal.metric, "launches");
  for (size_t w = 19; w < 27; ++w) EXPECT_NEAR(p.signal.per_window[w], 2000, 2000 * 0.05) << "window " << w;
}

TEST(IncidentDutyCycle, OtherSeriesAndAlwaysWatchedFamiliesAreUnchanged) {
  const WindowGrid grid{0, 1'000'000'000, 10};
  JobProgressCounter counter(grid);
  const std::vector<int64_t> t{0};
  const std::vector<double> v{1.0};
  counter.add_watching("cpu.util", t, v);
  for (int k = 0; k < 1000; ++k) {
    CallRecord c;
    c.layer = Layer::cuda;
    c.pid = 7;
    c.instant = true;
    c.start_ns = k * 10'000'000LL;
    c.name = "cudaLaunchKernel";
    counter.add(c);
  }
  const JobProgress p = counter.finish();
  for (size_t w = 0; w < 10; ++w) EXPECT_DOUBLE_EQ(p.signal.per_window[w], 100);
}

TEST(IncidentDutyCycle, WindowsBeforeTheFamilysFirstProbesAreLeftAlone) {
  // The library is mapped 10 s in: no probe, no launch before, and no watched share to scale by. Those windows
  // must stay at 0 (the job's start-up), not borrow the first watched window's rate.
  const WindowGrid grid{0, 1'000'000'000, 20};
  JobProgressCounter counter(grid);
  const std::vector<int64_t> t{10'000'000'000LL};
  const std::vector<double> v{1.0};
  counter.add_watching("trace.cuda.watching", t, v);
  for (int k = 0; k < 1000; ++k) {
    CallRecord c;
    c.layer = Layer::cuda;
    c.pid = 7;
    c.instant = true;
    c.start_ns = 10'000'000'000LL + k * 10'000'000LL;
    c.name = "cudaLaunchKernel";
    counter.add(c);
  }
  const JobProgress p = counter.finish();
  for (size_t w = 0; w < 10; ++w) EXPECT_DOUBLE_EQ(p.signal.per_window[w], 0) << "window " << w;
  for (size_t w = 10; w < 20; ++w) EXPECT_NEAR(p.signal.per_window[w], 100, 1) << "window " << w;
}

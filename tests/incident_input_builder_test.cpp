// IncidentInputBuilder: what `record --detect` relies on -- the input over the windows so far (snapshot) is the
// input a builder of just those windows gives, and the builder goes on; and the online episode analysis keeps a
// low tail as an incident in progress rather than the job's shutdown.
#include <gtest/gtest.h>

#include <cmath>

#include "analyze/incidents/episodes.h"
#include "analyze/incidents/incident_input_builder.h"

using namespace stackscope;
using namespace stackscope::analyze;
using namespace stackscope::analyze::incidents;

namespace {

constexpr int64_t kSec = 1'000'000'000;

// A torch job: 10 outermost operators a second (8 in window 20..24), and a host gauge and one process's CPU.
void feed(IncidentInputBuilder& b, size_t windows) {
  for (size_t w = 0; w < windows; ++w) {
    const int ops = (w >= 20 && w < 25) ? 4 : 10;
    for (int k = 0; k < ops; ++k) {
      CallRecord c;
      c.layer = Layer::torch;
      c.pid = c.tid = 7;
      c.start_ns = static_cast<int64_t>(w) * kSec + k * (kSec / ops);
      c.duration_ns = 20'000'000;
      c.name = k % 2 ? "aten::mm" : "aten::relu";
      b.add(c);
    }
    SeriesInfo load{};
    load.id = 1;
    load.name = "load.avg1";
    load.kind = SeriesKind::gauge;
    load.source = "procfs";
    const int64_t t[] = {static_cast<int64_t>(w) * kSec + kSec / 2};
    const double v[] = {w >= 20 && w < 25 ? 4.0 : 1.0};
    b.add(load, t, v);
    SeriesInfo proc = load;
    proc.id = 2;
    proc.name = "proc.cpu.util";
    proc.device = "pid:99:hog";
    const double u[] = {w >= 20 && w < 25 ? 1.0 : 0.01};
    b.add(proc, t, u);
  }
}

}  // namespace

TEST(IncidentInputBuilder, SnapshotOfTheWindowsSoFarIsTheInputOfThoseWindows) {
  IncidentInputBuilder live(WindowGrid{0, kSec, 60}, {7});
  feed(live, 30);  // 30 of its 60 windows have happened
  IncidentInputBuilder done(WindowGrid{0, kSec, 30}, {7});
  feed(done, 30);
  const IncidentInput a = live.snapshot(30);
  const IncidentInput b = done.finish();
  EXPECT_EQ(a.grid.count, 30u);
  ASSERT_EQ(a.layers.size(), b.layers.size());
  for (const auto& [name, t] : b.layers) {
    ASSERT_TRUE(a.layers.count(name)) << name;
    const auto& s = a.layers.at(name);
    EXPECT_EQ(s.columns, t.columns) << name;
    ASSERT_EQ(s.values.rows(), t.values.rows()) << name;
    ASSERT_EQ(s.values.cols(), t.values.cols()) << name;
    for (Eigen::Index r = 0; r < t.values.rows(); ++r)
      for (Eigen::Index c = 0; c < t.values.cols(); ++c) {
        if (std::isnan(t.values(r, c)) && std::isnan(s.values(r, c))) continue;
        EXPECT_DOUBLE_EQ(s.values(r, c), t.values(r, c))
            << name << " " << t.columns[static_cast<size_t>(c)] << " " << r;
      }
  }
  EXPECT_EQ(a.progress.signal.metric, b.progress.signal.metric);
  EXPECT_EQ(a.progress.signal.per_window, b.progress.signal.per_window);
  ASSERT_EQ(a.entities.size(), 1u);  // proc.cpu.util kept apart, not a host column
  EXPECT_EQ(a.entities[0].values, b.entities[0].values);
  EXPECT_EQ(a.job_pids, b.job_pids);
  // The builder goes on after a snapshot.
  feed(live, 40);
  EXPECT_EQ(live.snapshot(40).grid.count, 40u);
}

TEST(IncidentInputBuilder, OnlineALowTailIsAnEpisodeNotTheShutdown) {
  std::vector<double> progress(40, 10.0);
  for (size_t w = 36; w < 40; ++w) progress[w] = 4.0;
  const WindowGrid grid{0, kSec, 40};
  const auto offline = analyze_progress(progress, grid);
  EXPECT_TRUE(offline.episodes.empty());  // the run ended: its low tail is the shutdown
  EpisodeOptions online;
  online.open_end = true;
  const auto live = analyze_progress(progress, grid, online);
  ASSERT_EQ(live.episodes.size(), 1u);
  EXPECT_EQ(live.episodes[0].first, 36u);
  EXPECT_EQ(live.episodes[0].last, 39u);
}

// Online the series tables exist before a launcher's ranks make their first traced call: a rank computing on the
// GPU is the job, not "another process" (a false gpu_contention on every torchrun job, seen on 2 H100s).
TEST(IncidentInputBuilder, ARankSeenAfterTheFirstSamplesIsTheJobsNotAnotherProcess) {
  IncidentInputBuilder b(WindowGrid{0, kSec, 10}, {7});
  SeriesInfo sm{};
  sm.id = 3;
  sm.name = "gpu.proc.sm_util";
  sm.device = "gpu0/pid200";
  sm.subsystem = Subsystem::gpu;
  sm.kind = SeriesKind::gauge;
  sm.source = "nvml";
  for (int w = 0; w < 10; ++w) {
    const int64_t t[] = {w * kSec + kSec / 2};
    const double v[] = {0.9};
    b.add(sm, t, v);
    if (w == 3) {  // the rank's first traced call
      CallRecord c;
      c.layer = Layer::cuda;
      c.pid = c.tid = 200;
      c.start_ns = w * kSec + kSec / 4;
      c.duration_ns = 1'000'000;
      c.name = "cudaStreamSynchronize";
      b.add(c);
    }
  }
  const IncidentInput in = b.finish();
  ASSERT_TRUE(in.job_pids.count(200));
  const auto nvml = in.layers.find("nvml");
  ASSERT_NE(nvml, in.layers.end());
  const auto& t = nvml->second;
  for (size_t c = 0; c < t.columns.size(); ++c) {
    if (t.columns[c] != "gpu0.other_procs.sm_util") continue;
    for (Eigen::Index w = 0; w < t.values.rows(); ++w) {
      const double v = t.values(w, static_cast<Eigen::Index>(c));
      if (std::isfinite(v)) {
        EXPECT_EQ(v, 0.0) << "window " << w;
      }
    }
  }
}

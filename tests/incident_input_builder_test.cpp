// IncidentInputBuilder: what `record --detect` relies on -- the input over the windows so far (snapshot) is the
// input a builder of just those windows gives, and the builder goes on; and the online episode analysis keeps a
// low tail as an incident in progress rather than the job's shutdown.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "analyze/incidents/episodes.h"
#include "analyze/incidents/incident_input_builder.h"
#include "store/recording_reader.h"
#include "test_util.h"

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

namespace {

// What a builder was fed, in order: an event or a run of one series' samples.
struct Fed {
  const Event* event = nullptr;
  const SeriesInfo* series = nullptr;
  std::vector<int64_t> t;
  std::vector<double> v;
};

void feed_log(IncidentInputBuilder& b, const std::vector<Fed>& log, size_t from, size_t to) {
  for (size_t i = from; i < to; ++i) {
    if (log[i].event)
      b.add(call_record_of(*log[i].event));
    else
      b.add(*log[i].series, log[i].t, log[i].v);
  }
}

void expect_same_rows(const IncidentInput& got, const IncidentInput& full, size_t rows, size_t pass) {
  ASSERT_EQ(got.grid.count, rows);
  ASSERT_EQ(got.layers.size(), full.layers.size()) << "pass " << pass;
  for (const auto& [name, t] : full.layers) {
    ASSERT_TRUE(got.layers.count(name)) << name;
    const auto& s = got.layers.at(name);
    ASSERT_EQ(s.columns, t.columns) << name << " pass " << pass;
    EXPECT_EQ(s.subjects, t.subjects) << name;
    ASSERT_EQ(static_cast<size_t>(s.values.rows()), rows) << name;
    ASSERT_EQ(s.values.cols(), t.values.cols()) << name;
    size_t differ = 0;
    for (Eigen::Index c = 0; c < t.values.cols(); ++c)
      for (Eigen::Index r = 0; r < static_cast<Eigen::Index>(rows); ++r) {
        const double a = s.values(r, c), b = t.values(r, c);
        if (a == b || (std::isnan(a) && std::isnan(b))) continue;
        if (++differ <= 3)
          ADD_FAILURE() << name << " " << t.columns[static_cast<size_t>(c)] << " row " << r << " pass " << pass << ": "
                        << a << " incremental, " << b << " full";
      }
    EXPECT_EQ(differ, 0u) << name << " pass " << pass;
  }
}

}  // namespace

// The online engine's pass every window reads the builder's tables over the complete windows so far; the tables
// keep the rows they built and build only what changed since. On a real GPU recording (2 H200s, a 2-rank DDP CNN,
// 1,300 host and NVML columns; tests/data/gpu/README.md) fed as `record --detect` feeds it -- events when they end,
// samples by time, a pass a window on the engine's 600-window grid -- every pass's rows equal the first rows of the
// tables a fresh builder gives for the same data in one go.
TEST(IncidentInputBuilder, EachPassesRowsOnARealRecordingEqualTheWholeTablesOfAFreshBuilder) {
  TempDir dir;
  const std::string rec = dir.file("gpu.sdb");
  ASSERT_EQ(run_command("xz -dc " + std::string(STACKSCOPE_SOURCE_DIR) + "/tests/data/gpu/h200x2_cnn_ddp_s24.sdb.xz > " +
                        rec),
            0);
  const RecordingReader r(rec);
  const auto span = r.data_span();
  ASSERT_TRUE(span);
  const int64_t t0 = r.summary().start_ns > 0 ? r.summary().start_ns : span->first;
  std::vector<std::pair<int64_t, Event>> events;  // by arrival: a call is recorded when it returns
  r.for_each_event({{Layer::cuda, Layer::nccl, Layer::torch, Layer::python, Layer::kernel}}, [&](const Event& e) {
    events.emplace_back(e.start_ns + std::max<int64_t>(0, e.duration_ns), e);
  });
  std::stable_sort(events.begin(), events.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  struct Sample1 {
    const SeriesInfo* series;
    int64_t t;
    double v;
  };
  const std::vector<SeriesInfo> series = r.series();
  std::map<SeriesId, const SeriesInfo*> by_id;
  for (const auto& s : series) by_id[s.id] = &s;
  std::vector<Sample1> samples;
  r.for_each_sample_run([&](const SeriesInfo& s, std::span<const int64_t> t, std::span<const double> v) {
    for (size_t i = 0; i < t.size() && i < v.size(); ++i) samples.push_back({by_id.at(s.id), t[i], v[i]});
  });
  std::stable_sort(samples.begin(), samples.end(), [](const auto& a, const auto& b) { return a.t < b.t; });
  ASSERT_GT(events.size(), 100'000u);
  ASSERT_GT(samples.size(), 1'000'000u);

  const WindowGrid grid{t0, kSec, 600};  // a generation's grid: OnlineGenerations(300).grid_windows()
  IncidentInputBuilder live(grid, {}, 20'000);
  std::vector<Fed> log;
  size_t ei = 0, si = 0, passes = 0, checked = 0;
  const auto windows = static_cast<size_t>((span->second - t0) / kSec);
  for (size_t complete = 1; complete <= windows; ++complete) {
    const int64_t now = t0 + static_cast<int64_t>(complete) * kSec + kSec / 2;  // complete 0.5 s after its end
    const size_t fed = log.size();
    for (; ei < events.size() && events[ei].first <= now; ++ei) log.push_back({&events[ei].second, nullptr, {}, {}});
    // This window's samples, a run per series in arrival order (as the engine's thread takes them in).
    const size_t s0 = si;
    while (si < samples.size() && samples[si].t <= now) ++si;
    std::vector<Sample1> batch(samples.begin() + static_cast<std::ptrdiff_t>(s0),
                               samples.begin() + static_cast<std::ptrdiff_t>(si));
    std::stable_sort(batch.begin(), batch.end(), [](const auto& a, const auto& b) { return a.series->id < b.series->id; });
    for (size_t i = 0; i < batch.size();) {
      Fed run{nullptr, batch[i].series, {}, {}};
      for (; i < batch.size() && batch[i].series == run.series; ++i) {
        run.t.push_back(batch[i].t);
        run.v.push_back(batch[i].v);
      }
      log.push_back(std::move(run));
    }
    feed_log(live, log, fed, log.size());
    // Every other pass also takes the window still filling (as the last pass does, once the job has ended), so
    // the rows kept must follow the samples that reach a row already built.
    const size_t rows = complete + (complete % 2);
    const IncidentInput got = live.snapshot(rows);
    ++passes;
    if (complete % 9 != 0 && complete != windows) continue;
    IncidentInputBuilder fresh(grid, {}, 20'000);
    feed_log(fresh, log, 0, log.size());
    expect_same_rows(got, fresh.finish(), rows, complete);
    ++checked;
    if (HasFailure()) return;
  }
  EXPECT_GE(passes, 110u);
  EXPECT_GE(checked, 12u);
}

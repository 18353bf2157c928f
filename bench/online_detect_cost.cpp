// The per-window cost of `record --detect` at its largest horizon: a recording is fed through the incident input
// builder (as the recorder's stream feeds it), then the pass the engine thread makes every window -- the input of
// the windows so far (IncidentInputBuilder::snapshot) and find_incidents on it -- is timed at that many windows.
// Usage: online_detect_cost REC [WINDOWS] [PASSES] [SPAN]   (WINDOWS default 3600: 2 x the 30 min horizon)
// SPAN > 0: as the engine does now (OnlineDetectOptions::evaluated_s, default 300), the pass at job age WINDOWS
// evaluates only the generation in view then (started at a multiple of SPAN, SPAN to 2 x SPAN windows long); the
// passes go on the same builder, as the engine's do (the step detection of a full prefix is kept between them).
// SPAN 0 (default): every window so far, the engine before it bounded its pass.
// These passes repeat one snapshot of a builder holding the whole recording; the live engine's passes each follow a
// window's new data. That is measured by
//   online_detect_cost --live REC [FROM]
// which replays REC as `record --detect` would have run on it (online::replay_online: events at their end, samples
// at their time, a pass a window on the engine's own generations) and reports the engine thread's CPU time per
// window -- take in the new data, the pass, the generations kept -- for the windows from FROM (default 0) on, and
// over the whole replay as a share of one core at one pass a second.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "analyze/incidents/incident_engine.h"
#include "analyze/incidents/incident_input_builder.h"
#include "online/online_detector.h"
#include "store/recording_reader.h"
#include "store/recording_window_tables.h"

using namespace stackscope;

namespace {

int live(const char* path, size_t from) {
  const RecordingReader r(path);
  std::vector<double> ms;  // per window from `from` on
  online::OnlineDetector::PassStats last;
  size_t window = 0;
  online::replay_online(r, "", false, [&](int64_t, const online::OnlineDetector::PassStats& s) {
    if (window++ >= from) ms.push_back(s.last_cpu_ms);
    last = s;
  });
  if (ms.empty()) {
    std::fprintf(stderr, "online_detect_cost: the replay made %zu passes, none from window %zu\n", window, from);
    return 1;
  }
  double total = 0;
  for (double m : ms) total += m;
  std::sort(ms.begin(), ms.end());
  std::printf("live replay, %zu windows (%llu engine passes, at most %zu windows evaluated): engine thread CPU per "
              "window from window %zu: %.2f ms mean, %.2f ms median, %.2f ms worst; whole replay %.2f ms a window = "
              "%.2f %% of a core\n",
              window, static_cast<unsigned long long>(last.passes), last.max_windows, from,
              total / static_cast<double>(ms.size()), ms[ms.size() / 2], ms.back(),
              last.total_cpu_ms / static_cast<double>(window), last.total_cpu_ms / static_cast<double>(window) / 10.0);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: online_detect_cost REC [WINDOWS] [PASSES] [SPAN] | online_detect_cost --live REC [FROM]\n");
    return 2;
  }
  try {
    if (std::strcmp(argv[1], "--live") == 0) {
      if (argc < 3) throw std::invalid_argument("--live needs a recording");
      return live(argv[2], argc > 3 ? std::stoul(argv[3]) : 0);
    }
    const RecordingReader r(argv[1]);
    auto grid = recording_window_grid(r, 1.0);
    const size_t windows = argc > 2 ? std::stoul(argv[2]) : 3600;
    const int passes = argc > 3 ? std::stoi(argv[3]) : 5;
    const size_t span = argc > 4 ? std::stoul(argv[4]) : 0;
    if (grid.count > windows) grid.count = windows;
    size_t evaluated = grid.count;
    if (span > 0 && grid.count >= 2 * span) {  // the oldest generation still kept at this age
      const size_t first = (grid.count / span - 1) * span;
      evaluated = grid.count - first;
      grid.first_ns += static_cast<int64_t>(first) * grid.width_ns;
      grid.count = 2 * span;
    }
    analyze::incidents::IncidentInputBuilder builder(grid, {}, 20'000);  // the online step-prefix bound
    stream_call_records(r, {Layer::cuda, Layer::nccl, Layer::torch, Layer::python, Layer::kernel},
                        [&](std::span<const analyze::CallRecord> batch) {
                          for (const auto& c : batch) builder.add(c);
                        });
    r.for_each_sample_run([&](const SeriesInfo& s, std::span<const int64_t> t, std::span<const double> v) {
      builder.add(s, t, v);
    });
    analyze::incidents::IncidentOptions io;
    io.episodes.open_end = true;
    io.episodes.max_edge_fraction = 1.0;
    double worst = 0, total = 0;
    size_t incidents = 0;
    for (int p = 0; p < passes; ++p) {
      const auto t0 = std::chrono::steady_clock::now();
      if (span > 0 && evaluated < grid.count) io.episodes.max_edge_windows = 0;  // a later generation
      const auto rep = analyze::incidents::find_incidents(builder.snapshot(evaluated), io);
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      worst = std::max(worst, ms);
      total += ms;
      incidents = rep.incidents.size();
    }
    std::printf("%zu windows evaluated, %llu events: engine pass %.1f ms mean, %.1f ms worst over %d passes (%zu incidents)\n",
                evaluated, static_cast<unsigned long long>(builder.events()), total / passes, worst, passes,
                incidents);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "online_detect_cost: %s\n", e.what());
    return 1;
  }
  return 0;
}

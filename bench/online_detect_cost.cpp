// The per-window cost of `record --detect` at its largest horizon: a recording is fed through the incident input
// builder (as the recorder's stream feeds it), then the pass the engine thread makes every window -- the input of
// the windows so far (IncidentInputBuilder::snapshot) and find_incidents on it -- is timed at that many windows.
// Usage: online_detect_cost REC [WINDOWS] [PASSES] [SPAN]   (WINDOWS default 3600: 2 x the 30 min horizon)
// SPAN > 0: as the engine does now (OnlineDetectOptions::evaluated_s, default 300), the pass at job age WINDOWS
// evaluates only the generation in view then (started at a multiple of SPAN, SPAN to 2 x SPAN windows long); the
// passes go on the same builder, as the engine's do (the step detection of a full prefix is kept between them).
// SPAN 0 (default): every window so far, the engine before it bounded its pass.
#include <chrono>
#include <cstdio>
#include <string>

#include "analyze/incidents/incident_engine.h"
#include "analyze/incidents/incident_input_builder.h"
#include "store/recording_reader.h"
#include "store/recording_window_tables.h"

using namespace stackscope;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: online_detect_cost REC [WINDOWS] [PASSES]\n");
    return 2;
  }
  try {
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

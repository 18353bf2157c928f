// Every host series alone through the causal series detector (analyze/detectors/series_novelty.h): samples
// binned by a fixed width from the span's start (gauges: the bin's mean; counters: their rate per second over
// the bin), one detector per series, one finding per span. Static series and per-core shares ("cpu3") are
// left out (host totals are judged; which core a job lands on is chance). No I/O: the caller replays samples.
#pragma once
#include <cstdint>
#include <vector>

#include "analyze/detectors/series_novelty.h"
#include "analyze/reveal/reveal_recording.h"

namespace stackscope::analyze {

struct HostSeriesScanOptions {
  SeriesNoveltyOptions detector;
  // A series' range is at least this many resolutions wide (feature_resolution of its unit): a counter that sits
  // at zero must move by threshold x this many events (a second) to count.
  double floor_resolutions = 100;
};

struct HostSeriesFinding {
  size_t series = 0;                 // index into the stream's series
  int64_t start_ns = 0, end_ns = 0;  // first bin's start, last bin's end
  bool rate = false;                 // values are per-second rates of a counter
  NoveltySpan span;
};

// Findings in time order. Throws std::invalid_argument when bin_ns <= 0.
std::vector<HostSeriesFinding> scan_host_series(const SampleStream& stream, int64_t bin_ns,
                                                const HostSeriesScanOptions& options = {});

}  // namespace stackscope::analyze

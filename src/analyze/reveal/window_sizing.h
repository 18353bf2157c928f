// Window and stride for host series when the user gives none, from the series' own sampling interval: the
// Reveal defaults (3 s windows every 1 s) suit procfs sampled at 100 Hz, but on an imported table sampled every
// 5 minutes a 3 s window holds at most one sample and a 1 s stride makes 300 windows per sample (8,310 findings
// and 6.9 GB on one 10 k-row NAB file). Sized here: the stride is the sampling interval (at least 1 s), the
// window holds kWindowSamples samples (at least 3 s), and the stride grows until the span has at most
// kMaxAutoWindows windows, so time and memory stay bounded whatever the recording's length.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "analyze/reveal/windows.h"
#include "model/series.h"

namespace stackscope::analyze {

// Median spacing of a recording's samples: per series the median of its first kKeptGaps positive gaps, then the
// median over series (a few slow series do not size the windows of many fast ones). Memory: kKeptGaps per series.
class SamplingIntervalEstimator {
 public:
  static constexpr size_t kKeptGaps = 1024;
  // One run of a series' sample times, in time order (runs of a series arrive in time order).
  void add_run(SeriesId series, std::span<const int64_t> t_ns);
  // nullopt until some series had two samples at different times.
  std::optional<int64_t> interval_ns() const;

 private:
  struct PerSeries {
    std::optional<int64_t> last;
    std::vector<int64_t> gaps;
  };
  std::map<SeriesId, PerSeries> series_;
};

constexpr size_t kWindowSamples = 12;          // samples a sized window holds (moments and trend need several)
constexpr size_t kMinWindowSamples = 3;        // fewer in a given window: a warning
constexpr size_t kMaxAutoWindows = 1'000'000;  // a week at 1 s is 605 k

struct SizedWindows {
  WindowSpec spec;
  std::optional<int64_t> interval_ns;  // the sampling interval it was sized from (nullopt: no two samples)
};

// The window for a span of span_ns sampled every interval_ns (nullopt: Reveal's 3 s / 1 s).
SizedWindows size_windows(std::optional<int64_t> interval_ns, int64_t span_ns);

// A warning when a window of window_ns holds fewer than kMinWindowSamples samples at interval_ns, naming a window
// that would; empty when it holds enough.
std::string window_sample_warning(int64_t window_ns, int64_t stride_ns, std::optional<int64_t> interval_ns);

}  // namespace stackscope::analyze

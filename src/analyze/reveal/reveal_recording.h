// Reveal over one recording's samples: the passes `stackscope analyze --detector reveal` makes over each
// recording. No file is touched here: the caller hands over a SampleStream that replays the samples (the CLI
// reads them from a RecordingReader) as often as a pass asks, and nothing of the recording is held beyond the
// windows in progress, a bounded sample of window rows and the flagged windows.
//
//   pass 1 (survey_recording): whole-run and per-window levels of every series (cross-host comparison) and the
//          correlation of the window means (metric pruning), accumulated window by window;
//   pass 2 (analyze_recording): the kept series' window features; the detectors' baseline is fitted on all
//          windows (or those of a clean prefix), or on a uniform sample of a long recording, which a third
//          pass then scores window by window.
#pragma once
#include <Eigen/Dense>
#include <functional>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "analyze/reveal/attribution.h"
#include "analyze/reveal/metric_pruning.h"
#include "analyze/reveal/reveal_pipeline.h"
#include "analyze/reveal/window_features.h"
#include "model/series.h"

namespace stackscope::analyze {

using SampleRunVisitor =
    std::function<void(const SeriesInfo& series, std::span<const int64_t> t_ns, std::span<const double> values)>;

struct SampleStream {
  std::vector<SeriesInfo> series;
  int64_t begin_ns = 0, end_ns = 0;  // the span the windows cover
  // Calls the visitor with every run of samples; a series' runs in time order. Called once per pass.
  std::function<void(const SampleRunVisitor&)> replay;
};

// Uniform sample of rows (reservoir sampling, fixed seed: the same input gives the same sample).
class RowReservoir {
 public:
  RowReservoir(size_t capacity, size_t columns);
  void add(size_t window, std::span<const double> row);
  bool holds_everything() const { return seen_ == rows_.size(); }
  size_t size() const { return rows_.size(); }
  size_t seen() const { return seen_; }
  // The sampled rows in window order.
  Eigen::MatrixXd matrix();

 private:
  size_t cap_, cols_, seen_ = 0;
  uint64_t state_ = 0x9e3779b97f4a7c15ULL;
  std::vector<std::pair<size_t, std::vector<double>>> rows_;
};

// Most window rows the detectors are fitted on (and cross-host levels are taken from): all of a recording's
// windows up to this many cells (16 MiB), else a uniform sample of that size.
constexpr size_t kRevealSampleCells = size_t{2} << 20;

struct RecordingSurvey {
  // One per series that had samples, static ones included (they stay in cross-host comparison), per-core series
  // ("cpu3") excepted (which core a job lands on is chance; host totals are compared): the whole-run level and,
  // for dynamic and counter series, the per-window levels (a uniform sample of a long recording).
  std::vector<HostLevel> levels;
  // The window means' correlation of the dynamic and counter series (static ones get no window column, so they
  // stay out of pruning and single-host detection); empty metrics when not asked for.
  PruningWorkload workload;
  std::vector<std::string> firing_counters;  // event counters whose window sums varied over the whole run
  size_t windows = 0;
};

// Pass 1. `host` names the recording in the levels; `correlate` false skips the correlation (a saved metric list
// is reused); baseline_ns: correlate only the windows ending within this long after the start (the clean warm-up
// the detectors are fitted on), so that pruning, like the detectors, learns normal operation. Throws
// std::invalid_argument on a bad window spec.
RecordingSurvey survey_recording(const SampleStream& stream, const WindowSpec& spec, const std::string& host,
                                 const std::string& workload_name, bool correlate,
                                 std::optional<int64_t> baseline_ns = std::nullopt);

struct RecordingAnalysis {
  std::vector<AttributedColumn> columns;
  size_t windows = 0;
  size_t fit_windows = 0;
  bool fit_on_sample = false;  // the baseline came from a uniform sample of a long recording
  uint64_t dropped_out_of_order = 0;
  RevealPipelineResult result;
};

// Passes 2 and 3: the detectors over the series whose key is in `kept`, attribution over every series (static
// series never: they have no window features).
// baseline_ns: fit on the windows ending within this long after the start (a clean warm-up) instead of all.
RecordingAnalysis analyze_recording(const SampleStream& stream, const WindowSpec& spec,
                                    const std::set<std::string>& kept, std::optional<int64_t> baseline_ns,
                                    const RevealPipelineOptions& options = {});

}  // namespace stackscope::analyze

// Reveal §4.2: per-window features. Dynamic signals get moments, extremes, lag-1 autocorrelation, a linear
// trend and a stationarity statistic; error/event counters get the window sum (burstiness); static or
// strictly periodic series get no window columns (they only feed cross-host comparison, see attribution.h).
//
// WindowFeatureExtractor streams sample runs (as RecordingReader::for_each_sample_run delivers them) and keeps
// per series only the samples of the window being completed, so a long recording is never held in memory.
// By default it fills a feature matrix (windows x feature columns), which grows with the recording; with a
// row sink (set_row_sink) it hands each window's row over as soon as every series has passed that window and
// keeps at most a bounded number of pending rows, so memory stays flat however long the recording.
#pragma once
#include <Eigen/Dense>
#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <span>
#include <string_view>
#include <vector>

#include "analyze/reveal/windows.h"
#include "model/series.h"

namespace stackscope::analyze {

enum class WindowFeature : uint8_t {
  mean = 0,
  variance,
  std_dev,
  min,
  max,
  skewness,
  kurtosis,       // excess (0 for a normal distribution)
  autocorr_lag1,
  trend_slope,    // least-squares slope, units per second
  stationarity,   // KPSS level statistic: large when the window drifts (not level-stationary)
  sum,            // event counters: increments summed over the window
};
constexpr size_t kDynamicFeatureCount = 10;  // mean .. stationarity
std::string_view window_feature_name(WindowFeature f);

// Features of one window of a dynamic signal (values in time order, t_ns their times, same length).
// Degenerate windows yield finite values: an empty one all zeros, a constant one zero spread/shape/trend.
void dynamic_window_features(std::span<const double> values, std::span<const int64_t> t_ns,
                             std::span<double, kDynamicFeatureCount> out);

// What a feature column of the matrix is.
struct FeatureColumn {
  SeriesId series = 0;
  WindowFeature feature = WindowFeature::mean;
};

// Whole-run level of one series (its mean value, or mean rate for counters): what cross-host comparison uses.
struct SeriesLevel {
  SeriesId series = 0;
  double mean = 0;
  uint64_t samples = 0;
};

class WindowFeatureExtractor {
 public:
  // Windows cover [t_begin, t_end). Throws std::invalid_argument on a bad spec. levels_only: dynamic series
  // get just the mean column (what metric pruning correlates), a tenth of the memory.
  WindowFeatureExtractor(WindowSpec spec, int64_t t_begin, int64_t t_end, bool levels_only = false);

  // Streaming mode, chosen before add_series: each window's row goes to `sink` in window order instead of into
  // features(). A row leaves once every series has moved past its window, or when more than max_pending rows
  // wait (a series that stopped reporting must not hold memory); samples for a row already handed over are
  // dropped and counted. max_pending 0: as many rows as hold 4M cells (32 MiB), at least 600 -- a recording's
  // sample block holds one series' samples for the block's whole span, so rows must wait for every series of
  // a block (about 1 s in live recordings; imports and synthetic recordings write far longer blocks). Cells a
  // series had no sample for get that column's mean over the rows handed over so far (0 before any): causal,
  // where the matrix mode uses the whole run's mean.
  using RowSink = std::function<void(size_t window, std::span<const double> row)>;
  void set_row_sink(RowSink sink, size_t max_pending = 0);

  // Declares a series before its samples arrive. A counter of the dynamic category is analysed as a rate
  // per second, an event counter as increments; a gauge as is. Static series only get a SeriesLevel.
  void add_series(SeriesId id, SeriesKind kind, SeriesCategory category);
  // One run of samples of one declared series, in time order; runs of a series arrive in time order.
  // Samples older than the window being completed (out of order) are dropped and counted.
  void add_samples(SeriesId id, std::span<const int64_t> t_ns, std::span<const double> values);
  // Completes the remaining windows and fills windows a series had no sample in with that column's mean
  // (0 when the series never had one). Call once, after the last run.
  void finish();

  size_t window_count() const { return windows_; }
  TimeWindow window(size_t i) const { return window_at(t_begin_, i, spec_); }
  const WindowSpec& spec() const { return spec_; }
  // windows x columns; valid after finish(). Empty in streaming mode.
  const Eigen::MatrixXd& features() const { return matrix_; }
  const std::vector<FeatureColumn>& columns() const { return columns_; }
  std::vector<SeriesLevel> series_levels() const;
  uint64_t dropped_out_of_order() const { return dropped_; }

 private:
  struct SeriesState {
    SeriesKind kind;
    SeriesCategory category;
    size_t first_column = 0;
    size_t next_window = 0;  // the first window not yet completed
    std::vector<int64_t> t;  // samples (levels, rates or increments) from window next_window on
    std::vector<double> v;
    size_t head = 0;         // samples before head are consumed
    CounterDifferencer counter;
    double level_sum = 0;
    uint64_t level_n = 0;
  };
  void complete_windows_before(SeriesState& s, int64_t t_ns);
  void complete_window(SeriesState& s, size_t w);
  void fix_layout();
  // Storage of one cell; nullptr in streaming mode for a window already handed over.
  double* cell(size_t w, size_t c);
  void emit_ready(bool all);

  WindowSpec spec_;
  int64_t t_begin_;
  size_t windows_;
  bool levels_only_;
  std::map<SeriesId, SeriesState> series_;
  std::vector<FeatureColumn> columns_;
  Eigen::MatrixXd matrix_;
  std::vector<uint8_t> missing_;  // windows x columns, 1 where the series had no sample
  // Streaming mode: rows [first_pending_, first_pending_ + pending_.size()) not yet handed over.
  struct PendingRow {
    std::vector<double> values;
    std::vector<uint8_t> missing;
  };
  RowSink sink_;
  size_t max_pending_ = 0;
  std::deque<PendingRow> pending_;
  size_t first_pending_ = 0;
  std::vector<double> emitted_sum_;
  std::vector<uint64_t> emitted_n_;
  uint64_t dropped_ = 0;
  bool finished_ = false;
  bool layout_fixed_ = false;
};

}  // namespace stackscope::analyze

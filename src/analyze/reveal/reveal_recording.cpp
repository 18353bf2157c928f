#include "analyze/reveal/reveal_recording.h"

#include <algorithm>
#include <map>
#include <stdexcept>

namespace stackscope::analyze {

RowReservoir::RowReservoir(size_t capacity, size_t columns) : cap_(std::max<size_t>(capacity, 1)), cols_(columns) {}

void RowReservoir::add(size_t window, std::span<const double> row) {
  if (row.size() != cols_)
    throw std::invalid_argument("row reservoir: a row of " + std::to_string(row.size()) + " values for " +
                                std::to_string(cols_) + " columns");
  ++seen_;
  if (rows_.size() < cap_) {
    rows_.emplace_back(window, std::vector<double>(row.begin(), row.end()));
    return;
  }
  state_ = state_ * 6364136223846793005ULL + 1442695040888963407ULL;
  const uint64_t k = (state_ >> 11) % seen_;
  if (k < cap_) rows_[k] = {window, std::vector<double>(row.begin(), row.end())};
}

Eigen::MatrixXd RowReservoir::matrix() {
  std::sort(rows_.begin(), rows_.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  Eigen::MatrixXd m(static_cast<Eigen::Index>(rows_.size()), static_cast<Eigen::Index>(cols_));
  for (size_t i = 0; i < rows_.size(); ++i)
    for (size_t j = 0; j < cols_; ++j) m(static_cast<Eigen::Index>(i), static_cast<Eigen::Index>(j)) = rows_[i].second[j];
  return m;
}

namespace {

// Streams the samples through a window-feature extractor whose rows go to `sink` one window at a time.
// Declares the series `want` accepts.
template <typename Want>
WindowFeatureExtractor stream_windows(const SampleStream& stream, const WindowSpec& spec, bool levels_only, Want want,
                                      WindowFeatureExtractor::RowSink sink) {
  WindowFeatureExtractor ex(spec, stream.begin_ns, stream.end_ns, levels_only);
  ex.set_row_sink(std::move(sink));
  for (const SeriesInfo& s : stream.series)
    if (want(s)) ex.add_series(s.id, s.kind, s.category);
  stream.replay([&](const SeriesInfo& s, std::span<const int64_t> t, std::span<const double> v) {
    ex.add_samples(s.id, t, v);
  });
  ex.finish();
  return ex;
}

// "cpu3": one core's share of a host-wide metric. Which core a job lands on is the scheduler's chance, so cores
// are not compared across hosts; the host totals (cpu.time.user, cpu.interrupts, ...) are.
bool is_cpu_core(const std::string& device) {
  return device.size() > 3 && device.compare(0, 3, "cpu") == 0 &&
         std::all_of(device.begin() + 3, device.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::map<SeriesId, const SeriesInfo*> index_series(const SampleStream& stream) {
  std::map<SeriesId, const SeriesInfo*> by_id;
  for (const SeriesInfo& s : stream.series) by_id[s.id] = &s;
  return by_id;
}

}  // namespace

RecordingSurvey survey_recording(const SampleStream& stream, const WindowSpec& spec, const std::string& host,
                                 const std::string& workload_name, bool correlate, std::optional<int64_t> baseline_ns) {
  const auto by_id = index_series(stream);
  std::optional<CorrelationAccumulator> corr;
  std::optional<RowReservoir> levels;
  std::vector<double> lo, hi;  // per column over the whole run: did it ever move
  // Every series is declared: the extractor gives static ones a whole-run level and no window column, so they
  // reach cross-host comparison and stay out of the correlation (and so of pruning and detection).
  auto ex = stream_windows(stream, spec, true, [](const SeriesInfo&) { return true; },
                           [&](size_t w, std::span<const double> row) {
                             if (!levels) {
                               levels.emplace(kRevealSampleCells / std::max<size_t>(row.size(), 1), row.size());
                               lo.assign(row.begin(), row.end());
                               hi = lo;
                             }
                             levels->add(w, row);
                             for (size_t j = 0; j < row.size(); ++j) {
                               lo[j] = std::min(lo[j], row[j]);
                               hi[j] = std::max(hi[j], row[j]);
                             }
                             if (!correlate) return;
                             // With a clean baseline, correlations of normal operation only: an injected
                             // episode must not make its own symptoms redundant with each other.
                             if (baseline_ns && window_at(stream.begin_ns, w, spec).end_ns > stream.begin_ns + *baseline_ns)
                               return;
                             if (!corr) corr.emplace(row.size());
                             corr->add(row);
                           });
  RecordingSurvey out;
  out.windows = ex.window_count();
  std::map<SeriesId, size_t> column_of;
  for (size_t j = 0; j < ex.columns().size(); ++j) column_of[ex.columns()[j].series] = j;
  const Eigen::MatrixXd window_levels = levels ? levels->matrix() : Eigen::MatrixXd();
  for (const SeriesLevel& sl : ex.series_levels()) {
    const SeriesInfo* s = by_id.at(sl.series);
    if (is_cpu_core(s->device)) continue;
    HostLevel l{host, s->key(), s->subsystem, sl.mean, {}, feature_resolution(s->unit, WindowFeature::mean)};
    if (auto c = column_of.find(sl.series); c != column_of.end() && window_levels.rows() > 0) {
      const auto col = window_levels.col(static_cast<Eigen::Index>(c->second));
      l.windows.assign(col.data(), col.data() + col.size());
    }
    out.levels.push_back(std::move(l));
  }
  if (!correlate) return out;
  PruningWorkload& w = out.workload;
  w.name = workload_name;
  for (const FeatureColumn& c : ex.columns()) w.metrics.push_back(by_id.at(c.series)->key());
  const auto n = static_cast<Eigen::Index>(w.metrics.size());
  w.correlation = corr ? corr->correlation() : Eigen::MatrixXd::Zero(n, n);
  for (size_t j = 0; j < ex.columns().size() && j < lo.size(); ++j)
    if (by_id.at(ex.columns()[j].series)->category == SeriesCategory::event_counter && hi[j] > lo[j])
      out.firing_counters.push_back(w.metrics[j]);
  return out;
}

RecordingAnalysis analyze_recording(const SampleStream& stream, const WindowSpec& spec,
                                    const std::set<std::string>& kept, std::optional<int64_t> baseline_ns,
                                    const RevealPipelineOptions& options) {
  const auto by_id = index_series(stream);
  // Every non-static series gets window features: the kept ones for the detectors, all for attribution (a
  // flagged window is explained by whatever moved, pruned or not -- Reveal maps anomalies back to their signals).
  auto want = [&](const SeriesInfo& s) { return s.category != SeriesCategory::static_value; };
  std::optional<RowReservoir> sample;
  size_t windows_seen = 0;
  auto ex = stream_windows(stream, spec, false, want, [&](size_t w, std::span<const double> row) {
    ++windows_seen;
    if (baseline_ns && window_at(stream.begin_ns, w, spec).end_ns > stream.begin_ns + *baseline_ns) return;
    if (!sample) sample.emplace(kRevealSampleCells / std::max<size_t>(row.size(), 1), row.size());
    sample->add(w, row);
  });
  RecordingAnalysis out;
  out.windows = ex.window_count();
  out.dropped_out_of_order = ex.dropped_out_of_order();
  for (const FeatureColumn& c : ex.columns()) {
    const SeriesInfo* s = by_id.at(c.series);
    out.columns.push_back({s->key(), s->subsystem, c.feature, feature_resolution(s->unit, c.feature),
                           kept.count(s->key()) > 0});
  }
  RevealStreamingPipeline pipeline(out.columns, options);
  Eigen::MatrixXd fit_rows =
      sample ? sample->matrix() : Eigen::MatrixXd(0, static_cast<Eigen::Index>(out.columns.size()));
  pipeline.fit(fit_rows, ex.window_count());
  out.fit_windows = static_cast<size_t>(fit_rows.rows());
  out.fit_on_sample = sample && (!sample->holds_everything() || sample->size() < windows_seen);
  if (!out.fit_on_sample) {
    // The sample is every window: score it as it is, no third pass.
    std::vector<double> row(out.columns.size());
    for (Eigen::Index i = 0; i < fit_rows.rows(); ++i) {
      for (size_t j = 0; j < row.size(); ++j) row[j] = fit_rows(i, static_cast<Eigen::Index>(j));
      pipeline.add_window(static_cast<size_t>(i), row);
    }
  } else {
    fit_rows.resize(0, 0);
    stream_windows(stream, spec, false, want, [&](size_t w, std::span<const double> row) { pipeline.add_window(w, row); });
  }
  out.result = pipeline.finish();
  return out;
}

}  // namespace stackscope::analyze

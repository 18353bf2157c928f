// `stackscope analyze --detector reveal`: Reveal's host-telemetry pipeline over one or more recordings.
// Per recording (one host or run): stream samples into sliding-window features, prune correlated metrics
// (union over recordings; the list can be saved and reused), detect with the Z / PCA-Mahalanobis / Isolation
// Forest ensemble, attribute flagged windows; with 3+ recordings also compare hosts (cross-host deviations).
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "analyze/metric_pruning.h"
#include "analyze/reveal_pipeline.h"
#include "analyze/window_features.h"
#include "cli/analyze.h"
#include "store/errors.h"
#include "store/recording_reader.h"

namespace stackscope::cli {
namespace {

using namespace stackscope::analyze;

struct RecordingSpan {
  int64_t begin = 0, end = 0, realtime_offset = 0;
};

RecordingSpan span_of(const RecordingReader& r) {
  RecordingSummary s = r.summary();
  RecordingSpan span;
  span.begin = s.start_ns;
  span.end = std::max(s.closed_cleanly ? s.end_ns : 0, s.last_data_ns);
  span.realtime_offset = s.realtime_offset_ns;
  return span;
}

std::string utc_time(int64_t realtime_ns) {
  std::time_t secs = static_cast<std::time_t>(realtime_ns / 1'000'000'000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  return fmt::format("{:04}-{:02}-{:02} {:02}:{:02}:{:02}", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
                     tm.tm_min, tm.tm_sec);
}

// Streams a recording's samples through a window-feature extractor whose rows go to `sink` one window at a
// time (nothing of the recording is held beyond the windows in progress). Declares the series `want` accepts.
template <typename Want>
WindowFeatureExtractor stream_windows(const RecordingReader& r, const RecordingSpan& span, const WindowSpec& spec,
                                      bool levels_only, Want want, WindowFeatureExtractor::RowSink sink) {
  WindowFeatureExtractor ex(spec, span.begin, span.end, levels_only);
  ex.set_row_sink(std::move(sink));
  for (const SeriesInfo& s : r.series())
    if (want(s)) ex.add_series(s.id, s.kind, s.category);
  r.for_each_sample_run([&](const SeriesInfo& s, std::span<const int64_t> t, std::span<const double> v) {
    ex.add_samples(s.id, t, v);
  });
  ex.finish();
  return ex;
}

// Most window rows the detectors are fitted on: all of a recording's windows up to this many cells (16 MiB),
// else a uniform sample of that size (the baseline of a long recording; every window is still scored).
constexpr size_t kFitSampleCells = size_t{2} << 20;
// Per-window score arrays go into the JSON report up to this many windows.
constexpr size_t kMaxWindowScoresInJson = 20000;

// Uniform sample of rows (reservoir sampling, fixed seed: the same recording gives the same report).
class RowReservoir {
 public:
  RowReservoir(size_t capacity, size_t columns) : cap_(std::max<size_t>(capacity, 1)), cols_(columns) {}
  void add(size_t window, std::span<const double> row) {
    ++seen_;
    if (rows_.size() < cap_) {
      rows_.emplace_back(window, std::vector<double>(row.begin(), row.end()));
      return;
    }
    state_ = state_ * 6364136223846793005ULL + 1442695040888963407ULL;
    const uint64_t k = (state_ >> 11) % seen_;
    if (k < cap_) rows_[k] = {window, std::vector<double>(row.begin(), row.end())};
  }
  bool holds_everything() const { return seen_ == rows_.size(); }
  size_t size() const { return rows_.size(); }
  // In window order.
  Eigen::MatrixXd matrix() {
    std::sort(rows_.begin(), rows_.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    Eigen::MatrixXd m(static_cast<Eigen::Index>(rows_.size()), static_cast<Eigen::Index>(cols_));
    for (size_t i = 0; i < rows_.size(); ++i)
      for (size_t j = 0; j < cols_; ++j) m(static_cast<Eigen::Index>(i), static_cast<Eigen::Index>(j)) = rows_[i].second[j];
    return m;
  }

 private:
  size_t cap_, cols_, seen_ = 0;
  uint64_t state_ = 0x9e3779b97f4a7c15ULL;
  std::vector<std::pair<size_t, std::vector<double>>> rows_;
};

std::vector<std::string> load_metric_list(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::invalid_argument(path + ": cannot read the metric list");
  auto j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("kept") || !j["kept"].is_array())
    throw std::invalid_argument(path + ": not a reveal metric list (expected a JSON object with a \"kept\" array)");
  std::vector<std::string> out;
  for (auto& k : j["kept"]) {
    if (!k.is_string()) throw std::invalid_argument(path + ": \"kept\" holds a non-string entry");
    out.push_back(k.get<std::string>());
  }
  return out;
}

void save_metric_list(const std::string& path, const PruningResult& pruning, double threshold) {
  nlohmann::json groups = nlohmann::json::array();
  for (const auto& g : pruning.groups)
    groups.push_back({{"workload", g.workload}, {"representative", g.representative}, {"redundant", g.redundant},
                      {"abs_r", g.abs_r}});
  nlohmann::json j = {{"threshold", threshold}, {"kept", pruning.kept}, {"constant", pruning.constant}, {"groups", groups}};
  std::ofstream out(path);
  out << j.dump(2) << "\n";
  if (!out) throw std::invalid_argument(path + ": cannot write the metric list");
}

struct Loaded {
  std::string path, host;
  std::unique_ptr<RecordingReader> reader;
  RecordingSpan span;
};

}  // namespace

AnalysisOutput analyze_reveal(const AnalyzeOptions& options) {
  AnalysisOutput out;
  WindowSpec spec;
  auto size = parse_duration_ns(options.reveal_window), stride = parse_duration_ns(options.reveal_stride);
  if (!size || !stride || *stride > *size) {
    out.text = fmt::format("reveal: bad window '{}' / stride '{}' (e.g. 3s and 1s; stride at most the window)\n",
                           options.reveal_window, options.reveal_stride);
    out.json = {{"error", out.text}};
    out.status = 2;
    return out;
  }
  spec = {*size, *stride};
  std::optional<int64_t> baseline_ns;
  if (!options.reveal_baseline.empty()) {
    baseline_ns = parse_duration_ns(options.reveal_baseline);
    if (!baseline_ns) {
      out.text = fmt::format("reveal: bad --reveal-baseline '{}' (a duration such as 30s)\n", options.reveal_baseline);
      out.json = {{"error", out.text}};
      out.status = 2;
      return out;
    }
  }

  // Open every recording; name hosts, disambiguating recordings of one host by their file name.
  std::vector<Loaded> recs;
  std::map<std::string, int> host_uses;
  for (const std::string& path : options.recordings) {
    Loaded l;
    l.path = path;
    l.reader = std::make_unique<RecordingReader>(path);
    l.host = l.reader->meta_or("host", "");
    if (l.host.empty() && !l.reader->series().empty()) l.host = l.reader->series().front().host;
    if (l.host.empty()) l.host = std::filesystem::path(path).stem().string();
    l.span = span_of(*l.reader);
    ++host_uses[l.host];
    recs.push_back(std::move(l));
  }
  for (Loaded& l : recs)
    if (host_uses[l.host] > 1) l.host += "/" + std::filesystem::path(l.path).stem().string();

  // Pass 1 per recording: whole-run levels of every series (cross-host comparison) and, unless a saved metric
  // list is reused, the correlation of the non-static series' window means, accumulated window by window.
  const bool reuse = !options.reveal_metrics.empty() && std::filesystem::exists(options.reveal_metrics);
  std::vector<HostLevel> levels;
  std::vector<PruningWorkload> workloads;
  std::set<std::string> firing_counters;  // event counters that moved in some recording
  size_t candidates = 0;
  for (const Loaded& l : recs) {
    std::optional<CorrelationAccumulator> corr;
    auto ex = stream_windows(*l.reader, l.span, spec, true, [](const SeriesInfo&) { return true; },
                             [&](size_t, std::span<const double> row) {
                               if (reuse) return;
                               if (!corr) corr.emplace(row.size());
                               corr->add(row);
                             });
    for (const SeriesLevel& sl : ex.series_levels()) {
      const SeriesInfo* s = l.reader->series_by_id(sl.series);
      levels.push_back({l.host, s->key(), s->subsystem, sl.mean});
    }
    if (reuse) continue;
    PruningWorkload w;
    w.name = l.path;
    for (const FeatureColumn& c : ex.columns()) w.metrics.push_back(l.reader->series_by_id(c.series)->key());
    w.correlation = corr ? corr->correlation() : Eigen::MatrixXd::Zero(static_cast<Eigen::Index>(w.metrics.size()),
                                                                        static_cast<Eigen::Index>(w.metrics.size()));
    for (size_t j = 0; j < ex.columns().size(); ++j)
      if (l.reader->series_by_id(ex.columns()[j].series)->category == SeriesCategory::event_counter &&
          w.correlation(static_cast<Eigen::Index>(j), static_cast<Eigen::Index>(j)) > 0)
        firing_counters.insert(w.metrics[j]);
    candidates += w.metrics.size();
    workloads.push_back(std::move(w));
  }

  // Metric pruning: reuse a saved list, or prune each recording and take the union.
  std::set<std::string> kept;
  nlohmann::json jpruning;
  const double threshold = 0.5;
  if (reuse) {
    for (auto& k : load_metric_list(options.reveal_metrics)) kept.insert(k);
    jpruning = {{"source", options.reveal_metrics}, {"kept", kept.size()}};
  } else {
    PruningResult pruning = prune_metrics(workloads, {threshold});
    kept.insert(pruning.kept.begin(), pruning.kept.end());
    // Error and event counters that fired stay even when redundant: one column each, zero until something goes
    // wrong, and then they are the claim itself (TCP retransmissions, not the packet rate they move with).
    size_t counters_added = 0;
    for (const std::string& c : firing_counters) counters_added += kept.insert(c).second;
    pruning.kept.assign(kept.begin(), kept.end());  // the saved list keeps them too
    jpruning = {{"threshold", threshold}, {"candidates", candidates}, {"kept", kept.size()},
                {"event_counters_kept_unpruned", counters_added}, {"constant", pruning.constant.size()}};
    if (!options.reveal_metrics.empty()) {
      save_metric_list(options.reveal_metrics, pruning, threshold);
      jpruning["saved_to"] = options.reveal_metrics;
    }
  }

  std::string text = "== reveal (host telemetry: windows " + options.reveal_window + "/" + options.reveal_stride + ") ==\n";
  text += fmt::format("metrics: {} kept after pruning (|r| >= {})\n", kept.size(), threshold);
  nlohmann::json jrecs = nlohmann::json::array();
  std::map<std::string, std::vector<Finding>> findings_by_path;

  for (const Loaded& l : recs) {
    // Pass 2: the kept series' window features; the detectors' baseline is fitted on all windows (or those
    // of the --reveal-baseline prefix), or on a uniform sample of a long recording, which pass 3 then scores
    // window by window.
    auto want = [&](const SeriesInfo& s) { return s.category != SeriesCategory::static_value && kept.count(s.key()); };
    std::optional<RowReservoir> sample;
    size_t windows_seen = 0;
    auto ex = stream_windows(*l.reader, l.span, spec, false, want, [&](size_t w, std::span<const double> row) {
      ++windows_seen;
      if (baseline_ns && window_at(l.span.begin, w, spec).end_ns > l.span.begin + *baseline_ns) return;
      if (!sample) sample.emplace(kFitSampleCells / std::max<size_t>(row.size(), 1), row.size());
      sample->add(w, row);
    });
    std::vector<AttributedColumn> cols;
    for (const FeatureColumn& c : ex.columns()) {
      const SeriesInfo* s = l.reader->series_by_id(c.series);
      cols.push_back({s->key(), s->subsystem, c.feature});
    }
    RevealStreamingPipeline pipeline(cols);
    Eigen::MatrixXd fit_rows = sample ? sample->matrix() : Eigen::MatrixXd(0, static_cast<Eigen::Index>(cols.size()));
    pipeline.fit(fit_rows, ex.window_count());
    const auto fit_windows = fit_rows.rows();
    const bool sampled = sample && (!sample->holds_everything() || sample->size() < windows_seen);
    if (!sampled) {
      std::vector<double> row(cols.size());
      for (Eigen::Index i = 0; i < fit_rows.rows(); ++i) {
        for (size_t j = 0; j < cols.size(); ++j) row[j] = fit_rows(i, static_cast<Eigen::Index>(j));
        pipeline.add_window(static_cast<size_t>(i), row);
      }
    } else {
      fit_rows.resize(0, 0);
      stream_windows(*l.reader, l.span, spec, false, want,
                     [&](size_t w, std::span<const double> row) { pipeline.add_window(w, row); });
    }
    RevealPipelineResult res = pipeline.finish();

    text += fmt::format("\n{} (host {}): {} windows, {} feature columns, {} flagged, {} anomalies\n", l.path, l.host,
                        ex.window_count(), ex.columns().size(), res.windows.size(), res.anomalies.size());
    if (res.too_short) text += "  too few windows for a baseline: nothing flagged\n";
    nlohmann::json jwin = nlohmann::json::array();
    if (!res.windows.empty()) text += fmt::format("  {:>6}  {:<19}  {:<12}  {:<8}  {}\n", "window", "time (UTC)", "methods", "subsys", "main reason / claim");
    for (const RevealWindowReport& w : res.windows) {
      const TimeWindow tw = ex.window(w.window);
      const auto& reasons = w.attribution.reasons;
      std::string claim = reasons.empty() ? "" : reasons.front().claim;
      text += fmt::format("  {:>6}  {:<19}  {:<12}  {:<8}  {}\n", w.window, utc_time(tw.start_ns + l.span.realtime_offset),
                          reveal_methods_label(w.methods), subsystem_name(w.attribution.subsystem), claim);
      nlohmann::json jr = nlohmann::json::array();
      for (const Contribution& c : reasons)
        jr.push_back({{"metric", c.subject}, {"subsystem", subsystem_name(c.subsystem)},
                      {"feature", window_feature_name(c.feature)}, {"value", c.value}, {"expected", c.expected},
                      {"z", c.z}, {"claim", c.claim}});
      jwin.push_back({{"window", w.window}, {"t_start_ns", tw.start_ns}, {"t_end_ns", tw.end_ns},
                      {"time_utc", utc_time(tw.start_ns + l.span.realtime_offset)},
                      {"methods", reveal_methods_label(w.methods)}, {"score", w.score},
                      {"subsystem", subsystem_name(w.attribution.subsystem)}, {"reasons", jr}});
    }
    auto& findings = findings_by_path[l.path];
    for (const RevealAnomaly& a : res.anomalies) {
      Finding f;
      f.detector = "reveal";
      f.layer = "host";
      f.subsystem = std::string(subsystem_name(a.subsystem));
      f.host = l.host;
      f.subject = a.reasons.empty() ? "" : a.reasons.front().subject;
      f.t_start_ns = ex.window(a.first_window).start_ns;
      f.t_end_ns = ex.window(a.last_window).end_ns;
      f.score = a.score;
      f.summary = fmt::format("{} anomaly in windows {}-{} ({}): {}", f.subsystem, a.first_window, a.last_window,
                              reveal_methods_label(a.methods), a.reasons.empty() ? "" : a.reasons.front().claim);
      for (const Contribution& c : a.reasons)
        f.evidence.push_back({c.subject, std::string(window_feature_name(c.feature)), c.value, c.expected, c.z});
      findings.push_back(std::move(f));
    }
    nlohmann::json jrec = {{"recording", l.path}, {"host", l.host}, {"windows", ex.window_count()},
                           {"feature_columns", ex.columns().size()}, {"too_short", res.too_short},
                           {"fit_windows", fit_windows}, {"fit_on_sample", sampled},
                           {"baseline_s", baseline_ns ? *baseline_ns / 1e9 : 0.0},
                           {"thresholds", {{"z", res.ensemble.z_threshold}, {"maha", res.ensemble.maha_threshold},
                                           {"iforest", res.ensemble.iforest_threshold}}},
                           {"flagged_windows", jwin}, {"dropped_out_of_order", ex.dropped_out_of_order()}};
    auto as_list = [](const Eigen::VectorXd& v) { return std::vector<double>(v.data(), v.data() + v.size()); };
    if (ex.window_count() <= kMaxWindowScoresInJson) {
      jrec["window_scores"] = as_list(res.ensemble.score);
      jrec["z_scores"] = as_list(res.ensemble.z);
      jrec["maha_scores"] = as_list(res.ensemble.maha);
      jrec["iforest_scores"] = as_list(res.ensemble.iforest);
    }
    jrecs.push_back(std::move(jrec));
  }

  // Cross-host: a host whose whole-run level deviates from the others (needs 3+ hosts).
  nlohmann::json jcross = nlohmann::json::array();
  if (recs.size() >= 3) {
    auto dev = cross_host_deviations(levels);
    std::map<std::string, int> per_host;
    text += fmt::format("\ncross-host ({} hosts): {} deviations\n", recs.size(), dev.size());
    for (const HostDeviation& d : dev) {
      if (++per_host[d.host] > 10) continue;  // the strongest ten per host
      text += "  " + d.claim + "\n";
      jcross.push_back({{"host", d.host}, {"metric", d.subject}, {"subsystem", subsystem_name(d.subsystem)},
                        {"level", d.level}, {"cluster_median", d.cluster_median}, {"robust_z", d.robust_z},
                        {"claim", d.claim}});
      for (const Loaded& l : recs)
        if (l.host == d.host) {
          Finding f;
          f.detector = "reveal";
          f.layer = "host";
          f.subsystem = std::string(subsystem_name(d.subsystem));
          f.host = d.host;
          f.subject = d.subject;
          f.t_start_ns = l.span.begin;
          f.t_end_ns = l.span.end;
          f.score = std::min(std::abs(d.robust_z), 1e6);
          f.summary = "cross-host: " + d.claim;
          f.evidence.push_back({d.subject, "cross_host_level", d.level, d.cluster_median, d.robust_z});
          findings_by_path[l.path].push_back(std::move(f));
        }
    }
  } else if (recs.size() == 2) {
    text += "\ncross-host: needs 3 or more recordings to tell which host is the odd one\n";
  }

  nlohmann::json jfind = nlohmann::json::array();
  for (const Loaded& l : recs) {
    const auto& fs = findings_by_path[l.path];
    for (const Finding& f : fs) {
      nlohmann::json ev = nlohmann::json::array();
      for (const Evidence& e : f.evidence)
        ev.push_back({{"subject", e.subject}, {"feature", e.feature}, {"value", e.value}, {"expected", e.expected},
                      {"score", e.score}});
      jfind.push_back({{"detector", f.detector}, {"recording", l.path}, {"host", f.host}, {"subsystem", f.subsystem},
                       {"subject", f.subject}, {"t_start_ns", f.t_start_ns}, {"t_end_ns", f.t_end_ns},
                       {"t_start_s", (f.t_start_ns - l.span.begin) / 1e9}, {"t_end_s", (f.t_end_ns - l.span.begin) / 1e9},
                       {"score", f.score}, {"summary", f.summary}, {"evidence", ev}});
    }
    if (options.store) store_findings(l.path, "reveal", fs);
  }
  text += fmt::format("\nreveal findings: {}\n", jfind.size());
  out.text = text;
  out.json = {{"available", true}, {"window_ns", spec.size_ns}, {"stride_ns", spec.stride_ns}, {"pruning", jpruning},
              {"recordings", jrecs}, {"cross_host", jcross}, {"findings", jfind}};
  return out;
}

}  // namespace stackscope::cli

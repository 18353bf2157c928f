// `stackscope analyze --detector reveal`: Reveal's host-telemetry pipeline over one or more recordings.
// Wiring only: opens the recordings and hands their samples to the engine (analyze/reveal_recording.h) -- per
// recording a survey (levels, correlation), metric pruning (union over recordings; the list can be saved and
// reused), detection and attribution into incidents; with 3+ recordings the cross-host comparison -- then
// writes the report and the findings.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "analyze/reveal/metric_pruning.h"
#include "analyze/reveal/reveal_recording.h"
#include "cli/analyze.h"
#include "cli/reveal_hosts.h"
#include "cli/series_sizing.h"
#include "store/errors.h"
#include "store/output_file.h"
#include "store/recording_reader.h"
#include "store/recording_sampling_interval.h"

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

// Per-window score arrays go into the JSON report up to this many windows.
constexpr size_t kMaxWindowScoresInJson = 20000;

// The recording's samples as the analysis engine takes them: replayed from the file on each pass.
SampleStream sample_stream(const RecordingReader& r, const RecordingSpan& span) {
  SampleStream s;
  s.series = r.series();
  s.begin_ns = span.begin;
  s.end_ns = span.end;
  s.replay = [&r](const SampleRunVisitor& visit) { r.for_each_sample_run(visit); };
  return s;
}

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
  OutputFile out(path, {.inputs = {}, .what = "metric list"});
  out.stream() << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  out.commit();
}

// One host's samples under the name the report gives them (l.path: the recording, or where they were read).
struct Loaded {
  std::string path, host;
  RecordingSpan span;
  SampleStream stream;
  std::optional<int64_t> interval_ns;
  bool storable = false;  // a recording the findings can be written back into
};

AnalysisOutput reveal_over(const std::vector<Loaded>& recs, const AnalyzeOptions& options);

}  // namespace

AnalysisOutput analyze_reveal_hosts(std::vector<RevealHostInput> inputs, const AnalyzeOptions& options) {
  std::vector<Loaded> recs;
  for (RevealHostInput& in : inputs) {
    Loaded l;
    l.path = std::move(in.label);
    l.host = std::move(in.host);
    l.span = {in.stream.begin_ns, in.stream.end_ns, in.realtime_offset_ns};
    l.stream = std::move(in.stream);
    l.interval_ns = in.sampling_interval_ns;
    recs.push_back(std::move(l));
  }
  return reveal_over(recs, options);
}

AnalysisOutput analyze_reveal(const AnalyzeOptions& options) {
  // Open every recording; name hosts, disambiguating recordings of one host by their file name.
  std::vector<std::unique_ptr<RecordingReader>> readers;
  std::vector<Loaded> recs;
  std::map<std::string, int> host_uses;
  for (const std::string& path : options.recordings) {
    Loaded l;
    l.path = path;
    readers.push_back(std::make_unique<RecordingReader>(path));
    const RecordingReader& reader = *readers.back();
    l.host = reader.meta_or("host", "");
    if (l.host.empty() && !reader.series().empty()) l.host = reader.series().front().host;
    if (l.host.empty()) l.host = std::filesystem::path(path).stem().string();
    l.span = span_of(reader);
    l.stream = sample_stream(reader, l.span);
    l.interval_ns = recording_sampling_interval(reader);
    l.storable = true;
    ++host_uses[l.host];
    recs.push_back(std::move(l));
  }
  for (Loaded& l : recs)
    if (host_uses[l.host] > 1) l.host += "/" + std::filesystem::path(l.path).stem().string();
  return reveal_over(recs, options);
}

namespace {

AnalysisOutput reveal_over(const std::vector<Loaded>& recs, const AnalyzeOptions& options) {
  AnalysisOutput out;
  WindowSpec spec;
  std::optional<int64_t> baseline_ns;
  if (!options.reveal_baseline.empty()) {
    baseline_ns = parse_duration_ns(options.reveal_baseline);
    if (!baseline_ns) {
      out.text = fmt::format("reveal: bad --reveal-baseline '{}' (a duration such as 30s; units: {})\n",
                             options.reveal_baseline, duration_units());
      out.json = {{"error", out.text}};
      out.status = 2;
      return out;
    }
  }

  // Window and stride: as given, else sized from the sampling interval (cli/series_sizing.h); a warning when a
  // window holds too few samples for its features.
  std::optional<int64_t> interval_ns;
  int64_t longest_span = 0;
  for (const Loaded& l : recs) {
    if (auto i = l.interval_ns; i && (!interval_ns || *i < *interval_ns)) interval_ns = i;
    longest_span = std::max(longest_span, l.span.end - l.span.begin);
  }
  std::string window_warning;
  try {
    spec = resolve_window_spec(options.reveal_window, options.reveal_stride, interval_ns, longest_span, window_warning);
  } catch (const std::invalid_argument& e) {
    out.text = fmt::format("reveal: {}\n", e.what());
    out.json = {{"error", out.text}};
    out.status = 2;
    return out;
  }
  const bool sized = options.reveal_window.empty() || options.reveal_stride.empty();

  // Pass 1 per recording (analyze/reveal_recording.h): the levels for cross-host comparison (static series
  // included, per-core ones not); unless a saved metric list is reused, the correlation of the non-static series'
  // window means (over the clean warm-up when there is one).
  const bool reuse = !options.reveal_metrics.empty() && std::filesystem::exists(options.reveal_metrics);
  std::vector<HostLevel> levels;
  std::vector<PruningWorkload> workloads;
  std::set<std::string> firing_counters;  // event counters that moved in some recording
  size_t candidates = 0;
  for (const Loaded& l : recs) {
    RecordingSurvey survey = survey_recording(l.stream, spec, l.host, l.path, !reuse, baseline_ns);
    std::move(survey.levels.begin(), survey.levels.end(), std::back_inserter(levels));
    if (reuse) continue;
    firing_counters.insert(survey.firing_counters.begin(), survey.firing_counters.end());
    candidates += survey.workload.metrics.size();
    workloads.push_back(std::move(survey.workload));
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

  std::string text = fmt::format("== reveal (host telemetry: windows {}/{}{}) ==\n", format_duration(spec.size_ns),
                                 format_duration(spec.stride_ns),
                                 sized && interval_ns
                                     ? ", sized from the " + format_duration(*interval_ns) + " sampling interval"
                                     : std::string());
  if (!window_warning.empty()) text += "warning: " + window_warning + "\n";
  text += fmt::format("metrics: {} kept after pruning (|r| >= {})\n", kept.size(), threshold);
  nlohmann::json jrecs = nlohmann::json::array();
  std::map<std::string, std::vector<Finding>> findings_by_path;

  RevealPipelineOptions pipeline_options;
  // Flagged windows that overlap or touch in time are one incident.
  pipeline_options.merge_gap_windows = static_cast<size_t>((spec.size_ns + spec.stride_ns - 1) / spec.stride_ns);
  // Noise is not an incident: the detectors' 99th-percentile thresholds flag the most extreme 1 % of the windows of
  // any data, and on clean white noise (three hosts, 48 draws of 300 s and 900 s at 1 s) the incidents they made had
  // their strongest reason at z 2.3 to 6.4 (mostly the kurtosis, skewness or extremes of a 12-sample window). An
  // incident is reported when a reason departs by 8 or more (a 20 s CPU burst of 3.5 noise widths reached 8.5, of 10
  // widths 28), or when it stays flagged for two windows' worth of windows (a long, subtle drift).
  pipeline_options.min_reason_z = 8;
  pipeline_options.long_incident_windows = 2 * pipeline_options.merge_gap_windows;
  for (const Loaded& l : recs) {
    // Passes 2 and 3: the kept series' window features, the detectors fitted on every window (or those of the
    // --reveal-baseline prefix, or a uniform sample of a long recording), every window scored.
    RecordingAnalysis analysis =
        analyze_recording(l.stream, spec, kept, baseline_ns, pipeline_options);
    const RevealPipelineResult& res = analysis.result;
    auto window = [&](size_t w) { return window_at(l.span.begin, w, spec); };
    const auto detector_columns = std::count_if(analysis.columns.begin(), analysis.columns.end(),
                                                [](const AttributedColumn& c) { return c.detect; });
    text += fmt::format("\n{} (host {}): {} windows, {} feature columns ({} for the detectors, all for attribution), "
                        "{} flagged, {} incidents reported ({} not reported: lone windows neither persistent nor agreed "
                        "on, or weaker than noise, z < {:.0f})\n",
                        l.path, l.host, analysis.windows, analysis.columns.size(), detector_columns,
                        res.windows.size(), res.anomalies.size(), res.unconfirmed_incidents,
                        pipeline_options.min_reason_z);
    if (res.no_detector_columns)
      text += "  no series varies enough for the detectors (all static or pruned): nothing flagged\n";
    else if (res.too_short)
      text += "  too few windows for a baseline: nothing flagged\n";
    nlohmann::json jwin = nlohmann::json::array();
    if (!res.windows.empty()) text += fmt::format("  {:>6}  {:<19}  {:<12}  {:<8}  {}\n", "window", "time (UTC)", "methods", "subsys", "main reason / claim");
    for (const RevealWindowReport& w : res.windows) {
      const TimeWindow tw = window(w.window);
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
    const std::vector<const RevealAnomaly*> ranked = rank_incidents(res.anomalies);
    if (!ranked.empty())
      text += fmt::format("  incidents, strongest first:\n  {:>4}  {:>9}  {:>7}  {:<12}  {:<8}  {}\n", "rank",
                          "t (s)", "windows", "methods", "subsys", "main reason / claim");
    auto& findings = findings_by_path[l.path];
    for (size_t rank = 0; rank < ranked.size(); ++rank) {
      const RevealAnomaly& a = *ranked[rank];
      Finding f;
      f.detector = "reveal";
      f.layer = "host";
      f.subsystem = std::string(subsystem_name(a.subsystem));
      f.host = l.host;
      f.subject = a.reasons.empty() ? "" : a.reasons.front().subject;
      f.t_start_ns = window(a.first_window).start_ns;
      f.t_end_ns = window(a.last_window).end_ns;
      f.score = a.score;
      std::string also;
      for (const auto& [subsystem, share] : secondary_subsystems(a))
        also += fmt::format("{}{} {:.0f}%", also.empty() ? "; also " : ", ", subsystem_name(subsystem), 100 * share);
      f.summary = fmt::format("{} incident in windows {}-{} ({} flagged; {}{}): {}", f.subsystem, a.first_window,
                              a.last_window, a.flagged_windows, reveal_methods_label(a.methods), also,
                              a.reasons.empty() ? "" : a.reasons.front().claim);
      for (const Contribution& c : a.reasons)
        f.evidence.push_back({c.subject, std::string(window_feature_name(c.feature)), c.value, c.expected, c.z});
      text += fmt::format("  {:>4}  {:>4.0f}-{:<4.0f}  {:>7}  {:<12}  {:<8}  {}\n", rank + 1,
                          (f.t_start_ns - l.span.begin) / 1e9, (f.t_end_ns - l.span.begin) / 1e9, a.flagged_windows,
                          reveal_methods_label(a.methods), f.subsystem,
                          a.reasons.empty() ? "" : a.reasons.front().claim);
      findings.push_back(std::move(f));
    }
    nlohmann::json jrec = {{"recording", l.path}, {"host", l.host}, {"windows", analysis.windows},
                           {"feature_columns", analysis.columns.size()}, {"detector_columns", detector_columns},
                           {"too_short", res.too_short && !res.no_detector_columns},
                           {"no_detector_columns", res.no_detector_columns},
                           {"fit_windows", analysis.fit_windows}, {"fit_on_sample", analysis.fit_on_sample},
                           {"incidents", res.anomalies.size()}, {"unconfirmed_incidents", res.unconfirmed_incidents},
                           {"min_incident_windows", pipeline_options.min_incident_windows},
                           {"min_reason_z", pipeline_options.min_reason_z},
                           {"baseline_s", baseline_ns ? *baseline_ns / 1e9 : 0.0},
                           {"thresholds", {{"z", res.ensemble.z_threshold}, {"maha", res.ensemble.maha_threshold},
                                           {"iforest", res.ensemble.iforest_threshold}}},
                           {"flagged_windows", jwin}, {"dropped_out_of_order", analysis.dropped_out_of_order}};
    auto as_list = [](const Eigen::VectorXd& v) { return std::vector<double>(v.data(), v.data() + v.size()); };
    if (analysis.windows <= kMaxWindowScoresInJson) {
      jrec["window_scores"] = as_list(res.ensemble.score);
      jrec["z_scores"] = as_list(res.ensemble.z);
      jrec["maha_scores"] = as_list(res.ensemble.maha);
      jrec["iforest_scores"] = as_list(res.ensemble.iforest);
    }
    jrecs.push_back(std::move(jrec));
  }

  // Cross-host: hosts whose level of a metric persistently deviates from the others' (needs 3+ hosts); one
  // finding per deviating host, its metrics as evidence.
  nlohmann::json jcross = nlohmann::json::array(), jhosts = nlohmann::json::array();
  if (recs.size() >= 3) {
    const auto dev = cross_host_deviations(levels);
    const auto reports = cross_host_reports(dev);
    text += fmt::format("\ncross-host ({} hosts): {} deviating host(s), {} metric deviations\n", recs.size(),
                        reports.size(), dev.size());
    for (const HostDeviation& d : dev)
      jcross.push_back({{"host", d.host}, {"metric", d.subject}, {"subsystem", subsystem_name(d.subsystem)},
                        {"level", d.level}, {"cluster_median", d.cluster_median}, {"scale", d.scale},
                        {"robust_z", d.robust_z}, {"persistence", d.persistence}, {"claim", d.claim}});
    for (const HostReport& r : reports) {
      text += "  " + r.claim + "\n";
      nlohmann::json jm = nlohmann::json::array();
      for (const HostDeviation& d : r.metrics) jm.push_back(d.subject);
      jhosts.push_back({{"host", r.host}, {"subsystem", subsystem_name(r.subsystem)}, {"metrics", jm},
                        {"deviating_metrics", r.deviating_metrics}, {"claim", r.claim}});
      for (const Loaded& l : recs) {
        if (l.host != r.host) continue;
        Finding f;
        f.detector = "reveal";
        f.layer = "host";
        f.subsystem = std::string(subsystem_name(r.subsystem));
        f.host = r.host;
        f.subject = r.metrics.front().subject;
        f.t_start_ns = l.span.begin;
        f.t_end_ns = l.span.end;
        f.score = std::min(std::abs(r.metrics.front().robust_z), 1e6);
        f.summary = "cross-host: " + r.claim;
        for (const HostDeviation& d : r.metrics)
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
                       {"start_utc", utc_iso(f.t_start_ns + l.span.realtime_offset)},
                       {"end_utc", utc_iso(f.t_end_ns + l.span.realtime_offset)},
                       {"score", f.score}, {"summary", f.summary}, {"evidence", ev}});
    }
    if (options.store && l.storable) store_findings(l.path, "reveal", fs);
  }
  text += fmt::format("\nreveal findings: {}\n", jfind.size());
  out.text = text;
  out.json = {{"available", true}, {"window_ns", spec.size_ns}, {"stride_ns", spec.stride_ns},
              {"window_sized_from_interval", sized},
              {"sampling_interval_ns", interval_ns ? nlohmann::json(*interval_ns) : nlohmann::json(nullptr)},
              {"window_warning", window_warning}, {"pruning", jpruning},
              {"recordings", jrecs}, {"cross_host", jcross}, {"cross_host_hosts", jhosts}, {"findings", jfind}};
  return out;
}

}  // namespace
}  // namespace stackscope::cli

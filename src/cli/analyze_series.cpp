// `stackscope analyze --detector series` (and the default for imported tables): every host series alone through
// the causal series detector (analyze/reveal/host_series_scan.h), binned by the stride sized from the sampling
// interval (cli/series_sizing.h). One finding per episode of one series, from its first bin to its last, with its
// UTC start and end so it maps back to the rows of the user's CSV.
#include <fmt/format.h>

#include <ctime>
#include <filesystem>

#include "analyze/reveal/host_series_scan.h"
#include "cli/analyze.h"
#include "cli/series_sizing.h"
#include "store/recording_reader.h"
#include "store/recording_sampling_interval.h"

namespace stackscope::cli {

std::string utc_iso(int64_t realtime_ns) {
  const auto secs = static_cast<std::time_t>(realtime_ns / 1'000'000'000);
  const int ms = static_cast<int>((realtime_ns / 1'000'000) % 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                     tm.tm_hour, tm.tm_min, tm.tm_sec, ms);
}

namespace {

using namespace stackscope::analyze;

std::string amount(double v, const std::string& unit, bool rate) {
  std::string u = unit == "bytes" ? "B" : unit;
  std::string s = fmt::format("{:.4g}", v);
  if (!u.empty()) s += (u == "B" ? "" : " ") + u;
  return rate ? s + "/s" : s;
}

}  // namespace

AnalysisOutput analyze_series(const AnalyzeOptions& options) {
  AnalysisOutput out;
  HostSeriesScanOptions scan;
  if (options.series_threshold >= 0) scan.detector.threshold = options.series_threshold;
  nlohmann::json jrecs = nlohmann::json::array(), jfind = nlohmann::json::array();
  std::string text = "== series (each host series against its own recent range, causal) ==\n";
  for (const std::string& path : options.recordings) {
    RecordingReader reader(path);
    const RecordingSummary sum = reader.summary();
    const int64_t begin = sum.start_ns;
    const int64_t end = std::max(sum.closed_cleanly ? sum.end_ns : 0, sum.last_data_ns);
    const auto interval = recording_sampling_interval(reader);
    std::string warning;
    WindowSpec spec;
    try {
      spec = resolve_window_spec(options.reveal_window, options.reveal_stride, interval, end - begin, warning);
    } catch (const std::invalid_argument& e) {
      out.text = fmt::format("series: {}\n", e.what());
      out.json = {{"error", out.text}};
      out.status = 2;
      return out;
    }
    SampleStream stream;
    stream.series = reader.series();
    stream.begin_ns = begin;
    stream.end_ns = end;
    stream.replay = [&reader](const SampleRunVisitor& visit) { reader.for_each_sample_run(visit); };
    const std::vector<HostSeriesFinding> found = scan_host_series(stream, spec.stride_ns, scan);
    std::string host = reader.meta_or("host", "");
    if (host.empty() && !stream.series.empty()) host = stream.series.front().host;
    if (host.empty()) host = std::filesystem::path(path).stem().string();
    text +=
        fmt::format("{} (host {}): bins of {}{}, {} finding(s)\n", path, host, format_duration(spec.stride_ns),
                    interval ? " (sampling interval " + format_duration(*interval) + ")" : std::string(), found.size());
    std::vector<Finding> findings;
    for (const HostSeriesFinding& h : found) {
      const SeriesInfo& s = stream.series[h.series];
      const NoveltySpan& sp = h.span;
      Finding f;
      f.detector = "series";
      f.layer = "host";
      f.subsystem = std::string(subsystem_name(s.subsystem));
      f.host = host;
      f.subject = s.key();
      f.t_start_ns = h.start_ns;
      f.t_end_ns = h.end_ns;
      f.score = sp.score;
      f.summary = fmt::format("{}: {} {} {} its recent range {} .. {} for {}{}", s.key(),
                              novelty_view_description(sp.view, scan.detector),
                              amount(sp.value, s.unit, h.rate), sp.above ? "above" : "below",
                              amount(sp.range_low, s.unit, h.rate), amount(sp.range_high, s.unit, h.rate),
                              format_duration(h.end_ns - h.start_ns),
                              sp.absorbed ? " (then taken as the new normal)" : "");
      f.evidence.push_back({s.key(), std::string(novelty_view_name(sp.view)), sp.value,
                            sp.above ? sp.range_high : sp.range_low, sp.score});
      text += fmt::format("  {}  {:>9.0f}-{:<9.0f}  {:<8}  {}\n", utc_iso(h.start_ns + sum.realtime_offset_ns),
                          (h.start_ns - begin) / 1e9, (h.end_ns - begin) / 1e9, f.subsystem, f.summary);
      jfind.push_back({{"detector", "series"},
                       {"recording", path},
                       {"host", host},
                       {"subsystem", f.subsystem},
                       {"subject", f.subject},
                       {"view", novelty_view_name(sp.view)},
                       {"direction", sp.above ? "above" : "below"},
                       {"t_start_ns", h.start_ns},
                       {"t_end_ns", h.end_ns},
                       {"t_start_s", (h.start_ns - begin) / 1e9},
                       {"t_end_s", (h.end_ns - begin) / 1e9},
                       {"start_utc", utc_iso(h.start_ns + sum.realtime_offset_ns)},
                       {"end_utc", utc_iso(h.end_ns + sum.realtime_offset_ns)},
                       {"score", sp.score},
                       {"value", sp.value},
                       {"range_low", sp.range_low},
                       {"range_high", sp.range_high},
                       {"per_second", h.rate},
                       {"absorbed", sp.absorbed},
                       {"summary", f.summary}});
      findings.push_back(std::move(f));
    }
    if (!warning.empty()) text += "  warning: " + warning + "\n";
    jrecs.push_back({{"recording", path},
                     {"host", host},
                     {"bin_ns", spec.stride_ns},
                     {"sampling_interval_ns", interval ? nlohmann::json(*interval) : nlohmann::json(nullptr)},
                     {"findings", found.size()},
                     {"window_warning", warning}});
    if (options.store) store_findings(path, "series", findings);
  }
  out.text = text;
  out.json = {{"available", true}, {"threshold", scan.detector.threshold}, {"recordings", jrecs}, {"findings", jfind}};
  return out;
}

}  // namespace stackscope::cli

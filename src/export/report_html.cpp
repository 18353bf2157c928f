#include "export/report_html.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <regex>
#include <stdexcept>

#include "export/layer_summary.h"
#include "export/straggler_html.h"
#include "export/svg_plot.h"

namespace stackscope {

namespace {

using namespace analyze::incidents;
using svg::escape;

const char* const kIncidentColour = "#d62728";
const char* const kPhaseColour = "#7f7f7f";

std::string utc(int64_t realtime_ns) {
  const auto secs = static_cast<std::time_t>(realtime_ns / 1'000'000'000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  return fmt::format("{:04}-{:02}-{:02} {:02}:{:02}:{:02} UTC", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
                     tm.tm_min, tm.tm_sec);
}

std::string duration_text(double s) {
  if (!std::isfinite(s)) return "-";
  if (s >= 3600) return fmt::format("{:.0f} h {:02.0f} min", std::floor(s / 3600), std::fmod(s, 3600) / 60);
  if (s >= 120) return fmt::format("{:.0f} min {:02.0f} s", std::floor(s / 60), std::fmod(s, 60));
  if (s >= 1) return fmt::format("{:.1f} s", s);
  if (s >= 1e-3) return fmt::format("{:.1f} ms", s * 1e3);
  return fmt::format("{:.1f} us", s * 1e6);
}

std::string number(double v) {
  if (!std::isfinite(v)) return "-";
  return fmt::format("{:.4g}", v);
}

std::string bytes_text(double b) {
  const svg::AxisUnit u = svg::readable_unit("bytes", b);
  return fmt::format("{:.3g} {}", b / u.divisor, u.label);
}

// The recording's time axis: seconds since its data began.
struct Clock {
  int64_t t0 = 0;
  double s(int64_t t) const { return static_cast<double>(t - t0) * 1e-9; }
};

// Window mid-points, in seconds since t0.
std::vector<double> window_times(const analyze::WindowGrid& g, const Clock& c) {
  std::vector<double> x(g.count);
  for (size_t i = 0; i < g.count; ++i) x[i] = c.s(g.start(i) + g.width_ns / 2);
  return x;
}

std::vector<svg::Band> incident_bands(const IncidentReport& rep, const Clock& c, bool phases) {
  std::vector<svg::Band> out;
  if (phases)
    for (const Phase& p : rep.phases)
      out.push_back({c.s(p.start_ns), c.s(p.end_ns), std::string(phase_kind_name(p.kind)), kPhaseColour, 0.12});
  for (const Incident& inc : rep.incidents)
    out.push_back({c.s(inc.start_ns), c.s(inc.end_ns), fmt::format("#{} {}", inc.id, cause_class_name(inc.cause.cls)),
                   kIncidentColour, 0.2});
  return out;
}

// Column `name` of a window table, or nothing.
std::optional<std::vector<double>> column(const analyze::WindowFeatureTable& t, const std::string& name) {
  auto it = std::find(t.columns.begin(), t.columns.end(), name);
  if (it == t.columns.end()) return std::nullopt;
  const auto c = static_cast<Eigen::Index>(it - t.columns.begin());
  std::vector<double> v(static_cast<size_t>(t.values.rows()));
  for (Eigen::Index r = 0; r < t.values.rows(); ++r) v[static_cast<size_t>(r)] = t.values(r, c);
  return v;
}

// `head` empty: no header row (a key-value table).
std::string table_html(const std::vector<std::string>& head, const std::vector<std::vector<std::string>>& rows,
                       const std::string& cls = "") {
  std::string h = cls.empty() ? "<table>" : "<table class=\"" + cls + "\">";
  if (!head.empty()) {
    h += "<tr>";
    for (const auto& c : head) h += "<th>" + escape(c) + "</th>";
    h += "</tr>";
  }
  for (const auto& r : rows) {
    h += "<tr>";
    for (const auto& c : r) h += "<td>" + escape(c) + "</td>";
    h += "</tr>";
  }
  return h + "</table>";
}

// ------------------------------------------------------------------------------------------------ sections

std::string job_section(const ReportRecording& rr, const Clock& clock, const LayerSummary& layers) {
  const RecordingReader& r = *rr.reader;
  const IncidentReport& rep = *rr.incidents;
  const RecordingSummary sum = r.summary();
  std::vector<std::vector<std::string>> rows;
  auto row = [&](const std::string& k, const std::string& v) {
    if (!v.empty()) rows.push_back({k, v});
  };
  row("command", r.meta_or("command"));
  row("host", r.meta_or("host"));
  row("rank", r.meta_or("rank"));
  row("pid", r.meta_or("pid"));
  row("GPUs", r.meta_or("gpu_models").empty() ? "none recorded" : r.meta_or("gpu_models"));
  row("CPU", r.meta_or("cpu_model").empty() ? r.meta_or("cpu_count")
                                            : r.meta_or("cpu_model") + " (" + r.meta_or("cpu_count") + " CPUs)");
  row("recorded", fmt::format("{} to {} ({})", utc(rr.start_ns + rr.realtime_offset_ns),
                              utc(rr.end_ns + rr.realtime_offset_ns), duration_text(clock.s(rr.end_ns))));
  std::string ev;
  for (const auto& [layer, n] : sum.events_by_layer) ev += fmt::format("{}{} {}", ev.empty() ? "" : ", ", layer, n);
  row("events", ev.empty() ? "none" : ev);
  std::string ser;
  for (const auto& [sub, n] : sum.series_by_subsystem) ser += fmt::format("{}{} {}", ser.empty() ? "" : ", ", sub, n);
  row("series", ser.empty() ? "none" : fmt::format("{} ({} samples)", ser, sum.samples));
  std::string drops;
  for (const auto& [src, n] : sum.drops)
    if (n) drops += fmt::format("{}{} {}", drops.empty() ? "" : ", ", src, n);
  row("dropped", drops);
  std::string progress = rep.progress_metric.empty()
                             ? "no progress signal (record an event layer: python, torch, cuda or nccl)"
                             : rep.progress_metric;
  if (rep.steps && std::isfinite(rep.steps->median_ms))
    progress += fmt::format(" ({} steps from {}; step time {:.3g} ms median, {:.3g} ms p95)", rep.steps->steps,
                            rep.steps->source, rep.steps->median_ms, rep.steps->p95_ms);
  row("progress measured by", progress);
  std::string phases;
  for (const Phase& p : rep.phases)
    phases += fmt::format("{}{} {:.0f}-{:.0f} s", phases.empty() ? "" : ", ", phase_kind_name(p.kind), clock.s(p.start_ns),
                          clock.s(p.end_ns));
  row("phases", phases);
  (void)layers;
  return "<section id=\"job\"><h2>The job</h2>" + table_html({}, rows, "kv") + "</section>";
}

std::string verdict_html(const IncidentReport& rep, const Clock& clock) {
  if (rep.incidents.empty())
    return "<p id=\"verdict\" class=\"ok\"><b>No incidents</b>: the job kept its steady pace over the whole run" +
           std::string(rep.progress_metric.empty() ? " (but there was no progress signal to judge it by)" : "") + ".</p>";
  double lost = 0;
  for (const Incident& inc : rep.incidents) lost += inc.impact_s;
  std::string h = fmt::format("<p id=\"verdict\" class=\"bad\"><b>{} incident{}</b>, {} of job time lost in all:</p><ol class=\"verdict\">",
                              rep.incidents.size(), rep.incidents.size() > 1 ? "s" : "", duration_text(lost));
  for (const Incident& inc : rep.incidents)
    h += fmt::format("<li><a href=\"#incident-{}\">#{} {}</a> at {:.0f}-{:.0f} s: {} lost. {}</li>", inc.id, inc.id,
                     escape(std::string(cause_class_name(inc.cause.cls))), clock.s(inc.start_ns), clock.s(inc.end_ns),
                     duration_text(inc.impact_s), escape(inc.summary));
  return h + "</ol>";
}

// The job's progress: units per second per window, its steady rate, and the step time when steps are known.
std::string progress_section(const ReportRecording& rr, const Clock& clock) {
  const IncidentReport& rep = *rr.incidents;
  const IncidentInput& in = *rr.input;
  std::string h = "<section id=\"progress\"><h2>Progress over the run</h2>";
  if (rep.progress_metric.empty() || in.progress.signal.per_window.empty())
    return h + "<p class=\"note\">No progress signal: the recording has no event layer the job's pace can be read from.</p></section>";
  const double width_s = static_cast<double>(in.grid.width_ns) * 1e-9;
  const std::vector<double> x = window_times(in.grid, clock);
  std::vector<double> rate(in.progress.signal.per_window.size());
  for (size_t i = 0; i < rate.size(); ++i) rate[i] = in.progress.signal.per_window[i] / width_s;
  svg::LinePlot p;
  p.title = fmt::format("Job progress: {} per second ({:g} s windows)", rep.progress_metric, width_s);
  p.y_unit = rep.progress_metric + "/s";
  p.lines.push_back({rep.progress_metric + "/s", x, rate, "", false});
  if (rep.steady_per_window > 0)
    p.lines.push_back({"steady pace", {x.front(), x.back()}, {rep.steady_per_window / width_s, rep.steady_per_window / width_s},
                       "#555", true});
  p.bands = incident_bands(rep, clock, true);
  p.x_from_zero = true;
  p.css_class = "plot progress";
  h += svg::line_plot(p);
  if (rep.progress_metric == "steps") {
    std::vector<double> step_ms(rate.size());
    for (size_t i = 0; i < rate.size(); ++i) step_ms[i] = rate[i] > 0 ? 1e3 / rate[i] : NAN;
    svg::LinePlot q;
    q.title = "Step time (a window without a completed step is a gap)";
    q.y_unit = "ms";
    q.lines.push_back({"step time", x, step_ms, "", false});
    if (rep.steps && std::isfinite(rep.steps->median_ms))
      q.lines.push_back({"median", {x.front(), x.back()}, {rep.steps->median_ms, rep.steps->median_ms}, "#555", true});
    q.bands = incident_bands(rep, clock, true);
    q.x_from_zero = true;
    q.css_class = "plot step-time";
    h += svg::line_plot(q);
  }
  h += "<p class=\"note\">Red: incidents (numbered as below). Grey: normal phases of a job (start-up, warm-up, "
       "checkpoints, shutdown) that are never reported as incidents.</p>";
  return h + "</section>";
}

// Window range around an incident: the episode and as much again on each side (at least 10 windows).
std::pair<size_t, size_t> around(const analyze::WindowGrid& g, const Incident& inc) {
  const auto first = g.index_of(inc.start_ns).value_or(0);
  const auto last = g.index_of(inc.end_ns - 1).value_or(g.count ? g.count - 1 : 0);
  const size_t pad = std::max<size_t>(10, last - first + 1);
  return {first > pad ? first - pad : 0, std::min(g.count ? g.count - 1 : 0, last + pad)};
}

svg::LinePlot incident_plot(const std::string& title, const std::string& unit, const Incident& inc, const Clock& clock) {
  svg::LinePlot p;
  p.title = title;
  p.y_unit = unit;
  p.width = 460;
  p.height = 230;
  p.bands.push_back({clock.s(inc.start_ns), clock.s(inc.end_ns), fmt::format("#{}", inc.id), kIncidentColour, 0.2});
  p.css_class = "plot evidence";
  return p;
}

std::vector<double> slice(const std::vector<double>& v, std::pair<size_t, size_t> r) {
  if (v.empty() || r.first >= v.size()) return {};
  return {v.begin() + static_cast<std::ptrdiff_t>(r.first),
          v.begin() + static_cast<std::ptrdiff_t>(std::min(v.size() - 1, r.second) + 1)};
}

std::string incident_section(const Incident& inc, const ReportRecording& rr,
                             const std::map<std::string, analyze::WindowFeatureTable>& tables, const Clock& clock) {
  const IncidentInput& in = *rr.input;
  const IncidentReport& rep = *rr.incidents;
  std::string h = fmt::format("<section class=\"incident\" id=\"incident-{}\"><h3>#{} {} <span class=\"conf\">(confidence {:.2f})</span></h3>",
                              inc.id, inc.id, escape(std::string(cause_class_name(inc.cause.cls))), inc.cause.confidence);
  h += fmt::format("<p>{:.1f}-{:.1f} s into the run ({} to {}), <b>{} of job time lost</b>. {}</p>", clock.s(inc.start_ns),
                   clock.s(inc.end_ns), utc(inc.start_ns + rr.realtime_offset_ns), utc(inc.end_ns + rr.realtime_offset_ns),
                   duration_text(inc.impact_s), escape(inc.summary));
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"symptom (the job)", inc.symptom.metric, number(inc.symptom.expected), number(inc.symptom.observed),
                  inc.symptom.unit, ""});
  for (const IncidentEvidence& e : inc.cause.evidence) {
    const std::string dev = std::abs(e.z) > 1000 ? (e.z > 0 ? "far above a flat baseline" : "far below a flat baseline")
                                                  : fmt::format("{:+.1f}", e.z);
    rows.push_back({"evidence (" + e.layer + ")", e.metric, number(e.expected), number(e.observed), e.unit, dev});
  }
  h += table_html({"what", "metric", "steady", "during", "unit", "robust z"}, rows);
  if (!inc.cause.culprits.empty()) {
    std::vector<std::vector<std::string>> cr;
    for (const Culprit& c : inc.cause.culprits)
      cr.push_back({c.kind, c.name, c.pid ? std::to_string(*c.pid) : "", c.share > 0 ? number(c.share) : ""});
    h += "<p><b>Culprit" + std::string(inc.cause.culprits.size() > 1 ? "s" : "") + "</b></p>" +
         table_html({"kind", "name", "pid", "share"}, cr);
  }
  std::string layers;
  for (const auto& l : inc.layers) layers += (layers.empty() ? "" : ", ") + l;
  std::string also;
  for (CauseClass c : inc.also) also += (also.empty() ? "" : ", ") + std::string(cause_class_name(c));
  h += fmt::format("<p class=\"note\">Layers that moved: {}{}</p>", escape(layers.empty() ? "-" : layers),
                   also.empty() ? "" : "; other causes with some support: " + escape(also));

  // Plots: the symptom, each evidence series, each culprit's own series, around the episode.
  const auto range = around(in.grid, inc);
  const std::vector<double> x = slice(window_times(in.grid, clock), range);
  const double width_s = static_cast<double>(in.grid.width_ns) * 1e-9;
  h += "<div class=\"plots\">";
  if (!in.progress.signal.per_window.empty()) {
    std::vector<double> rate = slice(in.progress.signal.per_window, range);
    for (double& v : rate) v /= width_s;
    auto p = incident_plot("The job: " + rep.progress_metric + " per second", rep.progress_metric + "/s", inc, clock);
    p.lines.push_back({rep.progress_metric + "/s", x, rate, "", false});
    if (rep.steady_per_window > 0 && !x.empty())
      p.lines.push_back({"steady", {x.front(), x.back()}, {rep.steady_per_window / width_s, rep.steady_per_window / width_s},
                         "#555", true});
    h += svg::line_plot(p);
  }
  for (const IncidentEvidence& e : inc.cause.evidence) {
    auto t = tables.find(e.layer);
    if (t == tables.end()) continue;
    auto v = column(t->second, e.metric);
    if (!v) continue;
    auto p = incident_plot(e.layer + ": " + e.metric, e.unit, inc, clock);
    p.lines.push_back({e.metric, x, slice(*v, range), "", false});
    if (std::isfinite(e.expected) && !x.empty())
      p.lines.push_back({"steady", {x.front(), x.back()}, {e.expected, e.expected}, "#555", true});
    h += svg::line_plot(p);
  }
  for (const Culprit& c : inc.cause.culprits) {
    if (!c.pid) continue;
    const std::string prefix = fmt::format("pid:{}:", *c.pid);
    for (const EntitySeries& es : in.entities) {
      if (es.device.rfind(prefix, 0) != 0 && es.device.find(fmt::format("/pid{}", *c.pid)) == std::string::npos) continue;
      // proc.cpu.util: CPUs used; gpu.proc.sm_util / mem_util: a ratio; gpu.proc.mem.used: bytes.
      const std::string unit = es.name.rfind("proc.cpu", 0) == 0 ? "CPUs"
                               : es.name.find("mem.used") != std::string::npos ? "bytes"
                                                                               : "ratio";
      const std::string who = c.name == fmt::format("pid {}", *c.pid) ? c.name : fmt::format("{} (pid {})", c.name, *c.pid);
      auto p = incident_plot("culprit " + who + ": " + es.name, unit, inc, clock);
      p.lines.push_back({es.name, x, slice(es.values, range), "", false});
      h += svg::line_plot(p);
    }
  }
  return h + "</div></section>";
}

std::string incidents_section(const ReportRecording& rr, const std::map<std::string, analyze::WindowFeatureTable>& tables,
                              const Clock& clock) {
  const IncidentReport& rep = *rr.incidents;
  std::string h = "<section id=\"incidents\"><h2>Incidents</h2>";
  if (rep.incidents.empty()) return h + "<p class=\"ok\">No incidents.</p></section>";
  for (const Incident& inc : rep.incidents) h += incident_section(inc, rr, tables, clock);
  return h + "</section>";
}

std::string name_table(const std::string& caption, const std::vector<NameTotal>& rows, const std::string& time_head,
                       bool with_bytes = false) {
  if (rows.empty()) return "";
  double total = 0;
  for (const auto& n : rows) total += n.total_ns;
  std::vector<std::vector<std::string>> out;
  for (const auto& n : rows) {
    std::vector<std::string> r{n.name, std::to_string(n.count), duration_text(n.total_ns * 1e-9),
                               total > 0 ? fmt::format("{:.1f} %", 100 * n.total_ns / total) : ""};
    if (with_bytes) {
      r.push_back(n.bytes > 0 ? bytes_text(n.bytes) : "");
      r.push_back(n.bytes > 0 && n.total_ns > 0 ? fmt::format("{:.3g} GB/s", n.bytes / n.total_ns) : "");
    }
    out.push_back(std::move(r));
  }
  std::vector<std::string> head{"name", "calls", time_head, "share of listed"};
  if (with_bytes) {
    head.push_back("bytes");
    head.push_back("bytes / call time");
  }
  return "<h3>" + escape(caption) + "</h3>" + table_html(head, out, "names");
}

// Per-window plots of sampled series from the engine's tables: one line per device.
std::string series_plot(const std::map<std::string, analyze::WindowFeatureTable>& tables, const std::string& layer,
                        const std::regex& re, const std::string& title, const std::string& unit, const ReportRecording& rr,
                        const Clock& clock, const std::string& cls, double scale = 1, bool from_log10 = false) {
  auto t = tables.find(layer);
  if (t == tables.end()) return "";
  svg::LinePlot p;
  p.title = title;
  p.y_unit = unit;
  p.css_class = "plot " + cls;
  p.height = 220;
  p.x_from_zero = true;
  const std::vector<double> x = window_times(t->second.grid, clock);
  for (size_t c = 0; c < t->second.columns.size(); ++c) {
    std::smatch m;
    if (!std::regex_match(t->second.columns[c], m, re)) continue;
    std::vector<double> v(static_cast<size_t>(t->second.values.rows()));
    for (size_t r = 0; r < v.size(); ++r) {
      const double x = t->second.values(static_cast<Eigen::Index>(r), static_cast<Eigen::Index>(c));
      v[r] = (from_log10 ? std::pow(10.0, x) : x) * scale;
    }
    p.lines.push_back({m.size() > 1 && m[1].matched ? m[1].str() : t->second.columns[c], x, std::move(v), "", false});
    if (p.lines.size() >= 8) break;
  }
  if (p.lines.empty()) return "";
  p.bands = incident_bands(*rr.incidents, clock, false);
  return svg::line_plot(p);
}

std::string layers_section(const ReportRecording& rr, const LayerSummary& ls,
                           const std::map<std::string, analyze::WindowFeatureTable>& tables, const Clock& clock) {
  std::string h = "<section id=\"layers\"><h2>Where the time went, layer by layer</h2>";
  std::string gpu;
  gpu += series_plot(tables, "nvml", std::regex(R"((gpu\d+)\.gpu\.util\.mean)"), "GPU utilisation", "%", rr, clock,
                     "gpu-util", 100);
  gpu += series_plot(tables, "nvml", std::regex(R"((gpu\d+)\.gpu\.mem\.used\.mean)"), "GPU memory used", "bytes", rr,
                     clock, "gpu-mem");
  gpu += series_plot(tables, "nvml", std::regex(R"((gpu\d+)\.gpu\.power\.mean)"), "GPU power", "W", rr, clock, "gpu-power");
  h += "<div id=\"gpu\"><h3>GPUs</h3>" +
       (gpu.empty() ? std::string("<p class=\"note\">No GPU series in this recording (nvml layer not recorded or no GPU).</p>")
                    : gpu) +
       "</div>";
  std::string host;
  host += series_plot(tables, "host", std::regex(R"((cpu)\.busy_fraction)"), "Host CPU busy (all CPUs)", "%", rr, clock,
                      "host-cpu", 100);
  host += series_plot(tables, "host", std::regex(R"(proc\.cpu\.(traced_util|others_util)\.mean)"),
                      "CPUs used: the job against every other process", "CPUs", rr, clock, "host-procs");
  host += series_plot(tables, "host", std::regex(R"(mem\.(MemAvailable)\.mean)"), "Host memory available", "bytes", rr,
                      clock, "host-mem");
  if (!host.empty()) h += "<div id=\"host\"><h3>Host</h3>" + host + "</div>";

  std::string names;
  names += name_table("CUDA kernels launched (host enqueue time, not GPU time)", ls.kernels, "enqueue time");
  names += name_table("CUDA API calls (host time)", ls.cuda_calls, "host time");
  names += name_table("PyTorch operators (inclusive time)", ls.torch_ops, "time");
  names += name_table(ls.python_sampled ? "Python functions on CPU (stack samples, by leaf function)"
                                        : "Python functions (inclusive time)",
                      ls.python_functions, ls.python_sampled ? "sampled CPU time" : "time");
  names += name_table("Python functions where threads blocked (off-CPU samples)", ls.python_blocked, "blocked time");
  names += name_table("NCCL calls (host time of the call; bytes per second of that time)", ls.nccl, "call time", true);
  h += names.empty() ? "<p class=\"note\">No traced call layer (cuda, torch, python, nccl) in this recording.</p>" : names;
  if (!ls.nccl.empty())
    h += series_plot(tables, "nccl", std::regex(R"((.+)\.median_log10_bw_Bps)"),
                     "NCCL: bytes per second of call time (median per window)", "bytes/s", rr, clock, "nccl-bw", 1, true);
  return h + "</section>";
}

std::string notes_section(const RecordingReader& r) {
  const auto notes = r.notes();
  if (notes.empty()) return "";
  std::string h = fmt::format("<details id=\"notes\"><summary>Recorder notes ({})</summary><ul>", notes.size());
  for (size_t i = 0; i < notes.size() && i < 200; ++i)
    h += "<li><code>" + escape(notes[i].source) + "</code> " + escape(notes[i].text) + "</li>";
  return h + "</ul></details>";
}

// A few lines of script: the page checks that it drew (every plot has a size and either a line or "no data"),
// says so in the console if not, and marks <body data-checked>, which the headless test reads from the DOM.
constexpr const char* kSelfCheck = R"(<script>
(function () {
  var bad = 0;
  document.querySelectorAll('svg.plot').forEach(function (s) {
    var box = s.getBoundingClientRect();
    if (!(box.width > 0 && box.height > 0)) { bad++; console.error('plot without size: ' + s.getAttribute('aria-label')); }
    if (!s.querySelector('path.line, circle') && s.textContent.indexOf('no data') < 0) {
      bad++; console.error('plot without a line: ' + s.getAttribute('aria-label'));
    }
  });
  document.body.setAttribute('data-checked', bad ? 'errors' : 'ok');
})();
</script>)";

constexpr const char* kStyle = R"(<style>
body{font-family:-apple-system,'Segoe UI',Helvetica,Arial,sans-serif;margin:24px auto;max-width:1000px;color:#222;padding:0 16px}
h1{font-size:22px}h2{font-size:18px;margin-top:30px;border-bottom:1px solid #ddd;padding-bottom:4px}h3{font-size:15px;margin:18px 0 6px}
table{border-collapse:collapse;font-size:12px;margin:6px 0}td,th{border:1px solid #ddd;padding:3px 7px;text-align:left;vertical-align:top}
th{background:#f4f4f4}table.kv td:first-child{font-weight:bold;white-space:nowrap}table.names td{max-width:520px;word-break:break-all}
.note{color:#666;font-size:12px}.ok{color:#1a7f37}.bad{color:#b42318}.conf{font-weight:normal;color:#666;font-size:13px}
.incident{border-left:4px solid #d62728;padding-left:12px;margin:18px 0}.plots{display:flex;flex-wrap:wrap;gap:8px}
svg{display:block;margin:6px 0}.recording{margin-top:40px}nav a{margin-right:12px}
</style>)";

}  // namespace

std::string report_html(const std::vector<ReportRecording>& recordings, const ReportOptions& options) {
  if (recordings.empty()) throw std::invalid_argument("no recording to report on");
  for (const auto& rr : recordings)
    if (!rr.reader || !rr.input || !rr.incidents) throw std::invalid_argument("a recording of the report lacks its analysis");
  std::string h = fmt::format("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title>{}</head><body>",
                              escape(options.title), kStyle);
  h += "<h1>" + escape(options.title) + "</h1>";
  if (recordings.size() > 1) {
    h += "<nav>";
    for (size_t i = 0; i < recordings.size(); ++i)
      h += fmt::format("<a href=\"#rec-{}\">{}</a>", i,
                       escape(std::filesystem::path(recordings[i].reader->path()).filename().string()));
    if (options.stragglers || !options.stragglers_note.empty()) h += "<a href=\"#stragglers\">stragglers</a>";
    h += "</nav>";
  }
  for (size_t i = 0; i < recordings.size(); ++i) {
    const ReportRecording& rr = recordings[i];
    const Clock clock{rr.start_ns};
    // The engine's tables plus the derived columns its rules read (evidence may name one of those).
    std::map<std::string, analyze::WindowFeatureTable> tables = rr.input->layers;
    add_derived_columns(tables, rr.input->entities, rr.input->job_pids);
    const LayerSummary ls = summarise_layers(*rr.reader, options.top);
    std::string body = verdict_html(*rr.incidents, clock) + job_section(rr, clock, ls) + progress_section(rr, clock) +
                       incidents_section(rr, tables, clock) + layers_section(rr, ls, tables, clock) +
                       notes_section(*rr.reader);
    if (recordings.size() > 1) {
      // Several recordings: element ids and the links to them get the recording's number, so they stay unique.
      static const std::regex ids(R"~((\sid="|href="#)([A-Za-z0-9_-]+)")~");
      body = std::regex_replace(body, ids, "$1$2-r" + std::to_string(i) + "\"");
    }
    h += fmt::format("<div class=\"recording\" id=\"rec-{}\">", i);
    if (recordings.size() > 1) h += "<h2>" + escape(rr.reader->path()) + "</h2>";
    else h += "<p class=\"note\">Recording: <code>" + escape(rr.reader->path()) + "</code></p>";
    h += body + "</div>";
  }
  if (options.stragglers) {
    h += "<section id=\"stragglers\"><h2>Stragglers across ranks (KAIR)</h2>" + straggler_html_body(*options.stragglers) +
         "</section>";
  } else if (!options.stragglers_note.empty()) {
    h += "<section id=\"stragglers\"><h2>Stragglers across ranks</h2><p class=\"note\">" + escape(options.stragglers_note) +
         "</p></section>";
  }
  h += "<p class=\"note\">Made by stackscope report. Times are seconds since each recording's first data; UTC from the "
       "recorder's clock offset.</p>";
  h += kSelfCheck;
  h += "</body></html>\n";
  return h;
}

}  // namespace stackscope

#include "export/incident_report.h"

#include <algorithm>
#include <cmath>
#include <ctime>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace stackscope {
namespace {

using namespace analyze::incidents;

std::string utc(int64_t realtime_ns, bool iso) {
  const auto secs = static_cast<std::time_t>(realtime_ns / 1'000'000'000);
  const int ms = static_cast<int>((realtime_ns / 1'000'000) % 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  if (!iso) return fmt::format("{:02}:{:02}:{:02}", tm.tm_hour, tm.tm_min, tm.tm_sec);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                     tm.tm_hour, tm.tm_min, tm.tm_sec, ms);
}

nlohmann::json number_or_null(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

std::string subsystem_of(CauseClass c) {
  switch (c) {
    case CauseClass::cpu_interference:
    case CauseClass::host_stall: return "cpu";
    case CauseClass::gpu_contention:
    case CauseClass::gpu_throttling:
    case CauseClass::pcie_pressure: return "gpu";
    case CauseClass::network:
    case CauseClass::collective_slowdown: return "network";
    case CauseClass::memory_pressure: return "memory";
    case CauseClass::storage_stall: return "storage";
    default: return "software";
  }
}

}  // namespace

RenderedIncidentReport render_incident_report(const std::string& path, const RecordingIncidentInput& rin,
                                              const analyze::incidents::IncidentReport& rep, double window_s,
                                              bool verbose) {
  const int64_t t0 = rin.start_ns;
  const double seconds = static_cast<double>(rin.end_ns - rin.start_ns) * 1e-9;
  auto rel = [&](int64_t t) { return static_cast<double>(t - t0) * 1e-9; };
  auto iso = [&](int64_t t) { return utc(t + rin.realtime_offset_ns, true); };

  nlohmann::json job = {{"progress_metric", rep.progress_metric.empty() ? nlohmann::json(nullptr)
                                                                        : nlohmann::json(rep.progress_metric)},
                        {"steps", nullptr},
                        {"step_time_ms", {{"median", nullptr}, {"p95", nullptr}}}};
  if (rep.steps) {
    job["steps"] = rep.steps->steps;
    job["step_time_ms"] = {{"median", number_or_null(rep.steps->median_ms)}, {"p95", number_or_null(rep.steps->p95_ms)}};
    job["step_source"] = rep.steps->source;
  }
  nlohmann::json phases = nlohmann::json::array();
  for (const Phase& p : rep.phases)
    phases.push_back({{"kind", phase_kind_name(p.kind)}, {"start_s", rel(p.start_ns)}, {"end_s", rel(p.end_ns)},
                      {"start_utc", iso(p.start_ns)}, {"end_utc", iso(p.end_ns)}, {"note", p.note}});
  nlohmann::json incidents = nlohmann::json::array();
  for (const Incident& inc : rep.incidents) incidents.push_back(incident_json(inc, t0, rin.realtime_offset_ns));

  RenderedIncidentReport out;
  out.json = {{"path", path},
              {"host", rin.host},
              {"start_utc", iso(t0)},
              {"seconds", seconds},
              {"job", job},
              {"phases", phases},
              {"incidents", incidents},
              {"healthy", rep.incidents.empty()}};

  // Text: the phases in one clause.
  // A drifting job can have many variation stretches: past three they are one clause (--verbose lists each).
  std::string phase_list;
  const auto variations = std::count_if(rep.phases.begin(), rep.phases.end(),
                                        [](const Phase& p) { return p.kind == PhaseKind::variation; });
  bool variations_listed = false;
  for (const Phase& p : rep.phases) {
    if (p.kind == PhaseKind::variation && variations > 3) {
      if (variations_listed) continue;
      variations_listed = true;
      phase_list += fmt::format("{}{} x variation (the job's own speed, no cause)", phase_list.empty() ? "" : ", ",
                                variations);
      continue;
    }
    phase_list += fmt::format("{}{} {:.0f}-{:.0f} s", phase_list.empty() ? "" : ", ", phase_kind_name(p.kind),
                              rel(p.start_ns), rel(p.end_ns));
  }
  const std::string phases_text =
      rep.phases.empty() ? "" : fmt::format(", {} phase{}: {}", rep.phases.size(), rep.phases.size() > 1 ? "s" : "", phase_list);
  std::string progress_text =
      rep.progress_metric.empty()
          ? "no progress signal to judge the job by: record an event layer such as python, torch, cuda or nccl"
          : "progress: " + rep.progress_metric;
  if (rep.steps && std::isfinite(rep.steps->median_ms))
    progress_text += fmt::format(", step {:.3g} ms median, {:.3g} ms p95", rep.steps->median_ms, rep.steps->p95_ms);
  if (rep.incidents.empty()) {
    out.text = fmt::format("{}: no incidents ({:.0f} s, {}{})\n", path, seconds, progress_text, phases_text);
  } else {
    out.text = fmt::format("{}: {} incident{} in {:.0f} s ({}{})\n", path, rep.incidents.size(),
                           rep.incidents.size() > 1 ? "s" : "", seconds, progress_text, phases_text);
    for (const Incident& inc : rep.incidents) {
      out.text += fmt::format("#{} {} (confidence {:.2f})  {:.1f}-{:.1f} s ({}-{} UTC), {:.1f} s of job time lost\n",
                              inc.id, cause_class_name(inc.cause.cls), inc.cause.confidence, rel(inc.start_ns),
                              rel(inc.end_ns), utc(inc.start_ns + rin.realtime_offset_ns, false),
                              utc(inc.end_ns + rin.realtime_offset_ns, false), inc.impact_s);
      out.text += "   " + inc.summary + "\n";
      for (const Culprit& c : inc.cause.culprits)
        out.text += fmt::format("   culprit: {} {}{}\n", c.kind, c.name, c.pid ? fmt::format(" (pid {})", *c.pid) : "");
      for (const IncidentEvidence& e : inc.cause.evidence) {
        // Past a thousand deviations the figure only says the baseline was flat (often exactly 0): say that.
        const std::string dev = std::abs(e.z) > 1000 ? (e.z > 0 ? "far above a flat baseline" : "far below a flat baseline")
                                                      : fmt::format("{:+.1f} sd", e.z);
        // Qualified by its layer, once: a layer's own summary columns already start with it (python.offcpu_fraction).
        const std::string metric = e.metric.starts_with(e.layer + ".") ? e.metric : e.layer + "." + e.metric;
        out.text += fmt::format("   evidence: {} {:.4g} -> {:.4g} {} ({})\n", metric, e.expected, e.observed, e.unit, dev);
      }
      std::string also;
      for (CauseClass c : inc.also) also += (also.empty() ? "" : ", ") + std::string(cause_class_name(c));
      out.text += fmt::format("   layers that moved: {}{}\n", inc.layers.empty() ? "-" : fmt::format("{}", fmt::join(inc.layers, ", ")),
                              also.empty() ? "" : "; also supported: " + also);
    }
  }
  if (verbose) {
    out.text += fmt::format("   windows: {} of {:g} s; layers: {}; steady progress {:.4g} {} per window\n", rep.windows,
                            window_s, fmt::join(rep.layers, ", "), rep.steady_per_window,
                            rep.progress_metric);
    for (const auto& c : rin.input.progress.candidates)
      out.text += fmt::format("   progress candidate {}: regularity (robust CV) {:.3f}\n", c.metric, c.regularity_cv);
    for (const Phase& p : rep.phases)
      out.text += fmt::format("   phase {} {:.1f}-{:.1f} s: {}\n", phase_kind_name(p.kind), rel(p.start_ns),
                              rel(p.end_ns), p.note);
  }
  return out;
}

nlohmann::json incident_json(const Incident& inc, int64_t t0, int64_t realtime_offset_ns) {
  auto rel = [&](int64_t t) { return static_cast<double>(t - t0) * 1e-9; };
  auto iso = [&](int64_t t) { return utc(t + realtime_offset_ns, true); };
  nlohmann::json culprits = nlohmann::json::array(), evidence = nlohmann::json::array(), also = nlohmann::json::array();
  for (const Culprit& c : inc.cause.culprits) {
    nlohmann::json j = {{"kind", c.kind}, {"name", c.name}};
    if (c.pid) j["pid"] = *c.pid;
    culprits.push_back(j);
  }
  for (const IncidentEvidence& e : inc.cause.evidence)
    evidence.push_back({{"metric", e.metric}, {"expected", number_or_null(e.expected)},
                        {"observed", number_or_null(e.observed)}, {"unit", e.unit}, {"layer", e.layer},
                        {"z", number_or_null(e.z)}});
  for (CauseClass c : inc.also) also.push_back(cause_class_name(c));
  auto at = [&](const std::optional<int64_t>& t) { return t ? nlohmann::json(rel(*t)) : nlohmann::json(nullptr); };
  return {{"id", inc.id}, {"start_s", rel(inc.start_ns)}, {"end_s", rel(inc.end_ns)}, {"start_utc", iso(inc.start_ns)},
          {"end_utc", iso(inc.end_ns)}, {"start_ns", inc.start_ns}, {"end_ns", inc.end_ns},
          {"detected_at_s", at(inc.detected_at_ns)}, {"cause_at_s", at(inc.cause_at_ns)},
          {"symptom", {{"metric", inc.symptom.metric}, {"expected", number_or_null(inc.symptom.expected)},
                       {"observed", number_or_null(inc.symptom.observed)}, {"unit", inc.symptom.unit}}},
          {"impact_s", inc.impact_s}, {"layers", inc.layers},
          {"cause", {{"class", cause_class_name(inc.cause.cls)}, {"confidence", inc.cause.confidence},
                     {"culprits", culprits}, {"evidence", evidence}}},
          {"also", also}, {"summary", inc.summary}};
}

Finding incident_finding(const Incident& inc, const std::string& host) {
  Finding f;
  f.detector = "incident";
  f.layer = inc.layers.empty() ? "job" : inc.layers.front();
  f.subsystem = subsystem_of(inc.cause.cls);
  f.host = host;
  f.subject = std::string(cause_class_name(inc.cause.cls));
  f.t_start_ns = inc.start_ns;
  f.t_end_ns = inc.end_ns;
  f.score = inc.impact_s;
  f.summary = inc.summary;
  for (const IncidentEvidence& e : inc.cause.evidence) f.evidence.push_back({e.metric, e.layer, e.observed, e.expected, e.z});
  return f;
}

}  // namespace stackscope

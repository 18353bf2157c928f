// `stackscope analyze --detector gmm`: eACGM's per-layer analysis. Wiring only: reads each recording's events
// (and NVML samples) into per-event feature rows (analyze/features/layer_features.h), hands each group to the
// engine (analyze/gmm/layer_gmm.h), stores the findings and prints the report.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "analyze/detectors/detector.h"
#include "analyze/features/layer_features.h"
#include "analyze/gmm/layer_gmm.h"
#include "cli/analyze.h"
#include "store/recording_reader.h"

namespace stackscope::cli {
namespace {

using analyze::FeatureGroup;
using analyze::GroupReport;

const std::set<Layer> kGmmLayers{Layer::cuda, Layer::nccl, Layer::torch, Layer::python, Layer::nvml};

}  // namespace

AnalysisOutput analyze_gmm(const AnalyzeOptions& opt) {
  std::set<Layer> layers;
  if (opt.layers.empty()) {
    layers = kGmmLayers;
  } else {
    for (const auto& name : opt.layers)
      for (Layer l : parse_layer_list(name))
        if (kGmmLayers.count(l)) layers.insert(l);
  }
  AnalysisOutput out;
  out.json = {{"available", true}, {"recordings", nlohmann::json::array()}};
  for (const std::string& path : opt.recordings) {
    RecordingReader reader(path);
    const std::string host = reader.meta_or("host");
    std::vector<Event> events;
    EventFilter filter;
    for (Layer l : layers)
      if (l != Layer::nvml) filter.layers.push_back(l);
    if (!filter.layers.empty()) reader.for_each_event(filter, [&](const Event& e) { events.push_back(e); });
    std::vector<FeatureGroup> groups = analyze::event_feature_groups(events);
    if (layers.count(Layer::nvml)) {
      const bool any_nvml = std::any_of(reader.series().begin(), reader.series().end(),
                                        [](const SeriesInfo& s) { return s.source == "nvml"; });
      if (any_nvml) {
        auto nvml = analyze::nvml_feature_groups(reader.series(), reader.load_samples());
        std::move(nvml.begin(), nvml.end(), std::back_inserter(groups));
      }
    }
    std::vector<Finding> findings;
    std::vector<GroupReport> reports;
    for (const FeatureGroup& g : groups) {
      try {
        reports.push_back(analyze::analyze_layer_group(g, host, findings));
      } catch (const analyze::DetectorInputError& e) {
        GroupReport r;
        r.layer = g.layer;
        r.subject = g.subject;
        r.rows = g.x.rows();
        r.skipped = e.what();
        reports.push_back(r);
      }
    }
    std::sort(findings.begin(), findings.end(), [](const Finding& a, const Finding& b) { return a.score > b.score; });
    if (opt.store) store_findings(path, "gmm", findings);

    const int64_t t0 = reader.summary().start_ns;
    const int64_t realtime_offset = reader.summary().realtime_offset_ns;
    nlohmann::json rj{{"recording", path}, {"stored", opt.store}, {"groups", nlohmann::json::array()}};
    std::map<std::string, std::pair<size_t, size_t>> per_layer;  // items, anomalies
    for (const auto& r : reports) {
      nlohmann::json gj{{"layer", r.layer}, {"subject", r.subject}, {"items", r.rows}, {"anomalies", r.anomalies}};
      if (r.skipped.empty()) {
        gj["components"] = r.components;
        gj["features"] = r.features;
        gj["radius_sd"] = r.radius;
      } else {
        gj["skipped"] = r.skipped;
      }
      rj["groups"].push_back(gj);
      per_layer[r.layer].first += static_cast<size_t>(r.rows);
      per_layer[r.layer].second += r.anomalies;
    }
    nlohmann::json fj = nlohmann::json::array();
    for (const auto& f : findings) {
      nlohmann::json ev = nlohmann::json::array();
      for (const auto& e : f.evidence)
        ev.push_back({{"feature", e.feature}, {"value", e.value}, {"expected", e.expected}, {"deviation_sd", e.score}});
      fj.push_back({{"layer", f.layer}, {"subject", f.subject}, {"t_start_ns", f.t_start_ns}, {"t_end_ns", f.t_end_ns},
                    {"start_utc", utc_iso(f.t_start_ns + realtime_offset)},
                    {"end_utc", utc_iso(f.t_end_ns + realtime_offset)}, {"score", f.score}, {"summary", f.summary},
                    {"evidence", ev}});
    }
    rj["findings"] = fj;
    out.json["recordings"].push_back(rj);

    out.text += fmt::format("== gmm (eACGM, per layer): {}\n", path);
    if (per_layer.empty()) out.text += "  no CUDA, NCCL, Torch, Python events or NVML series to analyse\n";
    for (const auto& [layer, c] : per_layer)
      out.text += fmt::format("  {:<7} {} items, {} anomalous\n", layer, c.first, c.second);
    for (const auto& r : reports)
      if (!r.skipped.empty()) out.text += fmt::format("  {:<7} {}: not modelled ({})\n", r.layer, r.subject, r.skipped);
    const size_t shown = std::min<size_t>(findings.size(), 20);
    for (size_t i = 0; i < shown; ++i)
      out.text += fmt::format("  +{:.6f}s  {}\n", static_cast<double>(findings[i].t_start_ns - t0) * 1e-9,
                              findings[i].summary);
    if (findings.size() > shown) out.text += fmt::format("  ... {} more findings (--json for all)\n", findings.size() - shown);
  }
  return out;
}

}  // namespace stackscope::cli

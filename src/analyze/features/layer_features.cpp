#include "analyze/features/layer_features.h"

#include <algorithm>
#include <cmath>

namespace stackscope::analyze {

namespace {
double log10_floor(double v) { return std::log10(std::max(v, 1.0)); }  // 0 and sub-unit values map to 0

const FeatureColumn kLatency{"log10_latency_ns", "latency_us", true, 1e-3};
const FeatureColumn kBytes{"log10_bytes", "bytes", true, 1};
const FeatureColumn kRate{"log10_calls_per_s", "calls_per_s", true, 1};
const FeatureColumn kBandwidth{"log10_bytes_per_s", "GB_per_s", true, 1e-9};
}  // namespace

double FeatureColumn::to_display(double x) const { return (log10 ? std::pow(10.0, x) : x) * display_scale; }

std::vector<FeatureGroup> event_feature_groups(std::span<const Event> events, const LayerFeatureOptions& opt) {
  // Group by (layer, name), keeping event order (which is time order per recording block).
  std::map<std::pair<Layer, std::string>, std::vector<size_t>> groups;
  for (size_t i = 0; i < events.size(); ++i) {
    const Event& e = events[i];
    if (e.flags & (kEventInstant | kEventUnfinished)) continue;
    groups[{e.layer, e.name}].push_back(i);
  }
  std::vector<FeatureGroup> out;
  for (auto& [key, idx] : groups) {
    std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return events[a].start_ns < events[b].start_ns; });
    FeatureGroup g;
    g.layer = std::string(layer_name(key.first));
    g.subject = key.second;
    const bool nccl = key.first == Layer::nccl;
    const bool has_bytes = std::any_of(idx.begin(), idx.end(), [&](size_t i) { return events[i].arg("bytes"); });
    g.columns.push_back(kLatency);
    if (has_bytes) g.columns.push_back(kBytes);
    if (nccl && has_bytes) g.columns.push_back(kBandwidth);
    if (!nccl) g.columns.push_back(kRate);
    g.x.resize(static_cast<Eigen::Index>(idx.size()), static_cast<Eigen::Index>(g.columns.size()));
    std::vector<int64_t> starts(idx.size());
    for (size_t r = 0; r < idx.size(); ++r) starts[r] = events[idx[r]].start_ns;
    for (size_t r = 0; r < idx.size(); ++r) {
      const Event& e = events[idx[r]];
      const auto row = static_cast<Eigen::Index>(r);
      Eigen::Index c = 0;
      const double dur = static_cast<double>(std::max<int64_t>(e.duration_ns, 1));
      g.x(row, c++) = log10_floor(dur);
      const double bytes = static_cast<double>(std::max<int64_t>(e.arg_int("bytes", 0), 0));
      if (has_bytes) g.x(row, c++) = log10_floor(bytes);
      if (nccl && has_bytes) g.x(row, c++) = log10_floor(bytes / (dur * 1e-9));
      if (!nccl) {
        // Calls in the trailing window, the window clamped to start no earlier than the group's first call: the
        // first calls of a recording do not look like a rate collapse.
        const int64_t lo = std::max(starts.front(), e.start_ns - opt.rate_window_ns);
        const auto first = std::lower_bound(starts.begin(), starts.end(), lo);
        const auto last = std::lower_bound(starts.begin(), starts.end(), lo + opt.rate_window_ns);
        const double calls = static_cast<double>(std::max<std::ptrdiff_t>(last - first, 1));
        g.x(row, c++) = log10_floor(calls * 1e9 / static_cast<double>(opt.rate_window_ns));
      }
      g.t_ns.push_back(e.start_ns);
      g.duration_ns.push_back(e.duration_ns);
      g.source_index.push_back(idx[r]);
    }
    out.push_back(std::move(g));
  }
  return out;
}

std::vector<FeatureGroup> nvml_feature_groups(const std::vector<SeriesInfo>& series, const SeriesSamples& samples) {
  std::map<std::string, std::vector<const SeriesInfo*>> by_device;
  for (const SeriesInfo& s : series) {
    if (s.source != "nvml") continue;
    auto it = samples.find(s.id);
    if (it == samples.end() || it->second.first.empty()) continue;
    by_device[s.device.empty() ? s.host : s.device].push_back(&s);
  }
  std::vector<FeatureGroup> out;
  for (auto& [device, list] : by_device) {
    std::sort(list.begin(), list.end(), [](auto* a, auto* b) { return a->name < b->name; });
    // The densest series gives the row times.
    const SeriesInfo* grid = *std::max_element(list.begin(), list.end(), [&](auto* a, auto* b) {
      return samples.at(a->id).first.size() < samples.at(b->id).first.size();
    });
    const auto& times = samples.at(grid->id).first;
    // A row exists once every series has a value at or before it.
    int64_t start = INT64_MIN;
    for (auto* s : list) start = std::max(start, samples.at(s->id).first.front());
    FeatureGroup g;
    g.layer = "nvml";
    g.subject = device;
    for (auto* s : list) g.columns.push_back({s->name, s->name + (s->unit.empty() ? "" : "_" + s->unit), false, 1});
    std::vector<size_t> cursor(list.size(), 0);
    std::vector<std::vector<double>> rows;
    for (size_t ti = 0; ti < times.size(); ++ti) {
      const int64_t t = times[ti];
      if (t < start) continue;
      std::vector<double> row(list.size());
      for (size_t c = 0; c < list.size(); ++c) {
        const auto& [st, sv] = samples.at(list[c]->id);
        while (cursor[c] + 1 < st.size() && st[cursor[c] + 1] <= t) ++cursor[c];
        row[c] = sv[cursor[c]];
      }
      if (!std::all_of(row.begin(), row.end(), [](double v) { return std::isfinite(v); })) continue;  // a gap
      rows.push_back(std::move(row));
      g.t_ns.push_back(t);
      g.duration_ns.push_back(0);
      g.source_index.push_back(ti);
    }
    g.x.resize(static_cast<Eigen::Index>(rows.size()), static_cast<Eigen::Index>(list.size()));
    for (size_t r = 0; r < rows.size(); ++r)
      for (size_t c = 0; c < list.size(); ++c) g.x(static_cast<Eigen::Index>(r), static_cast<Eigen::Index>(c)) = rows[r][c];
    if (g.x.rows() > 0) out.push_back(std::move(g));
  }
  return out;
}

}  // namespace stackscope::analyze

#include "cli/incident_input.h"

#include <cmath>
#include <map>
#include <memory>
#include <stdexcept>

namespace stackscope::cli {

namespace {

using analyze::incidents::EntitySeries;

// Per-process series kept apart (not carried forward: a process absent from a window used nothing there).
bool is_entity_series(const SeriesInfo& s) {
  return s.name == "proc.cpu.util" || s.name == "gpu.proc.sm_util" || s.name == "gpu.proc.present";
}

// Same grid: the columns of `more` after those of `t`.
void append_columns(analyze::WindowFeatureTable& t, const analyze::WindowFeatureTable& more) {
  const Eigen::Index c0 = t.values.cols();
  t.values.conservativeResize(t.values.rows(), c0 + more.values.cols());
  t.values.rightCols(more.values.cols()) = more.values;
  t.columns.insert(t.columns.end(), more.columns.begin(), more.columns.end());
  t.filled.insert(t.filled.end(), more.filled.begin(), more.filled.end());
  t.subjects.insert(t.subjects.end(), more.subjects.begin(), more.subjects.end());
}

}  // namespace

RecordingIncidentInput read_incident_input(const RecordingReader& r, double window_s) {
  if (!(window_s > 0)) throw std::invalid_argument("the incident window must be > 0 seconds");
  const auto span = r.data_span();
  if (!span) throw std::invalid_argument(r.path() + " holds no events and no samples");
  RecordingIncidentInput out;
  const RecordingSummary summary = r.summary();
  out.realtime_offset_ns = summary.realtime_offset_ns;
  out.start_ns = span->first;
  out.end_ns = span->second;
  out.host = r.meta_or("host");
  auto& in = out.input;
  in.grid = analyze::make_window_grid(span->first, span->second, static_cast<int64_t>(window_s * 1e9));
  if (const std::string pid = r.meta_or("pid"); !pid.empty()) {
    try {
      in.job_pids.insert(static_cast<uint32_t>(std::stoul(pid)));
    } catch (const std::exception&) {
      // a recording of the whole host: no job pid
    }
  }

  // Events: every event layer at once, and the job's progress.
  std::map<Layer, std::unique_ptr<analyze::CallWindowFeatures>> calls;
  analyze::incidents::JobProgressCounter progress(in.grid);
  for (const auto& [layer, n] : summary.events_by_layer) {
    const auto l = parse_layer(layer);
    if (!l || n == 0 || *l == Layer::nvml || *l == Layer::host) continue;
    analyze::CallWindowOptions o;
    if (*l == Layer::cuda) o.always_names = analyze::cuda_sync_and_memory_calls();
    calls[*l] = std::make_unique<analyze::CallWindowFeatures>(*l, in.grid, o);
  }
  if (!calls.empty())
    r.for_each_event({}, [&](const Event& e) {
      if (auto it = calls.find(e.layer); it != calls.end()) it->second->add(e);
      progress.add(e);
      in.job_pids.insert(e.pid);  // a traced process is the job's
    });
  for (auto& [layer, acc] : calls)
    if (acc->events() > 0) in.layers[std::string(layer_name(layer))] = acc->table();
  in.progress = progress.finish();

  // Samples: nvml and host series, and the per-process ones.
  // The kernel layer's counters (source "ebpf": per traced process run-queue wait, block latency, retransmits)
  // are the kernel layer's evidence, apart from the host's procfs series.
  analyze::SeriesWindowFeatures nvml(in.grid, in.job_pids), host(in.grid, in.job_pids), kernel(in.grid, in.job_pids);
  struct Acc {
    std::vector<double> sum;
    std::vector<uint32_t> n;
  };
  std::map<std::pair<std::string, std::string>, Acc> entities;
  r.for_each_sample_run([&](const SeriesInfo& s, std::span<const int64_t> t, std::span<const double> v) {
    if (is_entity_series(s)) {
      Acc& a = entities[{s.name, s.device}];
      if (a.sum.empty()) {
        a.sum.assign(in.grid.count, 0.0);
        a.n.assign(in.grid.count, 0);
      }
      for (size_t i = 0; i < t.size(); ++i)
        if (auto w = in.grid.index_of(t[i]); w && std::isfinite(v[i])) {
          a.sum[*w] += v[i];
          ++a.n[*w];
        }
      // proc.cpu.util has one series per process: kept out of the host table (a column per process)
      if (s.name != "gpu.proc.sm_util") return;
    }
    (s.source == "nvml" ? nvml : s.source == "ebpf" ? kernel : host).add(s, t, v);
  });
  for (auto [name, acc] : {std::pair<const char*, analyze::SeriesWindowFeatures*>{"nvml", &nvml},
                           std::pair<const char*, analyze::SeriesWindowFeatures*>{"host", &host},
                           std::pair<const char*, analyze::SeriesWindowFeatures*>{"kernel", &kernel}})
    if (acc->series() > 0) {
      auto table = acc->table();
      if (table.columns.empty()) continue;
      if (auto it = in.layers.find(name); it != in.layers.end())
        append_columns(it->second, table);  // kernel events and kernel counters: one layer
      else
        in.layers[name] = std::move(table);
    }
  for (auto& [key, a] : entities) {
    EntitySeries e{key.first, key.second, std::vector<double>(in.grid.count, NAN)};
    for (size_t w = 0; w < in.grid.count; ++w)
      if (a.n[w]) e.values[w] = a.sum[w] / a.n[w];
    in.entities.push_back(std::move(e));
  }
  return out;
}

}  // namespace stackscope::cli

#include "analyze/incidents/incident_input_builder.h"

#include <cmath>

namespace stackscope::analyze::incidents {

namespace {

// Per-process series: kept apart as entities.
bool is_entity_series(const SeriesInfo& s) {
  return s.name == "proc.cpu.util" || s.name == "gpu.proc.sm_util" || s.name == "gpu.proc.present";
}

// Same grid: the columns of `more` after those of `t`.
void append_columns(WindowFeatureTable& t, const WindowFeatureTable& more) {
  const Eigen::Index c0 = t.values.cols();
  t.values.conservativeResize(t.values.rows(), c0 + more.values.cols());
  t.values.rightCols(more.values.cols()) = more.values;
  t.columns.insert(t.columns.end(), more.columns.begin(), more.columns.end());
  t.filled.insert(t.filled.end(), more.filled.begin(), more.filled.end());
  t.subjects.insert(t.subjects.end(), more.subjects.begin(), more.subjects.end());
}

}  // namespace

IncidentInputBuilder::IncidentInputBuilder(WindowGrid grid, std::set<uint32_t> job_pids, size_t max_step_ops)
    : grid_(grid), job_pids_(std::move(job_pids)), progress_(grid, {}, max_step_ops) {
  for (Layer l : {Layer::cuda, Layer::nccl, Layer::torch, Layer::python, Layer::kernel}) {
    CallWindowOptions o;
    if (l == Layer::cuda) o.always_names = cuda_sync_and_memory_calls();
    calls_[static_cast<size_t>(l)] = std::make_unique<CallWindowFeatures>(l, grid_, std::move(o));
  }
}

IncidentInputBuilder::~IncidentInputBuilder() = default;

void IncidentInputBuilder::add(const CallRecord& c) {
  auto& acc = calls_[static_cast<size_t>(c.layer)];
  if (!acc) return;
  acc->add(c);
  progress_.add(c);
  ++events_;
  if (c.pid != last_pid_) {  // a traced process is the job's (the same pid runs on: one set lookup per change)
    // Online, the series tables already exist when a launcher's ranks first show up: they learn it too.
    if (job_pids_.insert(c.pid).second)
      for (auto* f : {nvml_.get(), host_.get(), kernel_.get()})
        if (f) f->add_target(c.pid);
    last_pid_ = c.pid;
  }
}

void IncidentInputBuilder::add(const SeriesInfo& s, std::span<const int64_t> t, std::span<const double> v) {
  progress_.add_watching(s.name, t, v);
  if (!host_) {
    nvml_ = std::make_unique<SeriesWindowFeatures>(grid_, job_pids_);
    host_ = std::make_unique<SeriesWindowFeatures>(grid_, job_pids_);
    kernel_ = std::make_unique<SeriesWindowFeatures>(grid_, job_pids_);
  }
  if (is_entity_series(s)) {
    Entity& a = entities_[{s.name, s.device}];
    if (a.sum.empty()) {
      a.sum.assign(grid_.count, 0.0);
      a.n.assign(grid_.count, 0);
    }
    for (size_t i = 0; i < t.size(); ++i)
      if (auto w = grid_.index_of(t[i]); w && std::isfinite(v[i])) {
        a.sum[*w] += v[i];
        ++a.n[*w];
      }
    // proc.cpu.util has one series per process: kept out of the host table (a column per process)
    if (s.name != "gpu.proc.sm_util") return;
  }
  // The kernel layer's counters (source "ebpf": per traced process run-queue wait, block latency, retransmits)
  // are the kernel layer's evidence, apart from the host's procfs series.
  (s.source == "nvml" ? *nvml_ : s.source == "ebpf" ? *kernel_ : *host_).add(s, t, v);
}

IncidentInput IncidentInputBuilder::build(size_t windows, JobProgress progress) const {
  windows = std::min(windows, grid_.count);
  IncidentInput in;
  in.grid = grid_;
  in.grid.count = windows;
  in.job_pids = job_pids_;
  in.progress = std::move(progress);
  for (Layer l : {Layer::cuda, Layer::nccl, Layer::torch, Layer::python, Layer::kernel})
    if (const auto& acc = calls_[static_cast<size_t>(l)]; acc->events() > 0)
      in.layers[std::string(layer_name(l))] = acc->table(windows);  // only the rows in view are built
  if (host_)
    for (auto [name, acc] : {std::pair<const char*, const SeriesWindowFeatures*>{"nvml", nvml_.get()},
                             std::pair<const char*, const SeriesWindowFeatures*>{"host", host_.get()},
                             std::pair<const char*, const SeriesWindowFeatures*>{"kernel", kernel_.get()}}) {
      if (acc->series() == 0) continue;
      auto table = acc->table(windows);
      if (table.columns.empty()) continue;
      if (auto it = in.layers.find(name); it != in.layers.end())
        append_columns(it->second, table);  // kernel events and kernel counters: one layer
      else
        in.layers[name] = std::move(table);
    }
  for (const auto& [key, a] : entities_) {
    EntitySeries e{key.first, key.second, std::vector<double>(windows, NAN)};
    for (size_t w = 0; w < windows; ++w)
      if (a.n[w]) e.values[w] = a.sum[w] / a.n[w];
    in.entities.push_back(std::move(e));
  }
  return in;
}

IncidentInput IncidentInputBuilder::snapshot(size_t windows) const {
  JobProgressCounter progress = progress_;  // finish() is once only
  return build(windows, progress.finish(std::min(windows, grid_.count)));
}

IncidentInput IncidentInputBuilder::finish() { return build(grid_.count, progress_.finish()); }

}  // namespace stackscope::analyze::incidents

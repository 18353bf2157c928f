// Builds the incident engine's input (incident_engine.h) one event and one sample run at a time, on a fixed
// window grid: offline from a recording streamed once (cli/incident_input.cpp), online from the recorder's live
// stream (cli/online_detect.cpp). Memory is O(windows x names), whatever the number of events. Pure: no I/O.
//
// Layout of the input: a table per call layer (cuda, nccl, torch, python, kernel); the nvml series (source
// "nvml"), the kernel layer's counters (source "ebpf", appended to the kernel table) and every other series (host)
// as window features; the per-process series (proc.cpu.util, gpu.proc.*) kept apart as entities, averaged per
// window and not carried forward (a process absent from a window used nothing there; gpu.proc.sm_util is also a
// column of the nvml table); the job's progress; and the job's processes (the given ones and every event's).
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "analyze/features/window_layer_features.h"
#include "analyze/incidents/incident_engine.h"
#include "analyze/incidents/job_progress.h"
#include "model/series.h"

namespace stackscope::analyze::incidents {

class IncidentInputBuilder {
 public:
  // `job_pids`: the job's processes known up front (the recorded command); the series' target processes are
  // these and those of the events added before the first sample run.
  IncidentInputBuilder(WindowGrid grid, std::set<uint32_t> job_pids = {}, size_t max_step_ops = 200'000);
  ~IncidentInputBuilder();
  IncidentInputBuilder(const IncidentInputBuilder&) = delete;
  IncidentInputBuilder& operator=(const IncidentInputBuilder&) = delete;

  void add(const CallRecord& c);  // events of other layers than the call layers are ignored
  void add(const SeriesInfo& series, std::span<const int64_t> t_ns, std::span<const double> values);

  // The input over the first `windows` windows (online: the complete windows so far); the builder goes on.
  IncidentInput snapshot(size_t windows) const;
  // The input over the whole grid; the builder is spent.
  IncidentInput finish();

  const WindowGrid& grid() const { return grid_; }
  uint64_t events() const { return events_; }

 private:
  struct Entity {
    std::vector<double> sum;
    std::vector<uint32_t> n;
  };
  IncidentInput build(size_t windows, JobProgress progress) const;

  WindowGrid grid_;
  std::set<uint32_t> job_pids_;
  uint64_t events_ = 0;
  uint32_t last_pid_ = UINT32_MAX;
  std::array<std::unique_ptr<CallWindowFeatures>, static_cast<size_t>(Layer::kCount)> calls_;
  std::unique_ptr<SeriesWindowFeatures> nvml_, host_, kernel_;  // made at the first sample run
  std::map<std::pair<std::string, std::string>, Entity> entities_;
  JobProgressCounter progress_;
};

}  // namespace stackscope::analyze::incidents

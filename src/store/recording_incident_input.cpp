#include "store/recording_incident_input.h"

#include <stdexcept>

#include "analyze/incidents/incident_input_builder.h"
#include "store/recording_window_tables.h"

namespace stackscope {

RecordingIncidentInput read_incident_input(const RecordingReader& r, double window_s) {
  if (!(window_s > 0)) throw std::invalid_argument("the incident window must be > 0 seconds");
  RecordingIncidentInput out;
  const auto grid = recording_window_grid(r, window_s);
  const auto span = r.data_span();
  out.realtime_offset_ns = r.summary().realtime_offset_ns;
  out.start_ns = span->first;
  out.end_ns = span->second;
  out.host = r.meta_or("host");
  std::set<uint32_t> job_pids;
  if (const std::string pid = r.meta_or("pid"); !pid.empty()) {
    try {
      job_pids.insert(static_cast<uint32_t>(std::stoul(pid)));
    } catch (const std::exception&) {
      // a recording of the whole host: no job pid
    }
  }
  analyze::incidents::IncidentInputBuilder builder(grid, std::move(job_pids));
  // One pass over the event blocks (decoded on a second thread), then one over the sample blocks: the events
  // first, so that the job's processes are known to the series (NVML other_procs).
  stream_call_records(r, {Layer::cuda, Layer::nccl, Layer::torch, Layer::python, Layer::kernel},
                      [&](std::span<const analyze::CallRecord> batch) {
                        for (const analyze::CallRecord& c : batch) builder.add(c);
                      });
  r.for_each_sample_run([&](const SeriesInfo& s, std::span<const int64_t> t, std::span<const double> v) {
    builder.add(s, t, v);
  });
  out.input = builder.finish();
  return out;
}

}  // namespace stackscope

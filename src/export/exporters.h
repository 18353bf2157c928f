// Exporters of recordings to formats other tools read. Each throws RecordingError for a bad recording and
// std::invalid_argument for bad options; none prints anything but the export itself.
#pragma once
#include <ostream>
#include <vector>

#include "export/timeline.h"
#include "store/recording_reader.h"

namespace stackscope {

struct ExportCounts {
  uint64_t slices = 0, instants = 0, counter_points = 0, counter_tracks = 0, flows = 0, rows = 0;
  uint64_t stack_samples = 0, incidents = 0;  // Perfetto: Python callstack samples, incident slices
};

// CSV, one row per event: layer,name,pid,tid,start_ns,duration_ns,flags,args
// (flags "enqueue|instant|unfinished"; args "key=value;..." with '\', ';', '=' escaped by '\').
ExportCounts export_csv_events(const RecordingReader& r, const ExportOptions& options, std::ostream& out);
// CSV, one row per sample: series,host,subsystem,unit,kind,source,t_ns,value (rows grouped by series;
// derived series, source "derived", after the recorded ones).
ExportCounts export_csv_samples(const RecordingReader& r, const ExportOptions& options, std::ostream& out);

// Perfetto's protobuf trace (TrackEvent): a clock snapshot tying the timestamps (CLOCK_MONOTONIC) to the wall
// clock; a process track per process and a thread track per thread, named from the recording (plus overflow
// lanes for slices that do not nest); Python on-CPU stack samples as PerfSample packets with interned frames and
// callstacks (the UI draws flame graphs of them); counter tracks per series with their unit, grouped per
// subsystem and device; options.incidents on a track of their own (cause, evidence, culprits as arguments) with
// flows to markers on the threads busy during each; flows linking one NCCL collective (same communicator and
// sequence number) across ranks. Several recordings merge into one clock-aligned trace.
ExportCounts export_perfetto(const std::vector<const RecordingReader*>& recordings, const ExportOptions& options,
                             std::ostream& out);

// Chrome's Trace Event Format (JSON): X slices, C counters, s/t/f flows, M metadata; times in microseconds.
ExportCounts export_chrome_json(const std::vector<const RecordingReader*>& recordings, const ExportOptions& options,
                                std::ostream& out);

}  // namespace stackscope

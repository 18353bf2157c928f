// What every timeline exporter (Perfetto, Chrome JSON) needs from one or several recordings: events per
// thread laid out in properly nested lanes, clock alignment between recordings, process identities that do
// not collide across hosts, and flow ids that link one NCCL collective across ranks.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "analyze/features/derived_series.h"
#include "model/event.h"
#include "model/incident.h"
#include "model/series.h"
#include "store/recording_reader.h"

namespace stackscope {

struct ExportOptions {
  std::vector<Layer> layers;   // events of these layers only (empty: all)
  std::string series_pattern;  // glob over series key or name ("gpu.*", "*{gpu0}"); empty: all series
  bool events = true;          // timeline exporters: include events
  bool samples = true;         // timeline exporters: include counter series
  bool derived = true;         // add derived series (rates, utilisations: analyze/derived_series.h)
  // Python on-CPU stack samples (python events with args "sample" = "cpu" and "stack") go to
  // TimelineThread::stack_samples instead of the thread's slices (Perfetto draws them as callstack samples).
  bool split_stack_samples = false;
  // Per recording (same order), the incidents `analyze` finds in it, in that recording's CLOCK_MONOTONIC: the
  // timeline exporters draw them on a track of their own. Empty: none.
  std::vector<std::vector<Incident>> incidents;
};

// The derived series of a recording (source "derived") whose key or name matches `pattern`. Loads all samples.
analyze::DerivedSeries derived_series_of(const RecordingReader& r, const std::string& pattern);

// True when `pattern` is empty or matches the series key ("gpu.util{gpu0}") or its name ("gpu.util").
bool series_matches(const SeriesInfo& s, const std::string& pattern);

// The event's displayed name: host-enqueue events say so, so that nobody reads them as GPU time.
std::string event_display_name(const Event& e);
// Categories: the layer, then "enqueue" / "instant" / "unfinished" as flagged.
std::vector<std::string> event_categories(const Event& e);
// "enqueue|unfinished", or "" for none.
std::string event_flags_text(uint8_t flags);

// The flow id of an NCCL collective whose cross-rank communicator identity and sequence number the tracer
// recorded (args "comm_hash" or "comm_id", and "seq"): the same pair on several ranks is one collective.
std::optional<uint64_t> collective_flow_id(const Event& e);
// Without them (the uprobe tracer records "comm", the rank-local ncclComm_t address), build_timeline derives
// the pair per process: communicator = its creation order (ncclCommInit*/ncclCommSplit, else first use),
// seq = how many collectives that communicator ran before. Ranks create communicators and issue collectives
// in the same order (NCCL requires it), so the k-th collective of the j-th communicator matches across ranks.
uint64_t derived_collective_flow_id(uint64_t comm_ordinal, uint64_t seq);
bool is_nccl_collective(const std::string& name);

struct TimelineThread {
  uint32_t pid = 0, tid = 0;  // as recorded
  uint32_t out_pid = 0, out_tid = 0;  // unique across the exported recordings
  int lane = 0;               // 0: the thread's own track; >0: overflow lanes for events that do not nest
  std::string name;           // lane 0: what the recording tells of the thread ("python3", "python3 tid 12 (python: _worker_loop)")
  std::vector<Event> events;  // sorted by start, properly nested within the lane
  std::vector<uint64_t> flow_ids;  // per event: the collective it belongs to, 0 for none
  std::vector<Event> stack_samples;  // lane 0, split_stack_samples: on-CPU Python stack samples, by time
};

struct TimelineProcess {
  uint32_t pid = 0;      // as recorded
  uint32_t out_pid = 0;  // unique across the exported recordings
  std::string name;      // the command's name (meta "command" for the traced pid, else the comm the samplers saw)
  std::vector<std::string> cmdline;  // the traced process: the recorded command, split on spaces
};

struct TimelineSeries {
  SeriesInfo info;
  uint32_t out_pid = 0;  // process the series belongs to ("gpu0/pid1234" series), 0: recording-wide
  std::vector<int64_t> t_ns;  // aligned
  std::vector<double> values;
};

struct TimelineRecording {
  std::string label;        // "rank 0 (host h1)" or the file name
  int64_t shift_ns = 0;     // added to every timestamp: aligns with the first recording's clock
  int64_t realtime_offset_ns = 0;  // the recording's CLOCK_REALTIME - CLOCK_MONOTONIC (realtime = t - shift + this)
  std::vector<Incident> incidents;  // ExportOptions::incidents of this recording, times shifted
  std::map<uint32_t, TimelineProcess> processes;  // by recorded pid
  std::vector<TimelineThread> threads;
  std::vector<TimelineSeries> series;
  uint32_t telemetry_pid = 0;  // synthetic process for recording-wide counters
};

struct Timeline {
  std::vector<TimelineRecording> recordings;
  // flow id -> number of events that carry it (only ids with >= 2 events are worth drawing)
  std::map<uint64_t, int> flow_counts;
  uint64_t events = 0, samples = 0;
};

// Loads everything the options select. Timestamps of recording i are shifted by
// (realtime_offset_i - realtime_offset_0) so that all share recording 0's monotonic clock (and all by the
// same further amount should that make any negative). Pids and tids are remapped into per-recording blocks
// ((i+1) << 22 | pid) only when one pid occurs in several recordings.
Timeline build_timeline(const std::vector<const RecordingReader*>& recordings, const ExportOptions& options);

}  // namespace stackscope

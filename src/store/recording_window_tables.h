// Reads a recording once into every layer's window feature tables (analyze/features/window_layer_features.h):
// one pass over the event blocks feeds one CallWindowFeatures per call layer, one pass over the sample blocks
// feeds SeriesWindowFeatures for nvml and for host. This is what `stackscope features` writes per layer and the
// input the analysis engine takes (it does no I/O itself); memory is O(windows x names), whatever the number of
// events, and events are decoded without building Event objects (RecordingReader::for_each_event_ref).
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "analyze/features/window_layer_features.h"
#include "model/layer.h"
#include "store/recording_reader.h"

namespace stackscope {

struct WindowTablesOptions {
  double window_s = 1.0;
  // Call layers: columns for the `top_names` most frequent event names (cuda also always gets
  // analyze::cuda_sync_and_memory_calls() when present), as `stackscope features --names`.
  size_t top_names = 12;
  // Which tables: call layers cuda, nccl, torch, python, kernel; series layers nvml (source "nvml") and host
  // (every other series). Empty: all of them.
  std::vector<Layer> layers;
  // NVML other_procs columns: the traced processes besides the recording's own "pid" meta.
  std::set<uint32_t> target_pids;
};

struct RecordingWindowTables {
  analyze::WindowGrid grid;  // back to back from the first event or sample (analyze::make_window_grid)
  // By layer name ("cuda", ..., "nvml", "host"). A call layer with no event starting in the grid, or a series
  // layer without a column, is absent.
  std::map<std::string, analyze::WindowFeatureTable> tables;
  std::map<std::string, uint64_t> events;  // call layers: events that started in the grid, by layer name
  uint64_t samples = 0;                    // samples read (both series layers)
};

// The back-to-back windows of `window_s` from the recording's first event or sample (analyze::make_window_grid).
// Throws std::invalid_argument for a window outside 1 ns..1e9 s, a recording that holds no events and no samples,
// or a span of more than analyze::kMaxWindows windows (analyze/features/window_limits.h).
analyze::WindowGrid recording_window_grid(const RecordingReader& reader, double window_s);

// The events of `layers` (call layers), in stored order, as CallRecords: blocks are read, decompressed and decoded
// on a second thread and handed over in batches (bounded: a few MB in flight) to `on_batch`, called on the
// caller's thread; a record's name is a view into the reader's strings. Every streaming consumer of a recording's
// events goes through here (read_window_tables, the incident engine's input). Throws RecordingError.
void stream_call_records(const RecordingReader& reader, const std::vector<Layer>& layers,
                         const std::function<void(std::span<const analyze::CallRecord>)>& on_batch);

// Throws RecordingError for a defective file and std::invalid_argument for a window <= 0, a recording that
// holds no events and no samples, a span of more than analyze::kMaxWindows windows, or tables past
// analyze::kMaxWindowTableBytes.
RecordingWindowTables read_window_tables(const RecordingReader& reader, const WindowTablesOptions& options = {});

}  // namespace stackscope

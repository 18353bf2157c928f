// Reads a recording written by RecordingWriter, block by block so that a week-long file never has to fit
// in memory. Every defect of the file becomes a RecordingError that names the file and the defect.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "model/event.h"
#include "model/finding.h"
#include "model/series.h"
#include "store/block_codec.h"

namespace stackscope {

struct EventFilter {
  std::vector<Layer> layers;  // empty: all
  int64_t t_from = INT64_MIN;
  int64_t t_to = INT64_MAX;
};

struct RecordingSummary {
  int64_t start_ns = 0, end_ns = 0;  // end_ns 0 when the recorder did not close (crash): see last_data_ns
  int64_t last_data_ns = 0;
  int64_t realtime_offset_ns = 0;
  bool closed_cleanly = false;
  std::map<std::string, uint64_t> events_by_layer;
  std::map<std::string, uint64_t> series_by_subsystem;
  uint64_t samples = 0;
  std::map<std::string, uint64_t> drops;
  uint64_t findings = 0;
  uint64_t file_bytes = 0;
};

struct Note {
  int64_t t_ns;
  std::string source, text;
};

class RecordingReader {
 public:
  // Opens and validates the header. Throws RecordingError.
  explicit RecordingReader(const std::string& path);
  ~RecordingReader();

  const std::string& path() const { return path_; }
  // How the file was opened when not read-write (no write permission on it or its folder), and whether a -wal
  // beside it could not be read; empty when opened read-write.
  const std::string& open_note() const { return open_note_; }
  bool read_only() const { return !open_note_.empty(); }
  const std::map<std::string, std::string>& meta() const { return meta_; }
  std::string meta_or(const std::string& key, const std::string& fallback = "") const;
  const std::vector<SeriesInfo>& series() const { return series_; }
  const SeriesInfo* series_by_id(SeriesId id) const;

  // Calls fn for every event matching the filter, in the order recorded.
  void for_each_event(const EventFilter& filter, const std::function<void(const Event&)>& fn) const;
  // The same, each event as stored (names, keys and string values as ids: see string_view_at), with no
  // allocation per event: the pass to use over a long recording's tens of millions of events.
  void for_each_event_ref(const EventFilter& filter, const std::function<void(const codec::EventRef&)>& fn) const;
  // The recording's string `id` (ids in an EventRef are checked when decoded); valid while the reader lives.
  std::string_view string_view_at(uint32_t id) const { return string_at(id); }
  // The id of `s` in this recording's string table, if any event uses it.
  std::optional<uint32_t> find_string(std::string_view s) const;
  // Calls fn for every sample block: per series, its times and values in that block (time order).
  void for_each_sample_run(
      const std::function<void(const SeriesInfo&, std::span<const int64_t>, std::span<const double>)>& fn) const;
  // Loads whole series (convenient for short recordings; analyses of long ones should stream).
  std::map<SeriesId, std::pair<std::vector<int64_t>, std::vector<double>>> load_samples() const;

  // First and last time of any event (its end) or sample; nullopt when the recording holds neither.
  std::optional<std::pair<int64_t, int64_t>> data_span() const;

  std::vector<Finding> findings() const;
  std::vector<Note> notes() const;
  RecordingSummary summary() const;

 private:
  const std::string& string_at(uint32_t id) const;
  std::string path_, open_note_;
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::map<std::string, std::string> meta_;
  std::vector<SeriesInfo> series_;
  std::map<SeriesId, size_t> series_index_;
  std::vector<std::string> strings_;
};

// Adds findings to an existing recording (what `analyze` stores). Replaces earlier findings of the same detector.
// false (nothing stored) when the file or its folder may not be written: a read-only recording is analysed too.
bool store_findings(const std::string& path, const std::string& detector, const std::vector<Finding>& findings);

}  // namespace stackscope

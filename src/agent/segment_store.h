// The agent's rolling local store: each traced job (and the node itself) writes a chain of recording files
// ("segments", each a normal recording that `analyze`, `export` and `report` read), a new one begun when the
// current one is old or big enough; closed segments are deleted, oldest first, beyond a total size or age.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <string>
#include <tuple>
#include <vector>

#include "model/sink.h"

namespace stackscope {
class RecordingWriter;
}

namespace stackscope::agent {

struct SegmentOptions {
  std::string dir;     // created when missing
  std::string prefix;  // file names: PREFIX-YYYYmmddTHHMMSSZ-N.sdb
  int64_t max_duration_ns = 600'000'000'000;
  uint64_t max_bytes = 256ull << 20;
  std::map<std::string, std::string> meta;  // written into every segment (host, job labels...)
};

// A TelemetrySink over a chain of segments. Series ids are its own and stable across segments (collectors keep
// theirs for the life of the job); every segment declares every series known so far. Thread-safe.
class SegmentedRecording final : public TelemetrySink {
 public:
  explicit SegmentedRecording(SegmentOptions options);  // opens the first segment; throws when it cannot
  ~SegmentedRecording() override;

  SeriesId add_series(const SeriesInfo& info) override;
  void append_event(Event&& e) override;
  void append_samples(std::span<const Sample> samples) override;
  void add_drops(std::string_view source, uint64_t n) override;
  void add_note(std::string_view source, std::string_view text) override;

  // Begins a new segment when the current one reached its age or size. Returns true when it rotated.
  bool maybe_rotate(int64_t now_ns);
  // Closes the current segment (idempotent); returns its path. Later appends are dropped.
  std::string close();
  std::string current_path() const;
  std::vector<std::string> paths() const;  // every segment this chain wrote, oldest first
  bool failed() const;                     // the current segment's writer failed (disk full)
  uint64_t events() const;                 // accepted over all segments
  uint64_t samples() const;

 private:
  void open_segment();  // under the unique lock
  SegmentOptions opt_;
  mutable std::shared_mutex mu_;  // appends share it; rotation takes it alone
  std::unique_ptr<RecordingWriter> writer_;
  int64_t segment_start_ns_ = 0;
  int seq_ = 0;
  bool closed_ = false;
  std::vector<std::string> paths_;
  std::vector<SeriesInfo> series_;              // by own id - 1
  std::vector<SeriesId> writer_ids_;            // own id - 1 -> the current writer's id
  std::map<std::tuple<std::string, std::string, std::string>, SeriesId> by_key_;
  uint64_t events_done_ = 0, samples_done_ = 0;  // of closed segments
};

struct RetentionResult {
  size_t segments = 0;      // kept
  uint64_t bytes = 0;       // kept, sidecars (-wal, -shm) included
  size_t deleted = 0;
  uint64_t deleted_bytes = 0;
};

// Deletes recording segments (*.sdb with their -wal/-shm) under `root`, oldest (by modification time) first: those
// older than max_age_ns, then more while the total exceeds max_bytes. `open`: paths being written, never deleted.
// Directories left with nothing but finished logs of an ended job are removed with them (`keep_dirs` stay).
RetentionResult apply_retention(const std::string& root, uint64_t max_bytes, int64_t max_age_ns,
                                const std::set<std::string>& open, const std::set<std::string>& keep_dirs);

}  // namespace stackscope::agent

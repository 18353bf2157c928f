// The agent's rolling local store: each traced job (and the node itself) writes a chain of recording files
// ("segments", each a normal recording that `analyze`, `export` and `report` read), a new one begun when the
// current one is old or big enough; closed segments are deleted, oldest first, beyond a total size or age, or
// while the disk is below its free-space floor. Only files the agent made are ever deleted (StoreManifest).
#pragma once
#include <atomic>
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

// The files and folders the agent made under its data_dir, listed in DATA_DIR/agent.manifest: retention deletes
// only what is listed, never a file or folder of someone else's that lies there. The list is rewritten atomically
// (a new file renamed over it) on each change; a change that cannot be written (a full disk) is written with the
// next one. Thread-safe.
class StoreManifest {
 public:
  // Reads ROOT/agent.manifest. Without one (a data_dir of an agent from before the manifest), the segments at the
  // agent's own paths (node/node-*.sdb, jobs/*/segment-*.sdb) whose metadata says the agent wrote them are
  // listed, with their job's incident log and folders; `adopted` tells how many.
  // Throws std::runtime_error when the manifest is there but cannot be read.
  explicit StoreManifest(const std::string& root);
  static std::string normal(const std::string& dir);  // a folder's path as root() gives it
  const std::string& root() const { return root_; }
  size_t adopted() const { return adopted_; }

  // Creates `dir` (ROOT or a path under it) and its missing parents, owner-only, and lists the ones it made.
  // Throws std::runtime_error naming the folder and the reason.
  void create_dirs(const std::string& dir);
  void add_file(const std::string& path);  // a file the agent made (a segment, an incident log)
  void forget(const std::string& path);
  bool has_file(const std::string& path) const;
  bool has_dir(const std::string& path) const;
  std::vector<std::string> files() const;  // absolute paths
  bool save();                             // writes what changed since the last save; false when it could not

 private:
  bool save_locked();
  std::string rel(const std::string& path) const;  // "" when not under root
  std::string root_;
  mutable std::mutex mu_;
  std::set<std::string> files_, dirs_;  // relative to root
  bool dirty_ = false;
  size_t adopted_ = 0;
};

struct SegmentOptions {
  std::string dir;     // created when missing
  std::string prefix;  // file names: PREFIX-YYYYmmddTHHMMSSZ-N.sdb
  int64_t max_duration_ns = 600'000'000'000;
  uint64_t max_bytes = 256ull << 20;
  std::map<std::string, std::string> meta;  // written into every segment (host, job labels...)
  std::shared_ptr<StoreManifest> manifest;  // lists the folders and segments made (retention deletes only those)
};

// Events and samples that reached no segment: its write failed (disk full, I/O error), no segment could be
// opened, or writing was stopped below the free-space floor.
struct StoreLoss {
  uint64_t events = 0;
  uint64_t samples = 0;
};

// A TelemetrySink over a chain of segments. Series ids are its own and stable across segments (collectors keep
// theirs for the life of the job); every segment declares every series known so far. Thread-safe.
// A write that fails does not end the chain: appends are counted as lost until check() opens a new segment.
class SegmentedRecording final : public TelemetrySink {
 public:
  explicit SegmentedRecording(SegmentOptions options);  // opens the first segment; throws when it cannot
  ~SegmentedRecording() override;

  SeriesId add_series(const SeriesInfo& info) override;
  void append_event(Event&& e) override;
  void append_samples(std::span<const Sample> samples) override;
  void add_drops(std::string_view source, uint64_t n) override;
  void add_note(std::string_view source, std::string_view text) override;

  // Begins a new segment when the current one reached its age or size. Returns true when it rotated. When the new
  // one cannot be opened the current one goes on, and check() tries again.
  bool maybe_rotate(int64_t now_ns);
  // The store's state, from the agent's housekeeping: a segment whose write failed is closed; with `not_writable`
  // set (why: the disk below its free-space floor) the current segment is closed too and appends are counted as
  // lost; else a missing segment is replaced by a new one (not in the call that found the failure). Returns one
  // line when the state changed (writing stopped, or began again), else "".
  std::string check(const std::string& not_writable = {});
  // Closes the current segment (idempotent); returns its path. Later appends are dropped.
  std::string close();
  std::string current_path() const;        // "" while no segment is open
  std::vector<std::string> paths() const;  // every segment this chain wrote, oldest first
  bool failed() const;                     // not writing (a failed write, no segment, stopped below the floor)
  std::string error() const;               // why not, "" while writing
  StoreLoss lost() const;                  // since the start
  uint64_t events() const;                 // accepted over all segments
  uint64_t samples() const;

 private:
  void open_segment();    // under the unique lock; throws when it cannot
  void retire_writer();   // under the unique lock: closes the current segment, counts what it did not store
  SegmentOptions opt_;
  mutable std::shared_mutex mu_;  // appends share it; rotation takes it alone
  std::unique_ptr<RecordingWriter> writer_;
  int64_t segment_start_ns_ = 0;
  int seq_ = 0;
  bool closed_ = false;
  bool retry_open_ = false;  // a rotation could not open the next segment: check() tries again
  bool stopping_ = false;    // the state check() last reported: not writing
  std::string error_;
  std::vector<std::string> paths_;
  std::vector<SeriesInfo> series_;              // by own id - 1
  std::vector<SeriesId> writer_ids_;            // own id - 1 -> the current writer's id
  std::map<std::tuple<std::string, std::string, std::string>, SeriesId> by_key_;
  uint64_t events_done_ = 0, samples_done_ = 0;  // of closed segments
  std::atomic<uint64_t> offered_events_{0}, offered_samples_{0};  // to the current writer
  std::atomic<uint64_t> lost_events_{0}, lost_samples_{0};
  StoreLoss lost_at_stop_;  // lost_ when writing last stopped
  std::mutex unnoted_mu_;   // what appends lost while no segment took them, noted as drops in the next segment
  StoreLoss unnoted_;
  std::map<std::string, uint64_t> unnoted_drops_;  // drops of other sources (ring buffers) meanwhile
};

struct RetentionResult {
  size_t segments = 0;      // kept
  uint64_t bytes = 0;       // kept, sidecars (-wal, -shm) included
  size_t deleted = 0;
  uint64_t deleted_bytes = 0;
  uint64_t free_bytes = UINT64_MAX;  // left on the data_dir's file system (UINT64_MAX: unknown)
};

// Bytes free for the agent on the file system of `path` (UINT64_MAX when it cannot be read), and its size.
uint64_t free_bytes(const std::string& path, uint64_t* fs_bytes = nullptr);

// Deletes the segments the manifest lists (with their -wal, -shm and -reserve), oldest (by modification time)
// first: those older than max_age_ns, then more while their total exceeds max_bytes, then more while the file
// system has less than min_free_bytes free. `open`: paths being written, never deleted. A folder the agent made
// that no listed segment is left in loses the agent's other files (an ended job's incident log) and is removed
// when it is then empty (`keep_dirs`: folders of jobs still traced, never removed). Nothing unlisted is touched.
RetentionResult apply_retention(StoreManifest& manifest, uint64_t max_bytes, int64_t max_age_ns,
                                uint64_t min_free_bytes, const std::set<std::string>& open,
                                const std::set<std::string>& keep_dirs);

}  // namespace stackscope::agent

// Writes one recording (a SQLite file in WAL mode). Collectors append into memory; a background thread
// encodes and commits a batch at least every `flush_interval`, so collectors never wait on disk and a
// kill -9 loses at most the last interval.
#pragma once
#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "model/finding.h"
#include "model/sink.h"

namespace stackscope {

struct RecordingWriterOptions {
  int flush_interval_ms = 250;           // the most a crash may lose of events
  int sample_flush_interval_ms = 900;    // the most a crash may lose of samples (bigger blocks compress better)
  size_t max_pending_events = 4'000'000;  // beyond this, events are dropped and counted ("store.backlog")
  size_t max_pending_samples = 4'000'000;
  size_t events_per_block = 65'536;
  // WAL pages are copied into the main file (a PASSIVE checkpoint) at least this often, so the .sdb alone (copied
  // without its -wal, after kill -9 or a full disk) holds all but the last seconds; 0: only at close.
  int checkpoint_interval_ms = 2000;
  int zstd_level = 1;
};

struct RecordingWriterStats {
  uint64_t events = 0;    // accepted
  uint64_t samples = 0;
  uint64_t flushed_events = 0;
  uint64_t flushed_samples = 0;
  uint64_t dropped = 0;   // all sources
  uint64_t bytes_raw = 0;
  uint64_t bytes_stored = 0;
  size_t series = 0;
};

class RecordingWriter final : public TelemetrySink {
 public:
  // Creates (or replaces) `path`; an empty file there is written into (store/output_file.h creates it with its
  // mode and lock). Throws sql::SqliteError when the file cannot be created.
  RecordingWriter(const std::string& path, RecordingWriterOptions options = {});
  ~RecordingWriter() override;

  void set_meta(const std::string& key, const std::string& value);
  SeriesId add_series(const SeriesInfo& info) override;
  void append_event(Event&& e) override;
  void append_samples(std::span<const Sample> samples) override;
  void add_drops(std::string_view source, uint64_t n) override;
  void add_note(std::string_view source, std::string_view text) override;

  // Flushes now and waits for the commit.
  void flush();
  // Flushes, writes the end time and closes. Idempotent.
  void close();

  RecordingWriterStats stats() const;
  // Set once a write failed (disk full, I/O error): the recording keeps everything committed before it,
  // and later appends are dropped and counted.
  bool failed() const { return failed_.load(); }
  std::string error() const;
  bool disk_full() const;  // the failed write found the disk full (SQLITE_FULL)
  const std::string& path() const { return path_; }

 private:
  struct Pending;
  void run();
  void write_batch(Pending& batch);
  void create_schema();

  std::string path_;
  RecordingWriterOptions opt_;
  struct Impl;
  std::unique_ptr<Impl> impl_;
  mutable std::mutex mu_;
  std::condition_variable cv_, flushed_cv_;
  std::unique_ptr<Pending> pending_;
  uint64_t flush_requested_ = 0, flush_done_ = 0;
  bool stop_ = false, closed_ = false;
  std::atomic<bool> failed_{false};
  std::string error_;
  bool disk_full_ = false;  // with error_, under mu_
  RecordingWriterStats stats_;
  std::map<std::string, SeriesId> series_ids_;
  std::map<std::string, uint64_t, std::less<>> drops_;
  std::thread thread_;
};

}  // namespace stackscope

// The ClickHouse sink's on-disk spool: every batch is appended (and synced) here before it is sent, and leaves
// only once ClickHouse acknowledged it, so an outage or a restart of ClickHouse, or of the agent, loses nothing.
// Batches are replayed in the order they were made. Each carries a batch id, which the tables key their rows by:
// a batch sent twice (acknowledged but the answer lost) is one batch in ClickHouse (deploy/clickhouse/schema.sql).
// The id is a random session id, drawn each time the spool is opened, and the batch's sequence number: unique
// even if the spool's bookkeeping was lost (a power cut before `acked` reached the disk, a wiped directory).
//
// Layout of the directory: `acked` (the last acknowledged sequence number), and append-only files
// `<first seq>.spool` of records, each a header line
//   SPOOL1 <seq> <batch id> <table> <rows> <payload bytes> <crc32 of the payload> <creation unix ns>\n
// and the payload (JSON rows, one a line). A torn last record (the agent killed mid-write) is cut off on open.
// Beyond max_bytes the oldest file is deleted, sent or not: its batches are lost and counted.
#pragma once
#include <cstdint>
#include <deque>
#include <optional>
#include <string>

namespace stackscope::agent {

struct SpooledBatch {
  uint64_t seq = 0;
  std::string batch_id;  // "<session id>-<seq>"
  std::string table;
  uint32_t rows = 0;
  int64_t created_unix_ns = 0;
  std::string payload;
};

class ClickHouseSpool {
 public:
  // Opens (creating) the spool in `dir`. Throws std::runtime_error when the directory cannot be used.
  ClickHouseSpool(std::string dir, uint64_t max_bytes, uint64_t file_bytes = 16u << 20);
  ~ClickHouseSpool();
  ClickHouseSpool(const ClickHouseSpool&) = delete;
  ClickHouseSpool& operator=(const ClickHouseSpool&) = delete;

  // Appends a batch durably (fdatasync) and returns its sequence number. Throws std::runtime_error on a write
  // error (disk full): the batch is then not in the spool.
  uint64_t append(const std::string& table, uint32_t rows, const std::string& payload);
  // The oldest batch not yet acknowledged, read from disk; nullopt when none (or its record is unreadable, which
  // then is dropped and counted).
  std::optional<SpooledBatch> front();
  // The oldest batch was acknowledged: it leaves the spool (its file too once all of the file's batches left).
  void pop_front();

  const std::string& session_id() const { return session_id_; }
  size_t pending_batches() const { return index_.size(); }
  uint64_t pending_rows() const;
  uint64_t bytes() const { return bytes_; }  // of the spool's files
  int64_t oldest_created_unix_ns() const { return index_.empty() ? 0 : index_.front().created_unix_ns; }
  uint64_t dropped_batches() const { return dropped_batches_; }
  uint64_t dropped_rows() const { return dropped_rows_; }

 private:
  struct Entry {
    uint64_t seq;
    uint64_t file_first_seq;  // which file
    uint64_t offset;          // of the header
    uint64_t length;          // header and payload
    uint32_t rows;
    int64_t created_unix_ns;
  };
  std::string file_path(uint64_t first_seq) const;
  void load();
  void scan_file(uint64_t first_seq, uint64_t acked);
  void write_acked(uint64_t seq);
  void remove_file(uint64_t first_seq);
  void enforce_limit();

  std::string dir_;
  uint64_t max_bytes_, file_bytes_;
  std::string session_id_;  // of the batches appended since this spool was opened
  std::deque<Entry> index_;                           // unacknowledged batches, oldest first
  std::deque<std::pair<uint64_t, uint64_t>> files_;   // (first seq, size), oldest first; the last is written to
  int write_fd_ = -1;
  uint64_t next_seq_ = 1;
  uint64_t bytes_ = 0;
  uint64_t dropped_batches_ = 0, dropped_rows_ = 0;
};

}  // namespace stackscope::agent

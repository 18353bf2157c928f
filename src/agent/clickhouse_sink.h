// The agent's side of the fleet store: rows for ClickHouse's tables (deploy/clickhouse/schema.sql) gathered from
// the node's samplers, the jobs' event counts and the incident engine, cut into batches (batch_rows, or
// batch_interval), appended to the on-disk spool (clickhouse_spool.h) and sent from there in order over the HTTP
// interface by one thread of its own. Each row carries its batch's id and its index in the batch: the tables
// (ReplacingMergeTree ordered by them) keep one row of a batch sent twice. Before sending a batch that may
// already have arrived (the first after a start, or after an answer lost mid-request) it asks ClickHouse whether
// its rows are there. A batch ClickHouse refuses is retried, with backoff up to 30 s, and blocks the ones behind
// it: nothing is sent out of order and nothing is skipped (a missing table can be created later, and the spool
// catches up). Callers never block on the network or the disk.
//
// Tables and their rows:
//   samples           host, job, series, device, unit, ts_ns (Unix time), value, kind (gauge|counter|static_value)
//   event_aggregates  host, job, pod, container, rank, layer, interval_start_ns, interval_ns, events, duration_ns,
//                     wait_ns
//
// Columns added since the first schema (samples.kind, event_aggregates.wait_ns): before its first insert into such a
// table the sending thread adds a missing one (ALTER TABLE ... ADD COLUMN: ClickHouse 18.16 has no IF NOT EXISTS
// there, so it asks system.columns first). Where it cannot (a Distributed table, whose shards' tables need ALTER ...
// ON CLUSTER, or no ALTER right) it logs the statement to run and inserts with input_format_skip_unknown_fields:
// those values are lost, the rows are not.
//   incidents         host, job, pod, container, incident_id, state (open|cause|close), class, ts_ns, report (JSON)
//   clock_offsets     host, ts_ns, server_s, rtt_ns, offset_ns: this host's clock against ClickHouse's, probed about
//                     once a second while sending (only where the table exists: an older store is not blocked)
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "agent/agent_config.h"
#include "agent/agent_metrics.h"
#include "model/layer.h"
#include "model/sink.h"

namespace prometheus {
class Registry;
}
namespace stackscope::fleet {
class ClickHouseHttp;
}

namespace stackscope::agent {

class ClickHouseSpool;
struct ClickHouseMetrics;

class ClickHouseSink {
 public:
  // Opens the spool (settings.spool_dir, or data_dir/clickhouse-spool) and starts the sending thread, which first
  // replays what an earlier run left in the spool. `host` labels every row; the counters go to `registry`.
  // Throws std::runtime_error when the spool cannot be opened.
  ClickHouseSink(const ClickHouseSettings& settings, const std::string& data_dir, std::string host,
                 prometheus::Registry& registry);
  // Cuts every buffered row into the spool and sends for at most `stop_grace` more; the rest waits in the spool.
  ~ClickHouseSink();
  ClickHouseSink(const ClickHouseSink&) = delete;
  ClickHouseSink& operator=(const ClickHouseSink&) = delete;

  // A sink that forwards everything to `next` and copies the samples into the samples table (job "" for the
  // node's own series). Lives no longer than this object.
  std::unique_ptr<TelemetrySink> sample_tee(TelemetrySink& next, std::string job = {});
  // Events of a job counted since the previous call for this (job, rank, layer): added to the current interval.
  // wait_ns: the part of duration_ns spent waiting (JobEventTotals).
  void add_event_counts(const JobLabels& job, const std::string& rank, Layer layer, uint64_t events,
                        int64_t duration_ns, int64_t wait_ns = 0);
  // One report of the incident engine (docs/INCIDENTS.md, with "online": open|cause|close).
  void add_incident(const JobLabels& job, const nlohmann::json& report);

  struct Stats {
    uint64_t batches_sent = 0, rows_sent = 0, send_errors = 0;
    uint64_t spool_batches = 0, spool_bytes = 0, dropped_rows = 0;
    std::string last_error;  // "" once a send succeeded after it
  };
  Stats stats() const;

  static constexpr const char* kTables[] = {"samples", "event_aggregates", "incidents", "clock_offsets"};

 private:
  class SampleTee;
  struct Buffer {
    std::vector<std::string> rows;  // JSON objects without the batch key
    int64_t first_ns = 0;           // monotonic time of the oldest
  };
  struct Totals {
    uint64_t events = 0;
    int64_t duration_ns = 0, wait_ns = 0;
  };
  // Whether a table has the columns added since the first schema (kAddedColumns).
  enum class ColumnsState { unknown, present, absent };
  struct AggregateKey {
    std::string job, pod, container, rank;
    Layer layer;
    auto operator<=>(const AggregateKey&) const = default;
  };
  void add_row(const std::string& table, std::string row);
  void close_interval_locked(int64_t interval_start);
  void run();
  std::vector<std::pair<std::string, std::vector<std::string>>> cut_locked(int64_t now, bool all);
  bool send_some(int64_t deadline);
  ColumnsState ensure_added_columns(const std::string& table);
  void probe_clock();
  void publish_stats();

  ClickHouseSettings settings_;
  std::string host_;
  std::unique_ptr<ClickHouseSpool> spool_;  // the sending thread's only (and the destructor's after the join)
  std::unique_ptr<fleet::ClickHouseHttp> http_;
  std::unique_ptr<ClickHouseMetrics> metrics_;
  std::atomic<int64_t> clock_offset_ns_;  // realtime - monotonic

  mutable std::mutex mu_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::map<std::string, Buffer> buffers_;  // by table
  int64_t interval_start_ns_ = 0;          // Unix time of the open aggregate interval
  std::map<AggregateKey, Totals> aggregates_;
  Stats stats_;
  bool check_front_ = false;  // the next batch may already be in ClickHouse: ask before sending it
  int64_t backoff_ns_ = 0, retry_at_ns_ = 0;
  std::map<std::string, ColumnsState> added_columns_;  // by table; the sending thread's only
  int64_t next_clock_probe_ns_ = 0;                    // monotonic; the sending thread's only
  int clock_table_ = -1;                               // clock_offsets exists: -1 not asked yet, 0 no, 1 yes
  std::thread thread_;
};

}  // namespace stackscope::agent

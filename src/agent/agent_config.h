// The agent's configuration: a TOML file (deploy/agent.toml documents every key) with command-line flags that
// override it. Every setting has one dotted name ("store.retention_size"); the file and the flags both go through
// set(), so a value means the same wherever it comes from, and flags still win after SIGHUP reloads the file.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace stackscope::agent {

class CommandFilter;

// The fleet store (deploy/clickhouse/): host samples, per-interval event aggregates and incidents, batched and
// spooled on disk before they are sent (clickhouse_sink.h). Off while url is empty.
struct ClickHouseSettings {
  std::string url;                        // "http://HOST:8123"
  std::string database = "stackscope";
  size_t batch_rows = 10000;              // a batch is sent once it has this many rows of one table...
  int64_t batch_interval_ns = 5'000'000'000;  // ...or its oldest row is this old
  int64_t aggregate_interval_ns = 10'000'000'000;  // events are counted per job, rank and layer over this interval
  std::string spool_dir;                  // "": DATA_DIR/clickhouse-spool
  uint64_t spool_max_bytes = 1ull << 30;  // beyond this the oldest unsent batches are dropped (and counted)
  double timeout_s = 10;                  // of one HTTP request
  bool operator==(const ClickHouseSettings&) const = default;
};

struct AgentConfig {
  std::string data_dir = "/var/lib/stackscope";  // segments, per-job incident logs
  std::string listen = "127.0.0.1:9477";         // /metrics, /healthz, /api/incidents ("HOST:PORT"; port 0: any)
  // discovery
  int64_t scan_interval_ns = 2'000'000'000;
  std::vector<std::string> job_libraries = {"cuda", "nccl", "torch"};  // a process mapping one of these is a job
  int max_jobs = 8;  // traced at once; more are counted (stackscope_jobs_untraced) and left alone
  // Jobs of one user (root too) traced at once: any user can start processes that look like jobs, and they must not
  // take every slot. More are counted as untraced, as beyond max_jobs.
  int max_jobs_per_user = 4;
  std::set<uint32_t> users;  // only jobs of these users (uids) are traced (empty: every user's)
  std::string command_filter;  // RE2 expression a job's leader command line must match ("": every job)
  std::shared_ptr<const CommandFilter> command_matcher;  // command_filter compiled (null when it is "")
  // tracing of each job (what `record` does, with its budgeted defaults)
  std::string layers = "all";
  int interval_ms = 100;
  double budget_pct = 1.0;
  // Each probe family's BPF ring buffer: smaller than record's 8 MiB, since the agent traces several jobs for
  // days and every buffer is resident memory (a full buffer drops records, counted in
  // stackscope_job_dropped_events_total).
  uint32_t ringbuf_bytes = 2u << 20;
  bool detect = true;
  double detect_horizon_s = 1800;
  // the node's own samplers (host and GPU series without a job)
  int host_interval_ms = 1000;
  // An idle node (no job traced) reads its costlier series less often (docs/benchmarks/agent.md): the slow GPU
  // readings and NVML field values (energy, memory clock, ECC, PCIe replays, NVLink and PCIe byte counters; 1 s with
  // a job), and the host families whose cost grows with CPUs and processes (interrupts, softirqs, perf counters,
  // per-process CPU, vmstat, TCP counters, cpufreq; every host_interval_ms with a job). Back at once when a job is
  // traced. GPU utilisation, memory, power, temperature, clocks, throttling and XID events stay every interval; a GPU
  // with no running process gets no PCIe throughput query (nothing on its link) while idle.
  int host_idle_gpu_slow_interval_ms = 30'000;
  int host_idle_host_slow_interval_ms = 30'000;
  std::string host_layers = "host,nvml";
  size_t max_host_series = 4000;  // exported to /metrics (the rest still go to the segments)
  // rolling store
  int64_t segment_duration_ns = 600'000'000'000;  // a segment is closed after this long...
  uint64_t segment_size_bytes = 256ull << 20;     // ...or once this big
  uint64_t retention_size_bytes = 10ull << 30;    // oldest closed segments deleted beyond this total...
  int64_t retention_age_ns = 7 * 86'400'000'000'000;  // ...or once older than this
  // Free space kept on data_dir's file system: the smaller of these two where both are set (0: not set; both 0: no
  // floor). Below it the oldest closed segments are deleted, and then writing stops (and counts what it loses).
  uint64_t min_free_bytes = 1ull << 30;
  double min_free_ratio = 0.05;
  size_t max_incidents = 1000;  // kept for /api/incidents
  std::string http_token_file;  // holds the bearer token every route but /healthz needs ("": none needed)
  ClickHouseSettings clickhouse;

  // Sets one setting from text ("2s", "256MiB", "true", "cuda,nccl"). Throws std::invalid_argument naming the key
  // and what it expects.
  void set(const std::string& key, const std::string& value);
  // Checks the combination (sizes, intervals, a parsable listen address). Throws std::invalid_argument.
  void validate() const;
  // The free-space floor in bytes on a file system of `fs_bytes` (min_free_bytes, min_free_ratio).
  uint64_t min_free_floor(uint64_t fs_bytes) const;
};

// The names set() accepts, with a one-line description each (for --help and the documentation test).
const std::map<std::string, std::string>& agent_config_keys();

// Reads `path` (TOML) over the defaults, then applies `overrides` (key -> text, from flags). An empty path: the
// defaults and the overrides only. Throws std::invalid_argument with the file, line and key on a bad file.
AgentConfig load_agent_config(const std::string& path, const std::map<std::string, std::string>& overrides);

// "256MiB", "10GiB", "500MB", "4096" (bytes) -> bytes; nullopt-like 0 with ok=false on malformed input.
bool parse_size_bytes(const std::string& text, uint64_t& out);

}  // namespace stackscope::agent

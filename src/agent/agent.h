// The node agent's main loop: discovers jobs (job_discovery.h) every scan interval and traces each (job_trace.h)
// until it ends, runs the node's own samplers into their segments and /metrics, applies retention, serves
// /metrics, /healthz and /api/incidents (http_endpoint.h), reloads its configuration on request and stops cleanly.
#pragma once
#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "agent/agent_config.h"
#include "agent/agent_metrics.h"

namespace stackscope::agent {

class ClickHouseSink;
class HostSamplerShare;
class StoreManifest;
class HttpEndpoint;
class JobTrace;
class JobScanner;
class NodeTelemetry;
class SampleFanOut;

class Agent {
 public:
  // config_path: the TOML file ("" for none), read again on reload(); overrides: flags, applied after it.
  Agent(std::string config_path, std::map<std::string, std::string> overrides, std::string version);
  ~Agent();

  // Runs until `stop` becomes true; `reload` true asks for a configuration reload (and is reset). Returns 0, or 3
  // when the store failed (disk full) at the end.
  int run(const std::atomic<bool>& stop, std::atomic<bool>& reload);

  const AgentConfig& config() const { return config_; }
  int port() const;  // the HTTP port listened on (after start)

 private:
  static std::string read_token(const AgentConfig& c);  // the bearer token of http.token_file, "" without one
  std::unique_ptr<HttpEndpoint> make_http(const std::string& listen, const std::string& token);
  // Listens on `listen` instead, the old listener kept until the new one listens; returns why not ("" when moved).
  std::string move_http(const std::string& listen, const std::string& token);
  // The data_dir made and its manifest read; false (data_dir_error_ says why) when it cannot be.
  bool ensure_store();
  // Every scan: the data_dir made, the node's store started, the free-space floor kept, failed segments replaced;
  // store_error_ says what does not work.
  void check_store();
  void start_node();
  void start_fleet();
  void ship_event_counts(JobTrace& t);
  void scan(int64_t now);
  // /api/incidents after a restart: the incidents of the job logs under data_dir (each one's last report, the
  // newest max_incidents), marked restored.
  void restore_incidents();
  void handle_incidents(JobTrace& t);
  void reload();
  void retention();
  void self_resources();
  nlohmann::json incidents_json() const;
  nlohmann::json health_json() const;

  std::string config_path_;
  std::map<std::string, std::string> overrides_;
  std::string version_;
  AgentConfig config_;
  std::map<std::string, std::string> host_meta_;
  std::unique_ptr<AgentMetrics> metrics_;
  std::unique_ptr<JobScanner> scanner_;
  std::unique_ptr<SampleFanOut> node_nvml_;  // the node's NVML sampler's output, shared with the jobs; outlives both
  std::unique_ptr<HostSamplerShare> node_host_;  // the node's host sampler's, shared with one job; outlives both
  std::unique_ptr<ClickHouseSink> fleet_;  // the fleet store, when clickhouse.url is set; outlives node_
  std::unique_ptr<NodeTelemetry> node_;
  std::map<std::string, std::unique_ptr<JobTrace>> jobs_;  // by job id
  std::set<std::string> failed_jobs_;                      // could not be traced: not retried while they live
  std::set<std::string> untraced_jobs_;  // beyond max_jobs or max_jobs_per_user when found: logged once
  std::unique_ptr<HttpEndpoint> http_;
  std::string token_;  // the bearer token in effect
  std::shared_ptr<StoreManifest> manifest_;  // of config_.data_dir; jobs keep the one of their data_dir
  std::string data_dir_error_, node_error_;  // the last reported, logged once each
  bool store_paused_ = false;                // below the free-space floor: nothing written
  bool store_failed_ = false;                // a segment is not written (a failed write, or paused)
  bool fleet_retry_ = false;                 // the fleet store waits for data_dir
  mutable std::mutex mu_;  // what the HTTP threads read: incidents_, health
  std::deque<nlohmann::json> incidents_;  // newest last; each incident's latest report
  size_t jobs_traced_ = 0, jobs_untraced_ = 0;
  int64_t started_ns_ = 0, last_scan_ns_ = 0;
  std::string store_error_;
};

}  // namespace stackscope::agent

// One traced job: what `record --pid LEADER --detect` does (the same collectors, budgeted defaults, the online
// incident engine), into the job's rolling segments instead of one file, with its events counted into /metrics
// and its incidents read back as the engine reports them (its JSON-lines log, docs/INCIDENTS.md objects).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "agent/agent_config.h"
#include "agent/agent_metrics.h"
#include "agent/job_discovery.h"
#include "agent/host_sampler_share.h"
#include "agent/sample_fan_out.h"
#include "model/collector.h"

namespace stackscope::online {
class OnlineDetector;
}

namespace stackscope::agent {

class SegmentedRecording;
class StoreManifest;
class JobEventCounter;

// A job's traced calls of one rank and layer over some time: how many, their host-observed time, and the part of it
// spent waiting (CUDA *Synchronize calls: the host waits for its GPU, and through it for the collectives that wait
// for the slowest rank). The fleet's straggler verdict compares the ranks' waits per interval.
struct JobEventTotals {
  uint64_t events = 0;
  int64_t duration_ns = 0;
  int64_t wait_ns = 0;
};

// New complete lines of a JSON-lines file another thread appends to.
class JsonLinesTail {
 public:
  // From byte `offset` on: lines before it are not this tracer's reports.
  explicit JsonLinesTail(std::string path, uint64_t offset = 0) : path_(std::move(path)), offset_(offset) {}
  std::vector<nlohmann::json> poll();

 private:
  std::string path_;
  uint64_t offset_ = 0;
  std::string partial_;
};

class JobTrace {
 public:
  // Starts tracing; the job's directory is DATA_DIR/jobs/<job id>. Throws std::runtime_error when nothing can run.
  // With `node_nvml` fed by the node's NVML sampler, the job's GPU series (and XID events) come from it, at the job's
  // interval, instead of a sampler of its own; else the job runs its own. Likewise its host series from `node_host`'s
  // sampler when it can claim it (no other job holds it), with the job's processes as the sampler's traced ones.
  // `manifest`: lists the job's folder, segments and incident log as the agent's (retention deletes only those).
  JobTrace(const Job& job, const AgentConfig& config, const std::map<std::string, std::string>& host_meta,
           AgentMetrics& metrics, SampleFanOut* node_nvml = nullptr, HostSamplerShare* node_host = nullptr,
           std::shared_ptr<StoreManifest> manifest = nullptr);
  ~JobTrace();  // stop() if not done

  const Job& job() const { return job_; }
  const JobLabels& labels() const { return labels_; }
  const std::string& dir() const { return dir_; }
  // The job's processes now: new ones are traced too, ranks relabelled.
  void update(const Job& job);
  // The engine's incident reports since the last call ("online": open|cause|close), with the job's labels added.
  std::vector<nlohmann::json> poll_incidents();
  // Rotates the segment when due.
  void tick(int64_t now_ns);
  // The store's housekeeping (SegmentedRecording::check): what the segments lost since the last call is counted in
  // the metrics; returns a line to log when writing stopped or began again, else "".
  std::string check_store(const std::string& not_writable);
  std::string store_error() const;  // why the job's events are not stored now, "" while they are
  // The events counted by tick() and stop() since the last call, by rank and layer (the fleet store's aggregates).
  std::map<std::pair<std::string, Layer>, JobEventTotals> drain_event_totals();
  // Stops the collectors, closes the segment, stores the job's incidents in it (findings of detector
  // "incident-online", as `record --detect`) and detaches the probes. Idempotent.
  void stop();
  std::string current_segment() const;
  std::string status() const;  // one line: collectors running, their messages

 private:
  Job job_;
  JobLabels labels_;
  std::string dir_;
  AgentMetrics& metrics_;
  std::unique_ptr<SegmentedRecording> segments_;
  std::unique_ptr<JobEventCounter> counter_;
  std::unique_ptr<online::OnlineDetector> detector_;
  std::vector<std::unique_ptr<Collector>> collectors_;
  std::vector<Collector*> running_;
  std::unique_ptr<SampleFanOut::Subscription> nvml_;  // the job's share of the node's NVML sampler
  std::unique_ptr<HostSamplerShare::Claim> host_claim_;  // the node's host sampler traces the job's processes...
  std::unique_ptr<SampleFanOut::Subscription> host_;   // ...and shares its series with the job
  std::unique_ptr<JsonLinesTail> incidents_;
  std::string status_;
  bool stopped_ = false;
  void count_store_loss();
  uint64_t lost_events_counted_ = 0, lost_samples_counted_ = 0;  // already in the metrics
};

}  // namespace stackscope::agent

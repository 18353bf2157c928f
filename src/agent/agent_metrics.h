// The agent's Prometheus metrics (prometheus-cpp's registry, text exposition): names by the Prometheus
// conventions (stackscope_ prefix, base units in the name, _total for counters), bounded label sets (job_name, pod,
// container, rank, layer, class, gpu, device; never a pid). The job's label is job_name, not job: Prometheus owns
// `job` (the scrape job) and would rename ours to exported_job. Series of a job are removed a grace period after it
// ends, so the last increments are still scraped. Thread-safe.
#pragma once
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "model/layer.h"
#include "model/sink.h"
#include "sample/self_cpu.h"

namespace prometheus {
class Registry;
class Counter;
class Gauge;
template <typename T>
class Family;
}  // namespace prometheus

namespace stackscope::agent {

struct JobLabels {
  std::string job;        // "<comm>-<leader pid>"
  std::string pod;        // Kubernetes pod UID, "" outside a pod
  std::string container;  // container id, "" outside one
};

class AgentMetrics {
 public:
  AgentMetrics(const std::string& host, const std::string& version);
  ~AgentMetrics();

  // The text exposition of every series (what /metrics returns).
  std::string scrape();

  // The node.
  void set_scan(double seconds, size_t processes, size_t jobs_traced, size_t jobs_untraced);
  void job_discovered();
  void set_store(size_t segments, uint64_t bytes, size_t deleted, uint64_t deleted_bytes);
  // Events and samples no segment took (a failed write, no segment, writing stopped below store.min_free).
  void add_store_loss(uint64_t events, uint64_t samples);
  void set_store_free(uint64_t bytes);  // free on the data_dir's file system
  void set_agent_resources(const SelfCpu& cpu, uint64_t rss_bytes);
  void reloaded(bool ok);

  // A job's series. job_started declares its info series; job_ended schedules the removal of all of them.
  void job_started(const JobLabels& labels, double start_unix_s, unsigned libraries);
  void set_job_processes(const JobLabels& labels, size_t processes);
  void job_ended(const JobLabels& labels);
  void add_job_events(const JobLabels& labels, const std::string& rank, Layer layer, uint64_t n);
  void add_job_drops(const JobLabels& labels, uint64_t n);

  // Incidents as the online engine reports them: opened (with its class then), its class changed, closed.
  void incident_opened(const JobLabels& labels, const std::string& cls);
  void incident_cause_changed(const JobLabels& labels, const std::string& from, const std::string& to);
  void incident_closed(const JobLabels& labels, const std::string& cls);

  // Host and GPU series of the node's samplers: a sink that forwards everything to `next` and exports the series
  // it can name (at most `max_series`; others are counted in stackscope_host_series_skipped).
  std::unique_ptr<TelemetrySink> host_exporter(TelemetrySink& next, size_t max_series);

  // Removes the series of jobs that ended more than `grace` ago.
  void expire(std::chrono::steady_clock::duration grace);

  prometheus::Registry& registry() { return *registry_; }

 private:
  friend class HostSeriesExporter;
  std::map<std::string, std::string> job_label_map(const JobLabels& l) const;
  std::shared_ptr<prometheus::Registry> registry_;
  std::mutex mu_;
  struct Families;
  std::unique_ptr<Families> f_;
  std::map<std::string, std::chrono::steady_clock::time_point> ended_;  // job -> when
  std::map<std::string, JobLabels> labels_of_;
  std::map<std::string, prometheus::Gauge*> thread_cpu_;  // thread name -> its series
};

// The Prometheus name of a stackscope series ("gpu.mem.used", "bytes", gauge -> stackscope_gpu_mem_used_bytes;
// "gpu.energy", "joules", counter -> stackscope_gpu_energy_joules_total) and the factor from its unit to the base
// unit (jiffies, milliseconds, microseconds -> seconds; microjoules -> joules). "" when it is not exported.
struct PromName {
  std::string name;
  double scale = 1;
  bool counter = false;
};
PromName prometheus_name(const SeriesInfo& info);

}  // namespace stackscope::agent

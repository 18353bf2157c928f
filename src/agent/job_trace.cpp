#include "agent/job_trace.h"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "agent/segment_store.h"
#include "online/collectors.h"
#include "online/online_detector.h"
#include "model/clock.h"
#include "store/recording_reader.h"

namespace stackscope::agent {

std::vector<nlohmann::json> JsonLinesTail::poll() {
  std::vector<nlohmann::json> out;
  // Polled five times a second for every job, and mostly unchanged: its size says whether to open it.
  struct stat st{};
  if (::stat(path_.c_str(), &st) != 0 || static_cast<uint64_t>(st.st_size) <= offset_) return out;
  std::ifstream in(path_, std::ios::binary);
  if (!in) return out;
  in.seekg(static_cast<std::streamoff>(offset_));
  std::string chunk((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  offset_ += chunk.size();
  partial_ += chunk;
  size_t from = 0;
  for (size_t eol; (eol = partial_.find('\n', from)) != std::string::npos; from = eol + 1) {
    const std::string line = partial_.substr(from, eol - from);
    if (line.empty()) continue;
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded()) out.push_back(std::move(j));
  }
  partial_.erase(0, from);
  return out;
}

// Counts the job's events by rank and layer (and its drops) on their way to the segments; tick() hands the counts
// to the metrics, so the hot path takes one uncontended lock and no Prometheus label lookup.
class JobEventCounter final : public TelemetrySink {
 public:
  explicit JobEventCounter(TelemetrySink& next) : next_(next) {}
  SeriesId add_series(const SeriesInfo& info) override { return next_.add_series(info); }
  void append_event(Event&& e) override {
    {
      std::lock_guard lk(mu_);
      auto& p = pending_[{e.pid, static_cast<int>(e.layer)}];
      ++p.events;
      if (!(e.flags & kEventInstant)) {
        p.duration_ns += e.duration_ns;
        if (e.layer == Layer::cuda && e.name.find("Synchronize") != std::string::npos) p.wait_ns += e.duration_ns;
      }
    }
    next_.append_event(std::move(e));
  }
  void append_samples(std::span<const Sample> samples) override { next_.append_samples(samples); }
  void add_drops(std::string_view source, uint64_t n) override {
    {
      std::lock_guard lk(mu_);
      drops_ += n;
    }
    next_.add_drops(source, n);
  }
  void add_note(std::string_view source, std::string_view text) override { next_.add_note(source, text); }

  void set_ranks(std::map<uint32_t, std::string> ranks) {
    std::lock_guard lk(mu_);
    ranks_ = std::move(ranks);
  }
  void flush_to(AgentMetrics& m, const JobLabels& labels) {
    std::map<std::pair<uint32_t, int>, JobEventTotals> counts;
    uint64_t drops = 0;
    std::map<uint32_t, std::string> ranks;
    {
      std::lock_guard lk(mu_);
      counts.swap(pending_);
      std::swap(drops, drops_);
      ranks = ranks_;
    }
    // Threads and children of a rank count as the rank they belong to once discovery has seen them.
    for (const auto& [key, n] : counts) {
      auto r = ranks.find(key.first);
      const std::string rank = r == ranks.end() ? std::string() : r->second;
      m.add_job_events(labels, rank, static_cast<Layer>(key.second), n.events);
      auto& t = totals_[{rank, static_cast<Layer>(key.second)}];
      t.events += n.events;
      t.duration_ns += n.duration_ns;
      t.wait_ns += n.wait_ns;
    }
    if (drops) m.add_job_drops(labels, drops);
  }
  // What flush_to counted since the last call (only flush_to's caller's thread touches totals_).
  std::map<std::pair<std::string, Layer>, JobEventTotals> drain_totals() { return std::exchange(totals_, {}); }

 private:
  TelemetrySink& next_;
  std::mutex mu_;
  std::map<std::pair<uint32_t, int>, JobEventTotals> pending_;
  uint64_t drops_ = 0;
  std::map<uint32_t, std::string> ranks_;
  std::map<std::pair<std::string, Layer>, JobEventTotals> totals_;  // by rank and layer
};

namespace {
std::map<uint32_t, std::string> ranks_of(const Job& job) {
  std::map<uint32_t, std::string> r;
  for (const auto& [pid, p] : job.processes) r[pid] = p.rank;
  return r;
}
}  // namespace

JobTrace::JobTrace(const Job& job, const AgentConfig& config, const std::map<std::string, std::string>& host_meta,
                   AgentMetrics& metrics, SampleFanOut* node_nvml, HostSamplerShare* node_host,
                   std::shared_ptr<StoreManifest> manifest)
    : job_(job), labels_{job.name, job.labels.pod_uid, job.labels.container_id}, metrics_(metrics) {
  // Named as first seen ("torchrun-1766-20508"): the leader may rename itself later, the job stays the same. A
  // name is any bytes its process chose: a '/' in it would make a path out of data_dir/jobs ("../../x").
  const auto leader = job.processes.find(job.leader);
  std::string folder = job.name;
  std::replace(folder.begin(), folder.end(), '/', '_');
  dir_ = config.data_dir + "/jobs/" + folder + "-" +
         (leader != job.processes.end() ? std::to_string(leader->second.start_ticks) : job.id);
  SegmentOptions so;
  so.dir = dir_;
  so.prefix = "segment";
  so.max_duration_ns = config.segment_duration_ns;
  so.max_bytes = config.segment_size_bytes;
  so.meta = host_meta;
  so.manifest = manifest;
  so.meta["pid"] = std::to_string(job.leader);
  so.meta["command"] = job.processes.at(job.leader).comm;  // the name only: no arguments (they may hold secrets)
  // Discovery made these valid UTF-8; replace, not throw, should anything else come through.
  so.meta["agent_job"] = nlohmann::json{{"id", job.id}, {"job", labels_.job}, {"pod", labels_.pod},
                                        {"container", labels_.container}, {"cgroup", job.labels.cgroup}}
                             .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  const auto choice = online::choose_layers(parse_layer_list(config.layers));
  if (choice.layers.empty()) throw std::runtime_error("no layer of '" + config.layers + "' can be traced here");
  so.meta["config"] = nlohmann::json{{"layers", online::layer_names(choice.layers)}, {"interval_ms", config.interval_ms},
                                     {"detail", "budgeted"}, {"budget_pct", config.budget_pct}, {"agent", true}}
                          .dump();
  segments_ = std::make_unique<SegmentedRecording>(so);
  counter_ = std::make_unique<JobEventCounter>(*segments_);
  counter_->set_ranks(ranks_of(job));

  CollectorOptions copt;
  copt.interval_ms = config.interval_ms;
  copt.host = host_meta.count("host") ? host_meta.at("host") : std::string();
  for (const auto& [pid, p] : job.processes) copt.pids.push_back(pid);
  TelemetrySink* sink = counter_.get();
  if (config.detect) {
    const std::string log = dir_ + "/incidents.jsonl";
    if (manifest) manifest->add_file(log);
    // The job's log is appended to (the agent restarted while the job ran): its earlier lines are the incidents the
    // agent restored at its start, not reports of this tracer. Each line names the job, so the log alone does.
    struct stat before{};
    const uint64_t earlier = ::lstat(log.c_str(), &before) == 0 ? static_cast<uint64_t>(before.st_size) : 0;
    online::OnlineDetectOptions dopt{.horizon_s = config.detect_horizon_s,
                                     .log_path = log,
                                     .log_fields = {{"job", labels_.job},
                                                    {"pod", labels_.pod},
                                                    {"container", labels_.container},
                                                    {"job_id", job.id}},
                                     .host = copt.host};
    detector_ = std::make_unique<online::OnlineDetector>(*counter_, std::set<uint32_t>(copt.pids.begin(), copt.pids.end()),
                                                      dopt);
    incidents_ = std::make_unique<JsonLinesTail>(log, earlier);
    sink = detector_.get();
  }
  online::raise_memlock_limit();
  online::TraceDetail detail{false, config.budget_pct, config.ringbuf_bytes};
  // One NVML sampler a node: a second one doubles NVML's cost, and its XID event set on the same GPUs can spin a
  // core.
  std::vector<Layer> own = choice.layers;
  const bool shared_nvml = node_nvml && node_nvml->feeding() && std::erase(own, Layer::nvml) > 0;
  // One host sampler a node too (host_sampler_share.h): the node's reads every family once for both.
  if (node_host && std::find(own.begin(), own.end(), Layer::host) != own.end() &&
      (host_claim_ = node_host->claim(copt.pids)))
    std::erase(own, Layer::host);
  collectors_ = online::make_collectors(own, online::PythonOptions{}, detail);
  for (auto& c : collectors_) {
    CollectorStatus st = c->start(*sink, copt);
    if (!st.message.empty()) status_ += (status_.empty() ? "" : "; ") + c->name() + ": " + st.message;
    if (st.running) running_.push_back(c.get());
  }
  if (shared_nvml) {
    sink->add_note("nvml", fmt::format("GPU series and XID events from the agent's node NVML sampler (one a node, "
                                       "shared by the jobs it traces), every {} ms",
                                       config.interval_ms));
    nvml_ = node_nvml->subscribe(*sink, config.interval_ms, SampleFanOut::Consumer::job);
    status_ += std::string(status_.empty() ? "" : "; ") + "nvml: the node's sampler";
  }
  if (host_claim_) {
    sink->add_note("procfs", fmt::format("host series from the agent's node host sampler (one a node, tracing this "
                                         "job's processes), every {} ms",
                                         config.interval_ms));
    host_ = node_host->fan().subscribe(*sink, config.interval_ms, SampleFanOut::Consumer::job);
    status_ += std::string(status_.empty() ? "" : "; ") + "host: the node's sampler";
  }
  if (running_.empty() && !nvml_ && !host_) {
    stop();
    throw std::runtime_error("no collector could start (" + status_ + ")");
  }
  metrics_.job_started(labels_, static_cast<double>(realtime_ns()) * 1e-9, job.libraries);
  metrics_.set_job_processes(labels_, job.processes.size());
}

JobTrace::~JobTrace() {
  try {
    stop();
  } catch (const std::exception& e) {
    std::cerr << "stackscope agent: " << job_.name << ": " << e.what() << "\n";
  }
}

void JobTrace::update(const Job& job) {
  for (const auto& [pid, p] : job.processes)
    if (!job_.processes.count(pid))
      for (auto* c : running_) c->add_pid(pid);
  if (host_claim_)
    for (const auto& [pid, p] : job.processes) host_claim_->add_pid(pid);
  job_.processes = job.processes;
  counter_->set_ranks(ranks_of(job_));
  metrics_.set_job_processes(labels_, job_.processes.size());
}

std::vector<nlohmann::json> JobTrace::poll_incidents() {
  std::vector<nlohmann::json> out;
  if (!incidents_) return out;
  for (auto& j : incidents_->poll()) {
    j["job"] = labels_.job;
    j["pod"] = labels_.pod;
    j["container"] = labels_.container;
    j["job_id"] = job_.id;
    out.push_back(std::move(j));
  }
  return out;
}

void JobTrace::tick(int64_t now_ns) {
  if (stopped_) return;
  counter_->flush_to(metrics_, labels_);
  segments_->maybe_rotate(now_ns);
}

std::string JobTrace::check_store(const std::string& not_writable) {
  if (stopped_) return {};
  std::string line = segments_->check(not_writable);
  count_store_loss();
  return line;
}

void JobTrace::count_store_loss() {
  const StoreLoss lost = segments_->lost();
  const uint64_t events = lost.events - lost_events_counted_, samples = lost.samples - lost_samples_counted_;
  if (events) metrics_.add_job_drops(labels_, events);
  metrics_.add_store_loss(events, samples);
  lost_events_counted_ = lost.events;
  lost_samples_counted_ = lost.samples;
}

std::string JobTrace::store_error() const { return stopped_ ? std::string() : segments_->error(); }

void JobTrace::stop() {
  if (stopped_) return;
  stopped_ = true;
  // As `record` ends: collectors stopped, the segment closed, the incidents stored in it, then the probes detached.
  for (auto* c : running_) c->stop();
  nvml_.reset();
  host_.reset();
  host_claim_.reset();
  const std::string last = segments_->close();
  count_store_loss();  // the last segment's, counted as it closed
  if (detector_) {
    auto findings = detector_->finish();
    try {
      if (!findings.empty() && !last.empty()) store_findings(last, "incident-online", findings);
    } catch (const std::exception& e) {  // the probes are detached all the same
      std::cerr << "stackscope agent: " << job_.name << ": incidents not stored in " << last << ": " << e.what() << "\n";
    }
  }
  for (auto* c : running_) c->release();
  counter_->flush_to(metrics_, labels_);
}

std::map<std::pair<std::string, Layer>, JobEventTotals> JobTrace::drain_event_totals() {
  return counter_->drain_totals();
}

std::string JobTrace::current_segment() const { return stopped_ ? std::string() : segments_->current_path(); }
std::string JobTrace::status() const { return status_; }

}  // namespace stackscope::agent

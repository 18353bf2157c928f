#include "agent/agent.h"

#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <functional>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "agent/clickhouse_sink.h"
#include "agent/host_sampler_share.h"
#include "agent/http_endpoint.h"
#include "agent/job_discovery.h"
#include "agent/job_trace.h"
#include "agent/sample_fan_out.h"
#include "agent/segment_store.h"
#include "online/collectors.h"
#include "model/clock.h"
#include "sample/host_info.h"
#include "sample/procfs_sampler.h"
#include "sample/self_cpu.h"

namespace stackscope::agent {

namespace {
void log_line(const std::string& text) { std::cerr << "stackscope agent: " << text << "\n" << std::flush; }
}  // namespace

// The node's own samplers (host and GPU series whether or not a job runs) into DATA_DIR/node segments and /metrics.
// Its NVML sampler is the node's only one: it writes into `nvml_fan`, which hands its samples to the node's segments
// at host_interval_ms and to each traced job at the job's interval (the sampler then runs at the fastest). Its host
// sampler likewise writes into `host`'s fan-out, read by the node and by the job that claims it (host_sampler_share.h).
class NodeTelemetry {
 public:
  NodeTelemetry(const AgentConfig& c, const std::map<std::string, std::string>& host_meta, AgentMetrics& metrics,
                ClickHouseSink* fleet, SampleFanOut& nvml_fan, HostSamplerShare& host_share,
                std::shared_ptr<StoreManifest> manifest)
      : metrics_(metrics), nvml_fan_(nvml_fan), host_(host_share) {
    std::vector<Layer> wanted;
    for (Layer l : parse_layer_list(c.host_layers.empty() ? "host" : c.host_layers))
      if (l == Layer::host || l == Layer::nvml) wanted.push_back(l);
    if (c.host_layers.empty()) wanted.clear();
    SegmentOptions so;
    so.dir = c.data_dir + "/node";
    so.prefix = "node";
    so.max_duration_ns = c.segment_duration_ns;
    so.max_bytes = c.segment_size_bytes;
    so.meta = host_meta;
    so.manifest = std::move(manifest);
    so.meta["config"] = nlohmann::json{{"layers", online::layer_names(wanted)}, {"interval_ms", c.host_interval_ms},
                                       {"agent", true}}
                            .dump();
    segments_ = std::make_unique<SegmentedRecording>(so);
    if (fleet) fleet_tee_ = fleet->sample_tee(*segments_);  // the node's samples to the fleet store too
    exporter_ = metrics.host_exporter(fleet_tee_ ? *fleet_tee_ : *segments_, c.max_host_series);
    CollectorOptions copt;
    copt.interval_ms = c.host_interval_ms;
    copt.host = host_meta.count("host") ? host_meta.at("host") : std::string();
    // An idle node (no job traced: the fan-out's live_idle) reads its costlier series on the idle schedule.
    NvmlSamplerOptions nvml;
    nvml.live_interval_ms = nvml_fan_.live_interval_ms();
    nvml.live_idle = nvml_fan_.live_idle();
    nvml.idle_slow_interval_ms = c.host_idle_gpu_slow_interval_ms;
    SampleFanOut& host_fan = host_.fan();
    ProcfsSamplerOptions host;
    host.live_interval_ms = host_fan.live_interval_ms();
    host.live_idle = host_fan.live_idle();
    host.idle_period_ms = c.host_idle_host_slow_interval_ms;
    ProcfsSampler* procfs = nullptr;
    for (Layer l : wanted) {
      if (l == Layer::nvml) {
        collectors_.push_back(make_nvml_sampler(nvml));
        continue;
      }
      auto sampler = std::make_unique<ProcfsSampler>(host);
      procfs = sampler.get();
      collectors_.push_back(std::move(sampler));
    }
    for (auto& col : collectors_) {
      SampleFanOut& fan = col->layer() == Layer::nvml ? nvml_fan_ : host_fan;
      (col->layer() == Layer::nvml ? nvml_sub_ : host_sub_) =
          fan.subscribe(*exporter_, c.host_interval_ms, SampleFanOut::Consumer::node);
      CollectorStatus st = col->start(fan, copt);
      if (!st.message.empty()) log_line("node " + col->name() + ": " + st.message);
      if (st.running) running_.push_back(col.get());
      fan.set_feeding(st.running);
      if (st.running && col.get() == procfs) host_.attach(procfs);
    }
  }
  ~NodeTelemetry() {
    host_.attach(nullptr);
    for (auto* c : running_) c->stop();
    nvml_fan_.set_feeding(false);
    host_.fan().set_feeding(false);
    nvml_sub_.reset();
    host_sub_.reset();
    segments_->close();
    count_store_loss();
    for (auto* c : running_) c->release();
  }
  void tick(int64_t now) { segments_->maybe_rotate(now); }
  std::string current_segment() const { return segments_->current_path(); }
  // SegmentedRecording::check, with what the segments lost counted in the metrics.
  std::string check_store(const std::string& not_writable) {
    std::string line = segments_->check(not_writable);
    count_store_loss();
    return line;
  }
  std::string store_error() const { return segments_->error(); }

 private:
  void count_store_loss() {
    const StoreLoss lost = segments_->lost();
    metrics_.add_store_loss(lost.events - counted_.events, lost.samples - counted_.samples);
    counted_ = lost;
  }
  AgentMetrics& metrics_;
  StoreLoss counted_;
  SampleFanOut& nvml_fan_;
  HostSamplerShare& host_;
  std::unique_ptr<SegmentedRecording> segments_;
  std::unique_ptr<TelemetrySink> fleet_tee_;
  std::unique_ptr<TelemetrySink> exporter_;
  std::unique_ptr<SampleFanOut::Subscription> nvml_sub_;  // the node's share of its NVML sampler
  std::unique_ptr<SampleFanOut::Subscription> host_sub_;  // and of its host sampler
  std::vector<std::unique_ptr<Collector>> collectors_;
  std::vector<Collector*> running_;
};

Agent::Agent(std::string config_path, std::map<std::string, std::string> overrides, std::string version)
    : config_path_(std::move(config_path)), overrides_(std::move(overrides)), version_(std::move(version)) {
  config_ = load_agent_config(config_path_, overrides_);
  host_meta_ = host_meta(read_host_info());
  metrics_ = std::make_unique<AgentMetrics>(host_meta_["host"], version_);
  node_nvml_ = std::make_unique<SampleFanOut>(config_.host_interval_ms);
  node_host_ = std::make_unique<HostSamplerShare>(config_.host_interval_ms);
  scanner_ = std::make_unique<JobScanner>(job_library_mask(config_.job_libraries));
  token_ = read_token(config_);
}

Agent::~Agent() = default;

int Agent::port() const { return http_ ? http_->port() : 0; }

std::string Agent::read_token(const AgentConfig& c) {
  return c.http_token_file.empty() ? std::string() : read_http_token(c.http_token_file);
}

std::unique_ptr<HttpEndpoint> Agent::make_http(const std::string& listen, const std::string& token) {
  std::map<std::string, HttpEndpoint::Handler> routes;
  routes["/metrics"] = [this] {
    return HttpResponse{200, "text/plain; version=0.0.4; charset=utf-8", metrics_->scrape()};
  };
  routes["/healthz"] = [this] {
    nlohmann::json h = health_json();
    return HttpResponse{h["status"] == "ok" ? 200 : 503, "application/json", h.dump() + "\n"};
  };
  routes["/api/incidents"] = [this] { return HttpResponse{200, "application/json", incidents_json().dump() + "\n"}; };
  // /healthz stays open: the kubelet's probes carry no token.
  auto http = std::make_unique<HttpEndpoint>(listen, std::move(routes), token, std::set<std::string>{"/healthz"});
  const std::string host = listen.substr(0, listen.rfind(':'));
  log_line(fmt::format("listening on {}:{} (/metrics, /healthz, /api/incidents{})", host, http->port(),
                       token.empty() ? "" : "; all but /healthz need the bearer token"));
  return http;
}

std::string Agent::move_http(const std::string& listen, const std::string& token) {
  std::string why;
  try {
    http_ = make_http(listen, token);  // the old listener closes only once the new one listens
    return {};
  } catch (const std::exception& e) {
    why = e.what();
  }
  auto port_of = [](const std::string& l) { return l.substr(l.rfind(':') + 1); };
  if (!http_ || port_of(listen) == "0" || port_of(listen) != port_of(http_->listen())) return why;
  // The same port on another address (loopback to 0.0.0.0): the old listener holds the port, so it goes first, and
  // comes back when the new one cannot listen either.
  const std::string old = http_->listen();
  http_.reset();
  try {
    http_ = make_http(listen, token);
    return {};
  } catch (const std::exception& e) {
    why = e.what();
  }
  try {
    http_ = make_http(old, token_);
  } catch (const std::exception& e) {
    why += std::string("; and again on ") + old + ": " + e.what() + " (nothing listens until a reload)";
  }
  return why;
}

bool Agent::ensure_store() {
  if (manifest_ && manifest_->root() == StoreManifest::normal(config_.data_dir)) return true;
  manifest_.reset();
  std::string error;
  try {
    std::error_code ec;
    std::filesystem::create_directories(config_.data_dir, ec);
    if (ec) throw std::runtime_error(ec.message());
    manifest_ = std::make_shared<StoreManifest>(config_.data_dir);
    if (manifest_->adopted())
      log_line(fmt::format("{} segments of an earlier agent in {} listed as the agent's (retention deletes them)",
                           manifest_->adopted(), config_.data_dir));
  } catch (const std::exception& e) {
    error = fmt::format("cannot use data_dir {}: {} (retried every scan)", config_.data_dir, e.what());
  }
  if (error != data_dir_error_ && !error.empty()) log_line(error);
  data_dir_error_ = error;
  return manifest_ != nullptr;
}

void Agent::check_store() {
  std::vector<std::string> problems;
  std::string not_writable;
  if (ensure_store()) {
    uint64_t fs_bytes = 0;
    uint64_t free = free_bytes(config_.data_dir, &fs_bytes);
    const uint64_t floor = config_.min_free_floor(fs_bytes);
    if (free != UINT64_MAX && free < floor) {
      retention();  // the oldest segments go first
      free = free_bytes(config_.data_dir);
    }
    if (free != UINT64_MAX) {
      metrics_->set_store_free(free);
      // After a failed write (the disk full) a new segment needs room, not just the reserve the failed one freed;
      // writing starts again a quarter above what is needed, not in a new segment every pass around it.
      constexpr uint64_t kRoomAfterFailure = 8ull << 20;
      const uint64_t need = store_failed_ ? std::max(floor, kRoomAfterFailure) : floor;
      store_paused_ = free < need + (store_paused_ ? need / 4 : 0);
      if (store_paused_)
        not_writable = fmt::format("{:.1f} MiB free on the file system of {}, below {} {:.1f} MiB",
                                   static_cast<double>(free) / 1048576.0, config_.data_dir,
                                   need > floor ? "the room kept after a failed write," : "store.min_free",
                                   static_cast<double>(need) / 1048576.0);
    }
    if (fleet_retry_) {  // it could not start for want of a data_dir (its spool is there)
      fleet_retry_ = false;
      try {
        start_fleet();
      } catch (const std::exception& e) {
        log_line(std::string("no fleet store: ") + e.what());
      }
    }
    if (!node_) {
      std::string error;
      try {
        start_node();
      } catch (const std::exception& e) {
        error = std::string("the node's segments: ") + e.what();
      }
      if (error != node_error_ && !error.empty()) log_line(error);
      node_error_ = error;
      if (!error.empty()) problems.push_back(error);
    }
  } else {
    problems.push_back(data_dir_error_);
  }
  bool segments_failed = false;
  if (node_) {
    if (auto line = node_->check_store(not_writable); !line.empty()) log_line("node: " + line);
    if (auto e = node_->store_error(); !e.empty()) {
      problems.push_back("node: " + e);
      segments_failed = true;
    }
  }
  for (auto& [id, t] : jobs_) {
    if (auto line = t->check_store(not_writable); !line.empty()) log_line(fmt::format("job {}: {}", t->labels().job, line));
    if (auto e = t->store_error(); !e.empty()) {
      problems.push_back(fmt::format("job {}: {}", t->labels().job, e));
      segments_failed = true;
    }
  }
  store_failed_ = segments_failed;
  std::string error;
  for (const auto& p : problems) error += (error.empty() ? "" : "; ") + p;
  std::lock_guard lk(mu_);
  // Jobs that could not be traced for want of a store are tried again once it works.
  if (!store_error_.empty() && error.empty()) failed_jobs_.clear();
  store_error_ = error;
}

void Agent::start_node() {
  node_.reset();
  if (!ensure_store()) throw std::runtime_error(data_dir_error_);
  node_ = std::make_unique<NodeTelemetry>(config_, host_meta_, *metrics_, fleet_.get(), *node_nvml_, *node_host_,
                                          manifest_);
}

void Agent::start_fleet() {
  node_.reset();  // its samples go to the sink
  std::unique_ptr<ClickHouseSink> before;
  {
    std::lock_guard lk(mu_);  // /healthz reads it
    before = std::move(fleet_);
  }
  before.reset();  // flushes into its spool (outside the lock: it may wait for ClickHouse a moment)
  if (config_.clickhouse.url.empty()) return;
  auto next = std::make_unique<ClickHouseSink>(config_.clickhouse, config_.data_dir, host_meta_["host"],
                                               metrics_->registry());
  log_line(fmt::format("fleet store: {} database {}", config_.clickhouse.url, config_.clickhouse.database));
  std::lock_guard lk(mu_);
  fleet_ = std::move(next);
}

void Agent::ship_event_counts(JobTrace& t) {
  auto totals = t.drain_event_totals();  // drained whether or not there is a store: they would only pile up
  if (!fleet_) return;
  for (const auto& [key, n] : totals)
    fleet_->add_event_counts(t.labels(), key.first, key.second, n.events, n.duration_ns, n.wait_ns);
}

nlohmann::json Agent::health_json() const {
  std::lock_guard lk(mu_);
  const int64_t now = monotonic_ns();
  const double scan_age = last_scan_ns_ ? static_cast<double>(now - last_scan_ns_) * 1e-9 : 0.0;
  // Unhealthy when the store failed or the loop has stopped scanning (three intervals late).
  const bool stalled = last_scan_ns_ && now - last_scan_ns_ > 3 * config_.scan_interval_ns + 5'000'000'000;
  nlohmann::json h = {{"status", store_error_.empty() && !stalled ? "ok" : "degraded"},
                      {"uptime_s", static_cast<double>(now - started_ns_) * 1e-9},
                      {"jobs_traced", jobs_traced_},
                      {"jobs_untraced", jobs_untraced_},
                      {"last_scan_age_s", scan_age},
                      {"store_error", store_error_}};
  if (fleet_) {  // an unreachable ClickHouse is not unhealthy: the spool holds the batches
    const auto st = fleet_->stats();
    h["clickhouse"] = {{"batches_sent", st.batches_sent}, {"rows_sent", st.rows_sent}, {"send_errors", st.send_errors},
                       {"spool_batches", st.spool_batches}, {"spool_bytes", st.spool_bytes},
                       {"dropped_rows", st.dropped_rows}, {"last_error", st.last_error}};
  }
  return h;
}

nlohmann::json Agent::incidents_json() const {
  std::lock_guard lk(mu_);
  nlohmann::json list = nlohmann::json::array();
  for (auto it = incidents_.rbegin(); it != incidents_.rend(); ++it) list.push_back(*it);  // newest first
  return {{"host", host_meta_.count("host") ? host_meta_.at("host") : ""}, {"incidents", std::move(list)}};
}

void Agent::restore_incidents() {
  namespace fs = std::filesystem;
  constexpr std::streamoff kMaxLogBytes = 16 << 20;  // a log's last 16 MiB: far more incidents than are kept
  std::vector<std::pair<fs::file_time_type, fs::path>> logs;
  std::error_code ec;
  for (auto it = fs::directory_iterator(config_.data_dir + "/jobs", ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    fs::path log = it->path() / "incidents.jsonl";
    std::error_code file_ec;
    if (!fs::is_regular_file(fs::symlink_status(log, file_ec))) continue;
    const auto when = fs::last_write_time(log, file_ec);
    if (!file_ec) logs.emplace_back(when, std::move(log));
  }
  std::sort(logs.begin(), logs.end());  // oldest first: the list keeps the newest last
  std::deque<nlohmann::json> restored;
  for (const auto& [when, log] : logs) {
    std::ifstream in(log, std::ios::binary | std::ios::ate);
    const std::streamoff size = in.tellg();
    in.seekg(std::max<std::streamoff>(0, size - kMaxLogBytes));
    if (size > kMaxLogBytes) in.ignore(kMaxLogBytes, '\n');  // the first line read whole
    std::vector<nlohmann::json> reports;  // each incident's last report, in the order they were first told
    std::map<int64_t, size_t> by_id;
    for (std::string line; std::getline(in, line);) {
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (!j.is_object() || !j.contains("id") || !j["id"].is_number_integer()) continue;
      const auto [at, added] = by_id.emplace(j["id"].get<int64_t>(), reports.size());
      if (added)
        reports.push_back(std::move(j));
      else
        reports[at->second] = std::move(j);
    }
    // A log written before the lines named the job: its folder does ("<job>-<start ticks>").
    const std::string folder = log.parent_path().filename().string();
    for (auto& j : reports) {
      if (!j.contains("job")) j["job"] = folder.substr(0, folder.rfind('-'));
      // Not closed in the log: the agent stopped while it was open, and how it ended is not known.
      const std::string what = j.value("online", "");
      j["state"] = what == "close" ? "closed" : what == "withdrawn" ? "withdrawn" : "interrupted";
      j["restored"] = true;
      restored.push_back(std::move(j));
      if (restored.size() > config_.max_incidents) restored.pop_front();
    }
  }
  if (!restored.empty())
    log_line(fmt::format("{} incident(s) restored from the job logs under {}/jobs", restored.size(), config_.data_dir));
  std::lock_guard lk(mu_);
  incidents_ = std::move(restored);
}

void Agent::handle_incidents(JobTrace& t) {
  for (auto& j : t.poll_incidents()) {
    const std::string what = j.value("online", "");
    const std::string cls = j.contains("cause") && j["cause"].is_object() ? j["cause"].value("class", "unexplained")
                                                                           : "unexplained";
    const int id = j.value("id", 0);
    const std::string job_id = j.value("job_id", "");
    if (fleet_) fleet_->add_incident(t.labels(), j);
    std::lock_guard lk(mu_);
    auto match = std::find_if(incidents_.begin(), incidents_.end(), [&](const nlohmann::json& x) {
      return x.value("job_id", "") == job_id && x.value("id", 0) == id;
    });
    std::string before;
    if (match != incidents_.end() && match->contains("cause") && (*match)["cause"].is_object())
      before = (*match)["cause"].value("class", "unexplained");
    if (what == "open") {
      metrics_->incident_opened(t.labels(), cls);
      log_line(fmt::format("{}: incident #{} opened: {}", t.labels().job, id, cls));
    } else if (what == "cause" && !before.empty()) {
      metrics_->incident_cause_changed(t.labels(), before, cls);
    } else if (what == "close") {
      metrics_->incident_closed(t.labels(), before.empty() ? cls : before);
      if (!before.empty() && before != cls) {  // the class it closed with was never announced as a change
        metrics_->incident_cause_changed(t.labels(), before, cls);
        metrics_->incident_closed(t.labels(), cls);
      }
      log_line(fmt::format("{}: incident #{} closed: {}", t.labels().job, id, cls));
    }
    j["state"] = what == "close" ? "closed" : "open";
    if (match != incidents_.end()) {
      *match = std::move(j);
    } else {
      incidents_.push_back(std::move(j));
      while (incidents_.size() > config_.max_incidents) incidents_.pop_front();
    }
  }
}

void Agent::scan(int64_t now) {
  const int64_t t0 = monotonic_ns();
  auto found = scanner_->scan();
  std::set<std::string> remnants;  // found jobs that are what is left of a traced one
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    if (found.count(it->first)) {
      ++it;
      continue;
    }
    JobTrace& t = *it->second;
    // Its leader has exited but some of its processes live on (a launcher gone before its ranks): the same job,
    // traced on by the same tracer, not new jobs (a tracer and an incident engine each, started as the job ends).
    if (const auto rest = remnants_of(t.job(), found); !rest.empty()) {
      Job left = t.job();
      left.processes.clear();
      for (const auto& id : rest) {
        left.processes.insert(found.at(id).processes.begin(), found.at(id).processes.end());
        remnants.insert(id);
      }
      t.update(left);
      ++it;
      continue;
    }
    try {
      t.stop();
      handle_incidents(t);  // the closes of its last pass
      ship_event_counts(t);
    } catch (const std::exception& e) {
      log_line(fmt::format("job {}: {}", t.labels().job, e.what()));
    }
    metrics_->job_ended(t.labels());
    log_line(fmt::format("job {} ended; its segments are in {}", t.labels().job, t.dir()));
    it = jobs_.erase(it);
    // A job's tracer frees tens of MB (symbol tables of its libraries, buffers): given back to the system, so the
    // agent's RSS on an idle node does not keep the high-water mark of its last job.
    ::malloc_trim(0);
  }
  std::erase_if(failed_jobs_, [&](const std::string& id) { return !found.count(id); });
  std::erase_if(untraced_jobs_, [&](const std::string& id) { return !found.count(id); });
  std::map<uint32_t, int> per_user;  // traced jobs by user
  for (const auto& [id, t] : jobs_) ++per_user[t->job().uid];
  size_t untraced = 0;
  for (auto& [id, job] : found) {
    if (auto it = jobs_.find(id); it != jobs_.end()) {
      it->second->update(job);
      continue;
    }
    if (failed_jobs_.count(id) || remnants.count(id)) continue;
    if (config_.command_matcher && !config_.command_matcher->matches(job.command))
      continue;  // not one the operator asked for
    if (!config_.users.empty() && !config_.users.count(job.uid)) continue;  // nor a user it named
    std::string full;
    if (jobs_.size() >= static_cast<size_t>(config_.max_jobs))
      full = fmt::format("discovery.max_jobs ({}) are traced", config_.max_jobs);
    // Root is exempt: it could stop the agent anyway, and pods often run every job as root.
    else if (job.uid != 0 && per_user[job.uid] >= config_.max_jobs_per_user)
      full = fmt::format("uid {} has discovery.max_jobs_per_user ({}) traced", job.uid, config_.max_jobs_per_user);
    if (!full.empty()) {  // traced once a slot is free; said once
      ++untraced;
      if (untraced_jobs_.insert(id).second)
        log_line(fmt::format("not tracing job {} (pid {}, uid {}) for now: {}", job.name, job.leader, job.uid, full));
      continue;
    }
    untraced_jobs_.erase(id);
    metrics_->job_discovered();
    try {
      auto t = std::make_unique<JobTrace>(job, config_, host_meta_, *metrics_, node_nvml_.get(), node_host_.get(),
                                          manifest_);
      log_line(fmt::format("tracing job {} (pid {}, {} process(es){}{}){}", t->labels().job, job.leader,
                           job.processes.size(), job.labels.pod_uid.empty() ? "" : ", pod " + job.labels.pod_uid,
                           job.labels.container_id.empty() ? "" : ", container " + job.labels.container_id.substr(0, 12),
                           t->status().empty() ? "" : ": " + t->status()));
      jobs_[id] = std::move(t);
      ++per_user[job.uid];
    } catch (const std::exception& e) {
      failed_jobs_.insert(id);
      log_line(fmt::format("cannot trace job {}: {}", job.name, e.what()));
    }
  }
  const double seconds = static_cast<double>(monotonic_ns() - t0) * 1e-9;
  metrics_->set_scan(seconds, scanner_->processes_seen(), jobs_.size(), untraced);
  std::lock_guard lk(mu_);
  jobs_traced_ = jobs_.size();
  jobs_untraced_ = untraced;
  last_scan_ns_ = now;
}

void Agent::reload() {
  AgentConfig next;
  std::string token;
  try {
    next = load_agent_config(config_path_, overrides_);
    token = read_token(next);
  } catch (const std::exception& e) {
    metrics_->reloaded(false);
    log_line(std::string("reload refused, the running configuration stays: ") + e.what());
    return;
  }
  const AgentConfig before = config_;
  const std::string listen_asked = next.listen;
  std::string listen_refused;
  if (next.listen != before.listen || !http_) {
    listen_refused = move_http(next.listen, token);
    // Still served where it was: the running configuration keeps that address, so the next reload, finding the
    // file's address different, tries it again.
    if (!listen_refused.empty()) next.listen = before.listen;
  }
  if (http_) http_->set_token(token);
  token_ = token;
  {
    std::lock_guard lk(mu_);
    config_ = next;
  }
  const bool store_ok = ensure_store();
  try {
    if (next.clickhouse != before.clickhouse || next.data_dir != before.data_dir) {
      if (!store_ok) {
        fleet_retry_ = !next.clickhouse.url.empty();
      } else {
        try {
          start_fleet();
        } catch (const std::exception& e) {  // the node's samplers go on without it
          log_line(std::string("reload: no fleet store: ") + e.what());
        }
      }
    }
    if (!node_ || next.host_layers != before.host_layers || next.host_interval_ms != before.host_interval_ms ||
        next.data_dir != before.data_dir || next.max_host_series != before.max_host_series ||
        next.host_idle_gpu_slow_interval_ms != before.host_idle_gpu_slow_interval_ms ||
        next.host_idle_host_slow_interval_ms != before.host_idle_host_slow_interval_ms)
      start_node();
  } catch (const std::exception& e) {  // the next scan tries again, and /healthz says why meanwhile
    log_line(std::string("reload: ") + e.what());
  }
  scanner_ = std::make_unique<JobScanner>(job_library_mask(next.job_libraries));
  metrics_->reloaded(listen_refused.empty());
  if (listen_refused.empty())
    log_line("configuration reloaded (jobs already traced keep their settings until they end)");
  else
    log_line(fmt::format("reload: listen {} refused: {}; still listening on {} (the next reload tries again); the "
                         "other settings are applied",
                         listen_asked, listen_refused, before.listen));
}

void Agent::retention() {
  if (!manifest_) return;
  std::set<std::string> open, keep;
  for (auto& [id, t] : jobs_) {
    open.insert(t->current_segment());
    keep.insert(t->dir());
  }
  if (node_) open.insert(node_->current_segment());
  keep.insert(config_.data_dir + "/node");
  uint64_t fs_bytes = 0;
  free_bytes(config_.data_dir, &fs_bytes);
  const auto r = apply_retention(*manifest_, config_.retention_size_bytes, config_.retention_age_ns,
                                 config_.min_free_floor(fs_bytes), open, keep);
  metrics_->set_store(r.segments, r.bytes, r.deleted, r.deleted_bytes);
  if (r.free_bytes != UINT64_MAX) metrics_->set_store_free(r.free_bytes);
}

void Agent::self_resources() {
  std::ifstream statm("/proc/self/statm");
  uint64_t size = 0, resident = 0;
  statm >> size >> resident;
  metrics_->set_agent_resources(read_self_cpu(), resident * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE)));
}

int Agent::run(const std::atomic<bool>& stop, std::atomic<bool>& reload_requested) {
  started_ns_ = monotonic_ns();
  restore_incidents();  // what the jobs' logs hold from before a restart
  // A data_dir that cannot be made, or a node store that cannot start, leaves the agent serving a degraded /healthz
  // that says why; every scan tries again.
  if (ensure_store()) {
    try {
      start_fleet();
    } catch (const std::exception& e) {
      log_line(std::string("no fleet store: ") + e.what());
    }
  } else {
    fleet_retry_ = !config_.clickhouse.url.empty();
  }
  http_ = make_http(config_.listen, token_);
  check_store();  // starts the node's samplers
  int64_t next_scan = 0, next_housekeeping = 0;
  // A daemon goes on through one job's or one pass's failure (a full disk, a job that vanished mid-call): logged,
  // counted in /healthz, and the next pass tries again.
  auto guarded = [&](const char* what, const std::function<void()>& step) {
    try {
      step();
    } catch (const std::exception& e) {
      log_line(std::string(what) + ": " + e.what());
      std::lock_guard lk(mu_);
      if (std::string_view(what) == "store") store_error_ = e.what();
    }
  };
  while (!stop.load()) {
    if (reload_requested.exchange(false)) guarded("reload", [&] { reload(); });
    const int64_t now = monotonic_ns();
    if (now >= next_scan) {
      guarded("scan", [&] { scan(now); });
      guarded("store", [&] { check_store(); });
      next_scan = now + config_.scan_interval_ns;
    }
    for (auto& entry : jobs_) {
      JobTrace& t = *entry.second;
      guarded("incidents", [&] { handle_incidents(t); });
      guarded("store", [&] { t.tick(now); });
      ship_event_counts(t);
    }
    if (node_) guarded("store", [&] { node_->tick(now); });
    if (now >= next_housekeeping) {
      guarded("retention", [&] { retention(); });
      self_resources();
      metrics_->expire(std::chrono::minutes(5));
      next_housekeeping = now + 10'000'000'000;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  log_line(fmt::format("stopping: flushing {} job(s)", jobs_.size()));
  for (auto& entry : jobs_)
    guarded("stop", [&] {
      entry.second->stop();
      handle_incidents(*entry.second);
      ship_event_counts(*entry.second);
    });
  jobs_.clear();
  node_.reset();
  {
    std::unique_ptr<ClickHouseSink> fleet;
    {
      std::lock_guard lk(mu_);
      fleet = std::move(fleet_);
    }
    fleet.reset();  // what is buffered into the spool; sent if ClickHouse answers within a moment
  }
  http_.reset();
  log_line("stopped");
  return store_error_.empty() ? 0 : 3;
}

}  // namespace stackscope::agent

#include "agent/agent_metrics.h"

#include <unistd.h>

#include <cctype>
#include <functional>
#include <set>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include "model/clock.h"
#include "model/incident.h"

namespace stackscope::agent {

using prometheus::Counter;
using prometheus::Family;
using prometheus::Gauge;
using Labels = std::map<std::string, std::string>;

struct AgentMetrics::Families {
  explicit Families(prometheus::Registry& r)
      : info(prometheus::BuildGauge().Name("stackscope_agent_info").Help("The agent: 1, labelled by host and version").Register(r)),
        scan_seconds(prometheus::BuildGauge().Name("stackscope_agent_scan_duration_seconds").Help("Time the last /proc scan for jobs took").Register(r)),
        processes(prometheus::BuildGauge().Name("stackscope_agent_processes_scanned").Help("Processes the last scan looked at").Register(r)),
        scrape_seconds(prometheus::BuildGauge().Name("stackscope_agent_scrape_duration_seconds").Help("Time the previous /metrics exposition took").Register(r)),
        reloads(prometheus::BuildCounter().Name("stackscope_agent_config_reloads_total").Help("Configuration reloads (SIGHUP), by result").Register(r)),
        cpu(prometheus::BuildCounter().Name("process_cpu_seconds_total").Help("CPU time the agent used (user and system)").Register(r)),
        rss(prometheus::BuildGauge().Name("process_resident_memory_bytes").Help("Resident memory of the agent").Register(r)),
        thread_cpu(prometheus::BuildGauge().Name("stackscope_agent_thread_cpu_seconds").Help("CPU time of the agent's live threads, summed by thread name (ss-nvml, ss-drain, ...): where the agent's cost goes; a gauge, since a job's threads leave with it").Register(r)),
        jobs_traced(prometheus::BuildGauge().Name("stackscope_jobs_traced").Help("Jobs the agent traces now").Register(r)),
        jobs_untraced(prometheus::BuildGauge().Name("stackscope_jobs_untraced").Help("Jobs found but not traced (discovery.max_jobs or max_jobs_per_user reached)").Register(r)),
        discovered(prometheus::BuildCounter().Name("stackscope_jobs_discovered_total").Help("Jobs found since the agent started").Register(r)),
        segments(prometheus::BuildGauge().Name("stackscope_store_segments").Help("Recording segments kept on disk").Register(r)),
        store_bytes(prometheus::BuildGauge().Name("stackscope_store_size_bytes").Help("Bytes of the recording segments kept on disk").Register(r)),
        deleted(prometheus::BuildCounter().Name("stackscope_store_segments_deleted_total").Help("Segments deleted by retention").Register(r)),
        deleted_bytes(prometheus::BuildCounter().Name("stackscope_store_deleted_bytes_total").Help("Bytes deleted by retention").Register(r)),
        store_lost(prometheus::BuildCounter().Name("stackscope_store_dropped_total").Help("Events and samples no segment took (a failed write, a full disk, writing stopped below store.min_free), by kind").Register(r)),
        store_free(prometheus::BuildGauge().Name("stackscope_store_free_bytes").Help("Bytes free on the data_dir's file system").Register(r)),
        job_info(prometheus::BuildGauge().Name("stackscope_job_info").Help("A traced job: 1, with the libraries that made it one").Register(r)),
        job_start(prometheus::BuildGauge().Name("stackscope_job_start_time_seconds").Help("When the agent began tracing the job (Unix time)").Register(r)),
        job_processes(prometheus::BuildGauge().Name("stackscope_job_processes").Help("Processes of the job (launcher and ranks)").Register(r)),
        job_events(prometheus::BuildCounter().Name("stackscope_job_events_total").Help("Traced calls and occurrences of the job, by rank and layer").Register(r)),
        job_drops(prometheus::BuildCounter().Name("stackscope_job_dropped_events_total").Help("Events of the job lost before the store (full ring buffers, backlog)").Register(r)),
        incidents(prometheus::BuildCounter().Name("stackscope_incidents_total").Help("Incidents the online engine opened, by the root-cause class they opened with").Register(r)),
        incident_active(prometheus::BuildGauge().Name("stackscope_incident_active").Help("Incidents open now, by root-cause class").Register(r)),
        host_exported(prometheus::BuildGauge().Name("stackscope_host_series_exported").Help("Host and GPU series exported here").Register(r)),
        host_skipped(prometheus::BuildGauge().Name("stackscope_host_series_skipped").Help("Host and GPU series not exported (host.max_series reached or no Prometheus name)").Register(r)) {}
  Family<Gauge>& info;
  Family<Gauge>& scan_seconds;
  Family<Gauge>& processes;
  Family<Gauge>& scrape_seconds;
  Family<Counter>& reloads;
  Family<Counter>& cpu;
  Family<Gauge>& rss;
  Family<Gauge>& thread_cpu;
  Family<Gauge>& jobs_traced;
  Family<Gauge>& jobs_untraced;
  Family<Counter>& discovered;
  Family<Gauge>& segments;
  Family<Gauge>& store_bytes;
  Family<Counter>& deleted;
  Family<Counter>& deleted_bytes;
  Family<Counter>& store_lost;
  Family<Gauge>& store_free;
  Family<Gauge>& job_info;
  Family<Gauge>& job_start;
  Family<Gauge>& job_processes;
  Family<Counter>& job_events;
  Family<Counter>& job_drops;
  Family<Counter>& incidents;
  Family<Gauge>& incident_active;
  Family<Gauge>& host_exported;
  Family<Gauge>& host_skipped;
  double last_cpu = 0;
  // Each host counter's last source value: its series outlive the exporters (each restart of the node's samplers
  // makes a new one).
  std::mutex counter_mu;
  std::unordered_map<const Counter*, double> counter_last;
  // Per job: how to remove each of its series.
  std::map<std::string, std::vector<std::function<void()>>> removers;
  std::map<std::string, std::set<std::pair<std::string, int>>> event_keys;  // job -> (rank, layer) added
};

namespace {

template <typename T>
T& add_job_series(std::map<std::string, std::vector<std::function<void()>>>& removers, const std::string& job,
                  Family<T>& family, const Labels& labels) {
  const bool existed = family.Has(labels);
  T& m = family.Add(labels);
  if (!existed) removers[job].push_back([&family, &m] { family.Remove(&m); });
  return m;
}

std::string sanitize(std::string_view s) {
  std::string out;
  for (char c : s) out += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return out;
}

}  // namespace

AgentMetrics::AgentMetrics(const std::string& host, const std::string& version)
    : registry_(std::make_shared<prometheus::Registry>()), f_(std::make_unique<Families>(*registry_)) {
  f_->info.Add({{"host", host}, {"version", version}}).Set(1);
  f_->scrape_seconds.Add({});
  f_->jobs_traced.Add({});
  f_->jobs_untraced.Add({});
  f_->discovered.Add({});
  f_->reloads.Add({{"result", "ok"}});
  f_->store_lost.Add({{"kind", "events"}});
  f_->store_lost.Add({{"kind", "samples"}});
  f_->reloads.Add({{"result", "error"}});
}

AgentMetrics::~AgentMetrics() = default;

std::string AgentMetrics::scrape() {
  const int64_t t0 = monotonic_ns();
  std::string text = prometheus::TextSerializer().Serialize(registry_->Collect());
  f_->scrape_seconds.Add({}).Set(static_cast<double>(monotonic_ns() - t0) * 1e-9);
  return text;
}

void AgentMetrics::set_scan(double seconds, size_t processes, size_t jobs_traced, size_t jobs_untraced) {
  f_->scan_seconds.Add({}).Set(seconds);
  f_->processes.Add({}).Set(static_cast<double>(processes));
  f_->jobs_traced.Add({}).Set(static_cast<double>(jobs_traced));
  f_->jobs_untraced.Add({}).Set(static_cast<double>(jobs_untraced));
}

void AgentMetrics::job_discovered() { f_->discovered.Add({}).Increment(); }

void AgentMetrics::set_store(size_t segments, uint64_t bytes, size_t deleted, uint64_t deleted_bytes) {
  f_->segments.Add({}).Set(static_cast<double>(segments));
  f_->store_bytes.Add({}).Set(static_cast<double>(bytes));
  f_->deleted.Add({}).Increment(static_cast<double>(deleted));
  f_->deleted_bytes.Add({}).Increment(static_cast<double>(deleted_bytes));
}

void AgentMetrics::add_store_loss(uint64_t events, uint64_t samples) {
  if (events) f_->store_lost.Add({{"kind", "events"}}).Increment(static_cast<double>(events));
  if (samples) f_->store_lost.Add({{"kind", "samples"}}).Increment(static_cast<double>(samples));
}

void AgentMetrics::set_store_free(uint64_t bytes) { f_->store_free.Add({}).Set(static_cast<double>(bytes)); }

void AgentMetrics::set_agent_resources(const SelfCpu& cpu, uint64_t rss_bytes) {
  std::lock_guard lk(mu_);
  if (cpu.cpu_s > f_->last_cpu) f_->cpu.Add({}).Increment(cpu.cpu_s - f_->last_cpu);
  f_->last_cpu = std::max(f_->last_cpu, cpu.cpu_s);
  f_->rss.Add({}).Set(static_cast<double>(rss_bytes));
  for (auto& [name, g] : thread_cpu_) g->Set(0);  // a name whose threads all left reads 0, not its last value
  for (const auto& t : cpu.threads) {
    auto& g = thread_cpu_[t.name];
    if (!g) g = &f_->thread_cpu.Add({{"thread", t.name}});
    g->Set(t.cpu_s);
  }
}

void AgentMetrics::reloaded(bool ok) { f_->reloads.Add({{"result", ok ? "ok" : "error"}}).Increment(); }

Labels AgentMetrics::job_label_map(const JobLabels& l) const {
  return {{"job_name", l.job}, {"pod", l.pod}, {"container", l.container}};
}

void AgentMetrics::job_started(const JobLabels& labels, double start_unix_s, unsigned libraries) {
  std::lock_guard lk(mu_);
  ended_.erase(labels.job);
  labels_of_[labels.job] = labels;
  Labels l = job_label_map(labels);
  std::string libs;
  for (auto [bit, name] : {std::pair{1u, "cuda"}, {2u, "nccl"}, {4u, "torch"}})
    if (libraries & bit) libs += (libs.empty() ? "" : ",") + std::string(name);
  Labels info = l;
  info["libraries"] = libs;
  add_job_series(f_->removers, labels.job, f_->job_info, info).Set(1);
  add_job_series(f_->removers, labels.job, f_->job_start, l).Set(start_unix_s);
  add_job_series(f_->removers, labels.job, f_->job_drops, l);
  // Every class from 0, so rate() and increase() see the first incident of a class too.
  for (int c = 0; c <= static_cast<int>(CauseClass::unexplained); ++c) {
    Labels lc = l;
    lc["class"] = std::string(cause_class_name(static_cast<CauseClass>(c)));
    add_job_series(f_->removers, labels.job, f_->incidents, lc);
    add_job_series(f_->removers, labels.job, f_->incident_active, lc);
  }
}

void AgentMetrics::set_job_processes(const JobLabels& labels, size_t processes) {
  std::lock_guard lk(mu_);
  add_job_series(f_->removers, labels.job, f_->job_processes, job_label_map(labels)).Set(static_cast<double>(processes));
}

void AgentMetrics::job_ended(const JobLabels& labels) {
  std::lock_guard lk(mu_);
  ended_[labels.job] = std::chrono::steady_clock::now();
}

void AgentMetrics::add_job_events(const JobLabels& labels, const std::string& rank, Layer layer, uint64_t n) {
  Labels l = job_label_map(labels);
  l["rank"] = rank;
  l["layer"] = std::string(layer_name(layer));
  std::lock_guard lk(mu_);
  add_job_series(f_->removers, labels.job, f_->job_events, l).Increment(static_cast<double>(n));
}

void AgentMetrics::add_job_drops(const JobLabels& labels, uint64_t n) {
  std::lock_guard lk(mu_);
  add_job_series(f_->removers, labels.job, f_->job_drops, job_label_map(labels)).Increment(static_cast<double>(n));
}

void AgentMetrics::incident_opened(const JobLabels& labels, const std::string& cls) {
  Labels l = job_label_map(labels);
  l["class"] = cls;
  std::lock_guard lk(mu_);
  add_job_series(f_->removers, labels.job, f_->incidents, l).Increment();
  add_job_series(f_->removers, labels.job, f_->incident_active, l).Increment();
}

void AgentMetrics::incident_cause_changed(const JobLabels& labels, const std::string& from, const std::string& to) {
  Labels a = job_label_map(labels), b = a;
  a["class"] = from;
  b["class"] = to;
  std::lock_guard lk(mu_);
  auto& was = add_job_series(f_->removers, labels.job, f_->incident_active, a);
  if (was.Value() > 0) was.Decrement();
  add_job_series(f_->removers, labels.job, f_->incident_active, b).Increment();
}

void AgentMetrics::incident_closed(const JobLabels& labels, const std::string& cls) {
  Labels l = job_label_map(labels);
  l["class"] = cls;
  std::lock_guard lk(mu_);
  auto& g = add_job_series(f_->removers, labels.job, f_->incident_active, l);
  if (g.Value() > 0) g.Decrement();
}

void AgentMetrics::expire(std::chrono::steady_clock::duration grace) {
  std::lock_guard lk(mu_);
  const auto now = std::chrono::steady_clock::now();
  for (auto it = ended_.begin(); it != ended_.end();) {
    if (now - it->second < grace) {
      ++it;
      continue;
    }
    if (auto r = f_->removers.find(it->first); r != f_->removers.end()) {
      for (auto& remove : r->second) remove();
      f_->removers.erase(r);
    }
    labels_of_.erase(it->first);
    it = ended_.erase(it);
  }
}

PromName prometheus_name(const SeriesInfo& info) {
  PromName p;
  std::string unit = info.unit;
  if (unit == "jiffies") {
    p.scale = 1.0 / static_cast<double>(::sysconf(_SC_CLK_TCK));
    unit = "seconds";
  } else if (unit == "milliseconds") {
    p.scale = 1e-3;
    unit = "seconds";
  } else if (unit == "microseconds") {
    p.scale = 1e-6;
    unit = "seconds";
  } else if (unit == "nanoseconds") {
    p.scale = 1e-9;
    unit = "seconds";
  } else if (unit == "microjoules") {
    p.scale = 1e-6;
    unit = "joules";
  }
  if (info.kind == SeriesKind::static_value && info.subsystem != Subsystem::gpu) return {};
  p.counter = info.kind == SeriesKind::counter;
  std::string name = "stackscope_" + sanitize(info.name);
  // Units that are no unit in a name: counts, flags, bit masks.
  const bool unitless = unit.empty() || unit == "count" || unit == "bool" || unit == "bitmask" || unit == "events" ||
                        unit == "pages" || unit == "percent";
  if (unit == "percent") p.scale = 0.01, unit = "ratio";
  if (!unitless || unit == "ratio") {
    const std::string suffix = "_" + sanitize(unit);
    if (!name.ends_with(suffix)) name += suffix;
  }
  if (p.counter) name += "_total";
  p.name = std::move(name);
  return p;
}

// Forwards everything; keeps a gauge or counter per exported series and sets it from each sample.
class HostSeriesExporter final : public TelemetrySink {
 public:
  HostSeriesExporter(AgentMetrics& m, TelemetrySink& next, size_t max_series) : m_(m), next_(next), max_(max_series) {}

  SeriesId add_series(const SeriesInfo& info) override {
    const SeriesId id = next_.add_series(info);
    std::lock_guard lk(mu_);
    if (exported_.count(id) || skipped_.count(id)) return id;
    PromName p = prometheus_name(info);
    // Per-process series (a pid in the device) would grow without bound: the job's own series cover them.
    const bool per_process = info.device.find("pid") != std::string::npos || info.name.starts_with("proc.");
    if (p.name.empty() || per_process || exported_.size() >= max_) {
      skipped_.insert(id);
      m_.f_->host_skipped.Add({}).Set(static_cast<double>(skipped_.size()));
      return id;
    }
    Labels l;
    if (!info.device.empty()) l[info.subsystem == Subsystem::gpu ? "gpu" : "device"] = info.device;
    Exported e;
    e.scale = p.scale;
    try {
      if (p.counter) {
        auto& fam = counter_family(p.name, info);
        e.counter = &fam.Add(l);
      } else {
        auto& fam = gauge_family(p.name, info);
        e.gauge = &fam.Add(l);
      }
    } catch (const std::exception&) {  // the name is taken by a family of the other type
      skipped_.insert(id);
      return id;
    }
    exported_[id] = e;
    m_.f_->host_exported.Add({}).Set(static_cast<double>(exported_.size()));
    return id;
  }
  void append_event(Event&& e) override { next_.append_event(std::move(e)); }
  void append_samples(std::span<const Sample> samples) override {
    {
      std::scoped_lock lk(mu_, m_.f_->counter_mu);
      for (const Sample& s : samples) {
        auto it = exported_.find(s.series);
        if (it == exported_.end()) continue;
        Exported& e = it->second;
        const double v = s.value * e.scale;
        if (e.gauge) {
          e.gauge->Set(v);
        } else if (e.counter) {
          // Cumulative totals, exposed as the source counts them (since boot, like node_exporter): the first sample
          // whole, then each increase; after a reset of the source its new value is the increase. The last value
          // is the counter's, not this exporter's: a sampler restarted (a reload) goes on from it rather than
          // adding its whole total again.
          double& last = m_.f_->counter_last[e.counter];
          if (v < last) e.counter->Increment(v);
          else e.counter->Increment(v - last);
          last = v;
        }
      }
    }
    next_.append_samples(samples);
  }
  void add_drops(std::string_view source, uint64_t n) override { next_.add_drops(source, n); }
  void add_note(std::string_view source, std::string_view text) override { next_.add_note(source, text); }

 private:
  struct Exported {
    Gauge* gauge = nullptr;
    Counter* counter = nullptr;
    double scale = 1;
  };
  std::string help(const SeriesInfo& info) const {
    return "stackscope series " + info.name + " (" + info.unit + ", from " + info.source + ")";
  }
  Family<Gauge>& gauge_family(const std::string& name, const SeriesInfo& info) {
    if (counters_.count(name)) throw std::runtime_error("type clash");
    auto it = gauges_.find(name);
    if (it == gauges_.end())
      it = gauges_.emplace(name, &prometheus::BuildGauge().Name(name).Help(help(info)).Register(m_.registry())).first;
    return *it->second;
  }
  Family<Counter>& counter_family(const std::string& name, const SeriesInfo& info) {
    if (gauges_.count(name)) throw std::runtime_error("type clash");
    auto it = counters_.find(name);
    if (it == counters_.end())
      it = counters_.emplace(name, &prometheus::BuildCounter().Name(name).Help(help(info)).Register(m_.registry())).first;
    return *it->second;
  }

  AgentMetrics& m_;
  TelemetrySink& next_;
  size_t max_;
  std::mutex mu_;
  std::unordered_map<SeriesId, Exported> exported_;
  std::set<SeriesId> skipped_;
  std::map<std::string, Family<Gauge>*> gauges_;
  std::map<std::string, Family<Counter>*> counters_;
};

std::unique_ptr<TelemetrySink> AgentMetrics::host_exporter(TelemetrySink& next, size_t max_series) {
  return std::make_unique<HostSeriesExporter>(*this, next, max_series);
}

}  // namespace stackscope::agent

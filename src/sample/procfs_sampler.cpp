#include "sample/procfs_sampler.h"

#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "sample/sampler_family.h"
#include "model/process.h"

namespace stackscope {

namespace procfs {

SeriesId SamplerContext::declare(SeriesInfo info) {
  if (!sink) return 0;
  info.host = host;
  ++series_declared;
  return sink->add_series(info);
}

void SamplerContext::note_once(std::string_view key, std::string_view source, std::string_view text) {
  if (noted.count(key)) return;
  noted.emplace(key);
  if (sink) sink->add_note(source, text);
}

void Family::report(std::string_view file, const ParseReport& rep) {
  if (rep.ok()) return;
  std::string key = std::string(name()) + ":parse:" + std::string(file);
  ctx_.note_once(key, "procfs." + std::string(name()), std::string(file) + ": " + rep.error);
}

std::optional<std::string_view> Family::read(ProcFile& f) {
  auto text = f.read();
  if (!text) ctx_.note_once(std::string(name()) + ":read:" + f.path(), "procfs." + std::string(name()), f.error());
  return text;
}

namespace {
// The sampler's own cost, recorded like any other series so a recording shows what observing it cost.
class SelfFamily final : public Family {
 public:
  using Family::Family;
  std::string_view name() const override { return "self"; }
  std::string open() override { return ""; }
  void sample(std::vector<Sample>& out) override {
    timespec ts{};
    ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    if (!id_)
      id_ = ctx_.declare(series_info("sampler.cpu_time", "", Subsystem::software, "nanoseconds", SeriesKind::counter,
                                     SeriesCategory::dynamic, "procfs"));
    out.push_back({id_, monotonic_ns(), static_cast<double>(ts.tv_sec * 1'000'000'000LL + ts.tv_nsec)});
  }

 private:
  SeriesId id_ = 0;
};
std::unique_ptr<Family> make_self_family(SamplerContext& c) { return std::make_unique<SelfFamily>(c); }
}  // namespace

const std::vector<FamilyDef>& family_defs() {
  static const std::vector<FamilyDef> defs = {
      {"stat", "/proc/stat: CPU time per core and total, context switches, interrupts, forks, run queue",
       make_stat_family},
      {"loadavg", "/proc/loadavg: load averages, thread count", make_loadavg_family},
      {"meminfo", "/proc/meminfo: every field, in bytes", make_meminfo_family},
      {"vmstat", "/proc/vmstat: faults, reclaim, swap, dirty pages, THP, compaction", make_vmstat_family},
      {"pressure", "/proc/pressure/{cpu,memory,io}: PSI some/full avg10 and total stall time", make_pressure_family},
      {"netdev", "/proc/net/dev: bytes, packets, errors, drops per interface", make_netdev_family},
      {"netproto", "/proc/net/{snmp,netstat}: TCP retransmits, resets, listen overflows, UDP errors",
       make_netproto_family},
      {"diskstats", "/proc/diskstats: I/Os, bytes, merges, service and queue time per disk", make_diskstats_family},
      {"interrupts", "/proc/interrupts: per IRQ x CPU (non-zero ones)", make_interrupts_family},
      {"softirqs", "/proc/softirqs: per type x CPU (non-zero ones)", make_softirqs_family},
      {"cgroup", "cgroup v2 cpu.stat, memory.current/stat, io.stat of leaf cgroups with processes",
       make_cgroup_family},
      {"cpufreq", "sysfs cpufreq: current frequency per core", make_cpufreq_family},
      {"thermal", "sysfs thermal zones: temperatures", make_thermal_family},
      {"hwmon", "sysfs hwmon: temperatures, power, voltages, currents, fans", make_hwmon_family},
      {"rapl", "sysfs powercap RAPL: package/core/DRAM energy", make_rapl_family},
      {"perf_hw", "perf_event hardware counters per CPU: cycles, instructions, cache/branch misses, stalls",
       make_perf_hw_family},
      {"perf_sw", "perf_event software counters per CPU: context switches, migrations, page faults",
       make_perf_sw_family},
      {"proc_cpu",
       "/proc/[pid]/stat and task schedstat: CPU of the busiest processes, of the job vs the rest, job run-queue wait",
       make_process_cpu_family},
      {"self", "the sampler's own CPU time", make_self_family},
  };
  return defs;
}

}  // namespace procfs

using procfs::family_defs;

std::vector<std::string> parse_procfs_family_list(std::string_view list) {
  std::vector<std::string> out;
  while (!list.empty()) {
    size_t comma = list.find(',');
    std::string_view item = procfs::trim(list.substr(0, comma));
    list.remove_prefix(comma == std::string_view::npos ? list.size() : comma + 1);
    if (item.empty()) continue;
    if (item == "all") {
      for (auto& d : family_defs()) out.emplace_back(d.name);
      continue;
    }
    auto it = std::find_if(family_defs().begin(), family_defs().end(), [&](auto& d) { return d.name == item; });
    if (it == family_defs().end()) {
      std::string known;
      for (auto& d : family_defs()) known += (known.empty() ? "" : ", ") + std::string(d.name);
      throw std::invalid_argument("unknown sampler family '" + std::string(item) + "' (known: " + known + ")");
    }
    if (std::find(out.begin(), out.end(), item) == out.end()) out.emplace_back(item);
  }
  return out;
}

std::vector<ProcfsFamilyInfo> list_procfs_families(const ProcfsSamplerOptions& options) {
  std::vector<ProcfsFamilyInfo> out;
  procfs::SamplerContext ctx;
  ctx.options = options;
  for (auto& d : family_defs()) {
    auto fam = d.make(ctx);
    std::string why = fam->open();
    out.push_back({std::string(d.name), std::string(d.description), why.empty(), why});
  }
  return out;
}

struct ProcfsSampler::Impl {
  ProcfsSamplerOptions options;
  procfs::SamplerContext ctx;
  std::vector<std::unique_ptr<procfs::Family>> families;
  std::vector<bool> idle_slow;  // by family: read at most every options.idle_period_ms while the node is idle
  // With live_idle (the agent's node), each family's CPU time and reads, said at stop(): the idle agent's host
  // sampler cost 0.77 % of a core on a 64-core GPU host with no breakdown to act on.
  std::vector<std::pair<int64_t, uint64_t>> family_cost;  // (CPU ns, reads) by family
  uint64_t idle_ticks = 0;
  bool costs_noted = false;
  std::vector<Sample> batch;
  bool opened = false;

  std::thread thread;
  std::mutex mu;
  std::condition_variable cv;
  bool stop_requested = false;
  int64_t interval_ns = 100'000'000;
  uint64_t tick_number = 0;  // drives families read less often than every tick
  uint64_t stride_origin = 0;  // the tick at which the period last changed (live_interval_ms)
  int64_t min_interval_ms = INT64_MAX, max_interval_ms = 0;  // the periods ticked at
  int64_t start_ns = 0;
  mutable std::mutex stats_mu;
  ProcfsSamplerStats stats;
  clockid_t thread_clock{};
  bool have_thread_clock = false;

  // The period now: the live one when set (the agent's shared node sampler). A new period restarts the families'
  // strides, so that each is read at the first tick at it (a job's arrival brings them all at once).
  void follow_live_interval() {
    if (!options.live_interval_ms) return;
    const int live = options.live_interval_ms->load(std::memory_order_relaxed);
    if (live <= 0 || int64_t{live} * 1'000'000 == interval_ns) return;
    interval_ns = int64_t{live} * 1'000'000;
    stride_origin = tick_number;
  }

  void run() {
    int64_t next = monotonic_ns();
    for (;;) {
      follow_live_interval();
      tick_once();
      {
        timespec ts{};
        if (::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) == 0) {
          std::lock_guard lk(stats_mu);
          stats.thread_cpu_ns = ts.tv_sec * 1'000'000'000LL + ts.tv_nsec;
        }
      }
      next += interval_ns;
      int64_t now = monotonic_ns();
      if (now >= next) {
        // Overran: skip the missed ticks instead of bursting to catch up.
        int64_t missed = (now - next) / interval_ns + 1;
        next += missed * interval_ns;
        std::lock_guard lk(stats_mu);
        stats.missed_ticks += static_cast<uint64_t>(missed);
      }
      std::unique_lock lk(mu);
      auto deadline = std::chrono::steady_clock::time_point(std::chrono::nanoseconds(next));
      if (cv.wait_until(lk, deadline, [&] { return stop_requested; })) break;
    }
  }

  static int64_t thread_cpu_ns() {
    timespec ts{};
    ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1'000'000'000LL + ts.tv_nsec;
  }

  void note_family_costs() {
    if (!options.live_idle || !ctx.sink || tick_number == 0 || costs_noted) return;
    costs_noted = true;
    std::string by;
    for (size_t i = 0; i < families.size(); ++i)
      if (family_cost[i].second > 0)
        by += (by.empty() ? "" : ", ") + std::string(families[i]->name()) + " " +
              std::to_string(family_cost[i].first / 1000 / static_cast<int64_t>(family_cost[i].second)) + " (" +
              std::to_string(family_cost[i].second) + ")";
    // A shared sampler's period followed its consumers (live_interval_ms): the range it ran at.
    const std::string period = min_interval_ms == max_interval_ms
                                   ? std::to_string(min_interval_ms)
                                   : std::to_string(min_interval_ms) + "-" + std::to_string(max_interval_ms);
    ctx.sink->add_note("procfs", "host families' CPU a read in us (reads) over " + std::to_string(tick_number) +
                                     " ticks of " + period + " ms, " +
                                     std::to_string(idle_ticks) + " of them idle (no job traced): " + by);
  }

  void tick_once() {
    batch.clear();
    const int64_t interval_ms = std::max<int64_t>(1, interval_ns / 1'000'000);
    min_interval_ms = std::min(min_interval_ms, interval_ms);
    max_interval_ms = std::max(max_interval_ms, interval_ms);
    const bool idle = options.live_idle && options.live_idle->load(std::memory_order_relaxed);
    for (size_t i = 0; i < families.size(); ++i) {
      int64_t period = families[i]->min_period_ms();
      if (idle && idle_slow[i]) period = std::max<int64_t>(period, options.idle_period_ms);
      const int64_t stride = std::max<int64_t>(1, period / interval_ms);
      if ((tick_number - stride_origin) % stride != 0) continue;
      if (!options.live_idle) {
        families[i]->sample(batch);
        continue;
      }
      const int64_t cpu0 = thread_cpu_ns();
      families[i]->sample(batch);
      family_cost[i].first += thread_cpu_ns() - cpu0;
      ++family_cost[i].second;
    }
    idle_ticks += idle;
    ++tick_number;
    if (!batch.empty()) ctx.sink->append_samples(batch);
    std::lock_guard lk(stats_mu);
    ++stats.ticks;
    stats.samples += batch.size();
    stats.series = ctx.series_declared;
  }
};

ProcfsSampler::ProcfsSampler(ProcfsSamplerOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
}

ProcfsSampler::~ProcfsSampler() { stop(); }

CollectorStatus ProcfsSampler::open(TelemetrySink& sink, const std::string& host) {
  Impl& m = *impl_;
  CollectorStatus st;
  if (m.opened) {
    st.message = "already started";
    return st;
  }
  m.ctx.sink = &sink;
  m.ctx.options = m.options;
  m.ctx.host = host;
  for (uint32_t pid : m.options.traced_pids) m.ctx.add_traced_pid(pid);
  if (m.ctx.host.empty()) {
    char name[256] = {};
    if (::gethostname(name, sizeof name - 1) == 0) m.ctx.host = name;
  }
  std::vector<std::string> wanted = m.options.families;
  bool explicit_list = !wanted.empty();
  if (!explicit_list)
    for (auto& d : family_defs()) wanted.emplace_back(d.name);
  std::string unavailable;
  for (auto& d : family_defs()) {
    if (std::find(wanted.begin(), wanted.end(), d.name) == wanted.end()) continue;
    auto fam = d.make(m.ctx);
    std::string why = fam->open();
    if (!why.empty()) {
      // Said once, here: the family is left out and everything else goes on.
      sink.add_note("procfs." + std::string(d.name), "unavailable: " + why);
      unavailable += (unavailable.empty() ? "" : "; ") + std::string(d.name) + ": " + why;
      continue;
    }
    m.idle_slow.push_back(std::find(m.options.idle_families.begin(), m.options.idle_families.end(), d.name) !=
                          m.options.idle_families.end());
    m.families.push_back(std::move(fam));
  }
  m.family_cost.assign(m.families.size(), {0, 0});
  if (m.options.live_idle) {
    std::string slow;
    for (size_t i = 0; i < m.families.size(); ++i)
      if (m.idle_slow[i]) slow += (slow.empty() ? "" : ", ") + std::string(m.families[i]->name());
    if (!slow.empty())
      sink.add_note("procfs", "while the node is idle (no job traced): " + slow + " at most every " +
                                  std::to_string(m.options.idle_period_ms) + " ms, the others at their usual period");
  }
  for (auto& name : wanted)
    if (std::none_of(family_defs().begin(), family_defs().end(), [&](auto& d) { return d.name == name; }))
      unavailable += (unavailable.empty() ? "" : "; ") + name + ": unknown family";
  m.opened = true;
  st.running = !m.families.empty();
  st.message = st.running ? (unavailable.empty() ? "" : "unavailable: " + unavailable)
                          : "no sampler family can run: " + unavailable;
  return st;
}

void ProcfsSampler::tick() {
  if (!impl_->opened) return;
  impl_->follow_live_interval();
  impl_->tick_once();
}

CollectorStatus ProcfsSampler::start(TelemetrySink& sink, const CollectorOptions& options) {
  CollectorStatus st = open(sink, options.host);
  if (!st.running) return st;
  Impl& m = *impl_;
  for (uint32_t pid : options.pids) m.ctx.add_traced_pid(pid);
  m.interval_ns = int64_t{std::max(1, options.interval_ms)} * 1'000'000;
  m.start_ns = monotonic_ns();
  m.stop_requested = false;
  m.thread = std::thread([&m] {
    name_this_thread("ss-procfs");
    m.run();
  });
  return st;
}

void ProcfsSampler::add_pid(uint32_t pid) { impl_->ctx.add_traced_pid(pid); }

void ProcfsSampler::set_traced_pids(const std::vector<uint32_t>& pids) { impl_->ctx.set_traced_pids(pids); }

void ProcfsSampler::stop() {
  Impl& m = *impl_;
  if (!m.thread.joinable()) {
    m.note_family_costs();  // ticked by the caller (tests, benchmarks)
    return;
  }
  {
    std::lock_guard lk(m.mu);
    m.stop_requested = true;
  }
  m.cv.notify_all();
  m.thread.join();
  m.note_family_costs();
  std::lock_guard lk(m.stats_mu);
  m.stats.wall_ns = monotonic_ns() - m.start_ns;
}

ProcfsSamplerStats ProcfsSampler::stats() const {
  std::lock_guard lk(impl_->stats_mu);
  return impl_->stats;
}

std::vector<std::string> ProcfsSampler::active_families() const {
  std::vector<std::string> out;
  for (auto& f : impl_->families) out.emplace_back(f->name());
  return out;
}

std::unique_ptr<Collector> make_procfs_sampler(const ProcfsSamplerOptions& options) {
  return std::make_unique<ProcfsSampler>(options);
}

}  // namespace stackscope

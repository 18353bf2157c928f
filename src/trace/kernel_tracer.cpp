#include "trace/kernel_tracer.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <time.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "events.h"
#include "kernel.skel.h"
#include "model/clock.h"
#include "model/process.h"

namespace stackscope::trace {

namespace {

constexpr const char* kSoftirqNames[SS_NR_SOFTIRQS] = {"HI",       "TIMER",   "NET_TX", "NET_RX", "BLOCK",
                                                      "IRQ_POLL", "TASKLET", "SCHED",  "HRTIMER", "RCU"};

struct ProcField {
  const char* name;
  const char* unit;
  __u64 ss_kproc_counters::*field;
};
constexpr std::array<ProcField, 6> kProcFields = {{
    {"kernel.sched.oncpu_time", "nanoseconds", &ss_kproc_counters::oncpu_ns},
    {"kernel.sched.runq_wait_time", "nanoseconds", &ss_kproc_counters::runq_ns},
    {"kernel.sched.blocked_time", "nanoseconds", &ss_kproc_counters::blocked_ns},
    {"kernel.sched.voluntary_switches", "count", &ss_kproc_counters::voluntary_switches},
    {"kernel.sched.involuntary_switches", "count", &ss_kproc_counters::involuntary_switches},
    {"kernel.sched.migrations", "count", &ss_kproc_counters::migrations},
}};

struct SysField {
  const char* name;
  Subsystem subsystem;
  const char* unit;
  SeriesCategory category;
  __u64 ss_ksys_counters::*field;
};
constexpr std::array<SysField, 11> kSysFields = {{
    {"kernel.hardirq.count", Subsystem::cpu, "count", SeriesCategory::dynamic, &ss_ksys_counters::hardirq_count},
    {"kernel.hardirq.time", Subsystem::cpu, "nanoseconds", SeriesCategory::dynamic, &ss_ksys_counters::hardirq_ns},
    {"kernel.net.tx.packets", Subsystem::network, "count", SeriesCategory::dynamic, &ss_ksys_counters::net_tx_packets},
    {"kernel.net.tx.bytes", Subsystem::network, "bytes", SeriesCategory::dynamic, &ss_ksys_counters::net_tx_bytes},
    {"kernel.net.rx.packets", Subsystem::network, "count", SeriesCategory::dynamic, &ss_ksys_counters::net_rx_packets},
    {"kernel.net.rx.bytes", Subsystem::network, "bytes", SeriesCategory::dynamic, &ss_ksys_counters::net_rx_bytes},
    {"kernel.net.tcp.retransmits", Subsystem::network, "count", SeriesCategory::event_counter,
     &ss_ksys_counters::tcp_retransmits},
    {"kernel.block.issued", Subsystem::storage, "count", SeriesCategory::dynamic, &ss_ksys_counters::block_issued},
    {"kernel.block.issued_bytes", Subsystem::storage, "bytes", SeriesCategory::dynamic,
     &ss_ksys_counters::block_issued_bytes},
    {"kernel.block.completed", Subsystem::storage, "count", SeriesCategory::dynamic,
     &ss_ksys_counters::block_completed},
    {"kernel.block.latency_time", Subsystem::storage, "nanoseconds", SeriesCategory::dynamic,
     &ss_ksys_counters::block_latency_ns},
}};

int64_t thread_cpu_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1'000'000'000LL + ts.tv_nsec;
}

// What drives IRQ N ("virtio0-input.0"), from sysfs; "" when unknown.
std::string irq_action(uint32_t irq) {
  std::ifstream f(fmt::format("/sys/kernel/irq/{}/actions", irq));
  std::string s;
  std::getline(f, s);
  return s;
}

}  // namespace

struct KernelTracer::Impl {
  kernel_bpf* skel = nullptr;
  std::vector<bpf_link*> links;
  TelemetrySink* sink = nullptr;
  CollectorOptions copts;
  int ncpu = 0;

  std::thread thread;
  std::mutex mu;
  std::condition_variable cv;
  bool stop_requested = false;
  std::mutex tick_mu;  // one tick at a time (the thread, or tick() from a test)

  std::map<uint32_t, std::array<SeriesId, kProcFields.size()>> proc_ids;
  std::array<SeriesId, kSysFields.size()> sys_ids{};
  std::array<std::array<SeriesId, 2>, SS_NR_SOFTIRQS> softirq_ids{};
  std::map<uint32_t, std::array<SeriesId, 2>> irq_ids;
  SeriesId block_max_id = 0;
  std::vector<Sample> batch;

  mutable std::mutex stats_mu;
  KernelTracerStats stats;

  SeriesId declare(std::string name, std::string device, Subsystem sub, std::string unit, SeriesKind kind,
                   SeriesCategory cat) {
    SeriesInfo s = series_info(std::move(name), std::move(device), sub, std::move(unit), kind, cat, "ebpf");
    s.host = copts.host;
    std::lock_guard lk(stats_mu);
    ++stats.series;
    return sink->add_series(s);
  }

  // Per-CPU values of one key, summed field by field (every counter struct is all __u64).
  template <class T>
  bool read_sum(int fd, const void* key, T* out) {
    static_assert(sizeof(T) % 8 == 0);
    std::vector<T> values(static_cast<size_t>(ncpu));
    if (bpf_map_lookup_elem(fd, key, values.data()) != 0) return false;
    constexpr size_t words = sizeof(T) / 8;
    std::array<uint64_t, words> acc{};
    for (auto& v : values) {
      uint64_t w[words];
      std::memcpy(w, &v, sizeof v);
      for (size_t i = 0; i < words; ++i) acc[i] += w[i];
    }
    std::memcpy(out, acc.data(), sizeof *out);
    return true;
  }

  void tick() {
    std::lock_guard lk(tick_mu);
    if (!skel) return;
    batch.clear();
    int64_t t = monotonic_ns();

    int fd = bpf_map__fd(skel->maps.proc_counters);
    std::vector<uint32_t> gone;
    uint32_t key = 0, next = 0;
    const uint32_t* prev = nullptr;
    while (bpf_map_get_next_key(fd, prev, &next) == 0) {
      key = next;
      prev = &key;
      ss_kproc_counters c{};
      if (!read_sum(fd, &key, &c)) continue;
      auto it = proc_ids.find(key);
      if (it == proc_ids.end()) {
        std::array<SeriesId, kProcFields.size()> ids{};
        std::string device = copts.all_processes ? "" : "pid" + std::to_string(key);
        for (size_t i = 0; i < kProcFields.size(); ++i)
          ids[i] = declare(kProcFields[i].name, device, Subsystem::cpu, kProcFields[i].unit, SeriesKind::counter,
                           SeriesCategory::dynamic);
        it = proc_ids.emplace(key, ids).first;
      }
      for (size_t i = 0; i < kProcFields.size(); ++i)
        batch.push_back({it->second[i], t, static_cast<double>(c.*(kProcFields[i].field))});
      if (!copts.all_processes && !process_exists(key)) gone.push_back(key);
    }
    for (uint32_t pid : gone) {  // its last values are in this batch
      bpf_map_delete_elem(fd, &pid);
      bpf_map_delete_elem(bpf_map__fd(skel->maps.traced), &pid);
      proc_ids.erase(pid);
    }

    uint32_t zero = 0;
    ss_ksys_counters g{};
    if (read_sum(bpf_map__fd(skel->maps.sys_counters), &zero, &g)) {
      for (size_t i = 0; i < kSysFields.size(); ++i) {
        auto& f = kSysFields[i];
        if (!sys_ids[i]) sys_ids[i] = declare(f.name, "", f.subsystem, f.unit, SeriesKind::counter, f.category);
        batch.push_back({sys_ids[i], t, static_cast<double>(g.*(f.field))});
      }
      for (size_t v = 0; v < SS_NR_SOFTIRQS; ++v) {
        if (g.softirq_count[v] == 0) continue;  // a vector that never ran here is no series
        if (!softirq_ids[v][0]) {
          std::string_view n = kSoftirqNames[v];
          Subsystem sub = n.substr(0, 4) == "NET_" ? Subsystem::network : n == "BLOCK" ? Subsystem::storage
                                                                                       : Subsystem::cpu;
          softirq_ids[v][0] = declare("kernel.softirq.count", std::string(n), sub, "count", SeriesKind::counter,
                                      SeriesCategory::dynamic);
          softirq_ids[v][1] = declare("kernel.softirq.time", std::string(n), sub, "nanoseconds", SeriesKind::counter,
                                      SeriesCategory::dynamic);
        }
        batch.push_back({softirq_ids[v][0], t, static_cast<double>(g.softirq_count[v])});
        batch.push_back({softirq_ids[v][1], t, static_cast<double>(g.softirq_ns[v])});
      }
    }

    // Longest block request of the interval: read every CPU's maximum, then zero them.
    {
      int mfd = bpf_map__fd(skel->maps.block_latency_max);
      std::vector<uint64_t> mx(static_cast<size_t>(ncpu));
      if (bpf_map_lookup_elem(mfd, &zero, mx.data()) == 0) {
        uint64_t m = 0;
        for (auto v : mx) m = std::max(m, v);
        std::fill(mx.begin(), mx.end(), 0);
        bpf_map_update_elem(mfd, &zero, mx.data(), BPF_ANY);
        if (!block_max_id)
          block_max_id = declare("kernel.block.latency_max", "", Subsystem::storage, "nanoseconds",
                                 SeriesKind::gauge, SeriesCategory::dynamic);
        batch.push_back({block_max_id, t, static_cast<double>(m)});
      }
    }

    fd = bpf_map__fd(skel->maps.irq_counters);
    prev = nullptr;
    while (bpf_map_get_next_key(fd, prev, &next) == 0) {
      key = next;
      prev = &key;
      ss_kirq_counters c{};
      if (!read_sum(fd, &key, &c)) continue;
      auto it = irq_ids.find(key);
      if (it == irq_ids.end()) {
        std::string action = irq_action(key);
        std::string device = "irq" + std::to_string(key) + (action.empty() ? "" : " " + action);
        it = irq_ids.emplace(key, std::array<SeriesId, 2>{
                                      declare("kernel.hardirq.count", device, Subsystem::cpu, "count",
                                              SeriesKind::counter, SeriesCategory::dynamic),
                                      declare("kernel.hardirq.time", device, Subsystem::cpu, "nanoseconds",
                                              SeriesKind::counter, SeriesCategory::dynamic)})
                 .first;
      }
      batch.push_back({it->second[0], t, static_cast<double>(c.count)});
      batch.push_back({it->second[1], t, static_cast<double>(c.ns)});
    }

    if (!batch.empty()) sink->append_samples(batch);
    std::lock_guard slk(stats_mu);
    ++stats.ticks;
  }

  void run() {
    const auto period = std::chrono::milliseconds(std::max(1, copts.interval_ms));
    auto next = std::chrono::steady_clock::now();
    for (;;) {
      tick();
      {
        std::lock_guard slk(stats_mu);
        stats.thread_cpu_ns = thread_cpu_ns();
      }
      next += period;
      auto now = std::chrono::steady_clock::now();
      if (next <= now) next = now + period;  // overran: skip rather than burst
      std::unique_lock lk(mu);
      if (cv.wait_until(lk, next, [&] { return stop_requested; })) break;
    }
  }

  void destroy() {
    for (auto* l : links) bpf_link__destroy(l);
    links.clear();
    if (skel) kernel_bpf__destroy(skel);
    skel = nullptr;
  }
};

KernelTracer::KernelTracer() : impl_(std::make_unique<Impl>()) {}
KernelTracer::~KernelTracer() { stop(); }

CollectorStatus KernelTracer::start(TelemetrySink& sink, const CollectorOptions& options) {
  Impl& m = *impl_;
  if (m.skel) return {true, "already running"};
  if (::geteuid() != 0) return {false, "needs root (CAP_BPF and CAP_PERFMON) to load eBPF programs"};
  m.sink = &sink;
  m.copts = options;
  m.ncpu = libbpf_num_possible_cpus();
  if (m.ncpu <= 0) return {false, std::string("kernel BPF: cannot count possible CPUs: ") + std::strerror(-m.ncpu)};
  m.skel = kernel_bpf__open();
  if (!m.skel) return {false, std::string("kernel BPF: open failed: ") + std::strerror(errno)};
  m.skel->rodata->all_processes = options.all_processes;
  m.skel->rodata->follow_children = options.follow_children;
  if (int rc = kernel_bpf__load(m.skel)) {
    m.destroy();
    return {false, std::string("kernel BPF: load failed: ") + std::strerror(-rc)};
  }
  std::string missing;
  bpf_program* prog;
  bpf_object__for_each_program(prog, m.skel->obj) {
    bpf_link* l = bpf_program__attach(prog);
    if (l) {
      m.links.push_back(l);
      continue;
    }
    std::string name = bpf_program__name(prog);
    if (name == "on_switch") {  // without it there is no scheduler layer at all
      const int err = errno;  // destroy() may change it
      m.destroy();
      return {false, "kernel BPF: sched_switch: " + std::string(std::strerror(err))};
    }
    missing += (missing.empty() ? "" : ", ") + name + " (" + std::strerror(errno) + ")";
  }
  if (!missing.empty()) sink.add_note("kernel", "tracepoints not attached, their series stay flat: " + missing);
  uint8_t one = 1;
  for (uint32_t pid : options.pids) bpf_map_update_elem(bpf_map__fd(m.skel->maps.traced), &pid, &one, BPF_ANY);
  m.stop_requested = false;
  m.thread = std::thread([&m] {
    name_this_thread("ss-kernel");
    m.run();
  });
  return {true, missing.empty() ? "" : "some kernel tracepoints missing: " + missing};
}

void KernelTracer::add_pid(uint32_t pid) {
  Impl& m = *impl_;
  uint8_t one = 1;
  if (m.skel) bpf_map_update_elem(bpf_map__fd(m.skel->maps.traced), &pid, &one, BPF_ANY);
}

void KernelTracer::tick() { impl_->tick(); }

void KernelTracer::stop() {
  Impl& m = *impl_;
  if (m.thread.joinable()) {
    {
      std::lock_guard lk(m.mu);
      m.stop_requested = true;
    }
    m.cv.notify_all();
    m.thread.join();
    m.tick();  // the last partial interval
  }
  std::lock_guard lk(m.tick_mu);
  m.destroy();
}

KernelTracerStats KernelTracer::stats() const {
  std::lock_guard lk(impl_->stats_mu);
  return impl_->stats;
}

std::vector<KernelTracer::ProgramCost> KernelTracer::program_costs() const {
  std::vector<ProgramCost> out;
  if (!impl_->skel) return out;
  bpf_program* prog;
  bpf_object__for_each_program(prog, impl_->skel->obj) {
    bpf_prog_info info{};
    uint32_t len = sizeof info;
    if (bpf_obj_get_info_by_fd(bpf_program__fd(prog), &info, &len) != 0) continue;
    out.push_back({bpf_program__name(prog), info.run_cnt, info.run_time_ns});
  }
  return out;
}

std::unique_ptr<Collector> make_kernel_tracer() { return std::make_unique<KernelTracer>(); }

}  // namespace stackscope::trace

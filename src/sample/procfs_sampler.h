// The host telemetry sampler (Reveal's collector, §3.1 and Appendix A): every interval it reads procfs, sysfs,
// cgroup v2 and perf_event counters, with no subprocesses, and appends RAW samples (counters as cumulative
// totals) to the sink. Family proc_cpu (every proc_cpu_period_ms) reads every process's /proc/[pid]/stat and
// writes per-process CPU as gauges already (process_cpu.cpp says which). Rates, utilisation and IPC are
// derived at read time (analyze/derived_series.h).
//
// Units: gauges are stored in base units (bytes, hertz, celsius, watts, ratio); cumulative time and energy
// counters keep the kernel's integer unit ("jiffies", "milliseconds", "microseconds", "microjoules") so that
// they stay exact and compress well; derived_series converts their rates to ratios and watts.
#pragma once
#include <atomic>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "model/collector.h"

namespace stackscope {

struct ProcfsSamplerOptions {
  // Families to run (names from list_procfs_families()); empty means all.
  std::vector<std::string> families;
  // Roots of the trees read, so tests can point the sampler at a copied tree.
  std::string proc_root = "/proc";
  std::string sys_root = "/sys";
  // cgroup v2: only leaf cgroups that hold processes, at most this many (the rest are counted in a note).
  size_t max_cgroups = 32;
  std::string cgroup_root;        // cgroup v2 mount point; empty: found in /proc/self/mountinfo
  int cgroup_rescan_ms = 10'000;  // how often the cgroup tree is walked again for new containers
  // /proc/interrupts: a series appears when its IRQ x CPU count first becomes non-zero; at most this many.
  size_t max_irq_series = 4096;
  // By default /proc/vmstat and /proc/net/{snmp,netstat} give a curated subset (Reveal §4.1 prunes the rest).
  bool vmstat_all = false;
  bool net_protocol_all = false;
  // Block devices named loop*, ram*, zram* are skipped unless this is set.
  bool virtual_disks = false;
  // Interface "lo" is kept; interfaces matching none of these prefixes are kept as well (empty: keep all).
  std::vector<std::string> skip_interfaces;
  // Per-process CPU (family proc_cpu): every process is read, so not at every host tick. 0: every tick.
  int proc_cpu_period_ms = 1000;
  size_t proc_cpu_top = 8;                // processes named per interval, by CPU used...
  double proc_cpu_busy = 0.5;             // ...plus any using more than this many CPUs
  size_t max_process_series = 256;        // distinct proc.cpu.util series with a pid; then one per name (pid 0)
  std::vector<uint32_t> traced_pids;      // the job (with its descendants); start() adds CollectorOptions::pids
  // The agent's node sampler: while *live_idle (read each tick) is true, the node traces no job and the families in
  // idle_families are read at most every idle_period_ms. They are the ones whose cost grows with the CPUs and
  // processes of the host (per IRQ x CPU, per CPU, per process) or whose text the kernel formats at length, and all
  // but proc_cpu hold cumulative counters, whose sums over any span come out the same. Every family at its usual
  // period from the first tick after it turns false.
  std::shared_ptr<const std::atomic<bool>> live_idle;
  int idle_period_ms = 30'000;
  // When set, read before each tick: the sampling period now (ms, > 0), so one sampler shared by the node and the job
  // it traces (the agent's, through a SampleFanOut) follows the fastest consumer: the job's 100 ms while one is traced,
  // the node's period otherwise. From the first tick at a new period every family is read, then each at its own.
  std::shared_ptr<const std::atomic<int>> live_interval_ms;
  std::vector<std::string> idle_families = {"interrupts", "softirqs", "perf_hw", "perf_sw", "proc_cpu",
                                            "netproto",   "vmstat",   "cpufreq"};
};

// Parses "stat,meminfo,netdev" or "all"; throws std::invalid_argument naming an unknown family.
std::vector<std::string> parse_procfs_family_list(std::string_view list);

struct ProcfsFamilyInfo {
  std::string name;         // what --families accepts
  std::string description;  // what it reads
  bool available = false;   // on this machine, now
  std::string reason;       // why not, when unavailable
};
// Every family, and whether it can run here (for `stackscope record --help` / `info`). Opens and closes
// the files it would read; touches no sink.
std::vector<ProcfsFamilyInfo> list_procfs_families(const ProcfsSamplerOptions& options = {});

struct ProcfsSamplerStats {
  uint64_t ticks = 0;
  uint64_t missed_ticks = 0;   // ticks skipped because a tick overran the interval
  uint64_t samples = 0;
  size_t series = 0;
  int64_t thread_cpu_ns = 0;   // CPU time of the sampling thread (user + system)
  int64_t wall_ns = 0;         // from start() to stop()
};

// The collector for Layer::host. start() opens every family, reports unavailable ones once (sink note and
// CollectorStatus::message) and samples the rest on its own thread every CollectorOptions::interval_ms.
class ProcfsSampler final : public Collector {
 public:
  explicit ProcfsSampler(ProcfsSamplerOptions options = {});
  ~ProcfsSampler() override;
  std::string name() const override { return "procfs"; }
  Layer layer() const override { return Layer::host; }
  CollectorStatus start(TelemetrySink& sink, const CollectorOptions& options) override;
  void add_pid(uint32_t pid) override;
  // Replaces the traced processes (the job whose proc.cpu.traced_util and runq_wait are written; none: neither is).
  // The agent's node sampler is handed from one job to the next: what the last job's processes were is forgotten.
  void set_traced_pids(const std::vector<uint32_t>& pids);
  void stop() override;

  // The same without a thread (tests, benchmarks): open() does what start() does first, tick() samples once
  // in the caller's thread and appends to the sink.
  CollectorStatus open(TelemetrySink& sink, const std::string& host);
  void tick();
  ProcfsSamplerStats stats() const;
  // Families that opened and are sampled.
  std::vector<std::string> active_families() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// For the CLI: a ProcfsSampler behind the Collector interface.
std::unique_ptr<Collector> make_procfs_sampler(const ProcfsSamplerOptions& options);

}  // namespace stackscope

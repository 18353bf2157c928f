// The kernel layer (--layers kernel): scheduler, IRQ/softirq, network and block tracepoints counted in the kernel
// (bpf/kernel.bpf.c) and read every CollectorOptions::interval_ms into series, like the procfs sampler's: raw
// cumulative counters (rates are derived at read time), "kernel." names, subsystems cpu/network/storage.
//   per traced process (device "pid<N>"; one series set with device "" under --all):
//     kernel.sched.oncpu_time, .runq_wait_time, .blocked_time (nanoseconds), .voluntary_switches,
//     .involuntary_switches, .migrations (count). Off-CPU time is charged when the thread next runs.
//   system-wide: kernel.hardirq.{count,time} (total and per IRQ, device "irqN"), kernel.softirq.{count,time}
//     (device = vector: NET_RX, TIMER...), kernel.net.{tx,rx}.{packets,bytes}, kernel.net.tcp.retransmits,
//     kernel.block.{issued,issued_bytes,completed,latency_time} and kernel.block.latency_max (gauge: longest
//     request completed in the interval).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/collector.h"

namespace stackscope::trace {

struct KernelTracerStats {
  uint64_t ticks = 0;
  int64_t thread_cpu_ns = 0;  // CPU time of the reading thread (map reads, series updates)
  size_t series = 0;
};

class KernelTracer final : public Collector {
 public:
  KernelTracer();
  ~KernelTracer() override;
  std::string name() const override { return "kernel-tracer"; }
  Layer layer() const override { return Layer::kernel; }
  bool needs_root() const override { return true; }
  CollectorStatus start(TelemetrySink& sink, const CollectorOptions& options) override;
  void add_pid(uint32_t pid) override;
  void stop() override;

  // Reads the counters once in the caller's thread (tests, benchmarks); start() runs this every interval.
  void tick();
  KernelTracerStats stats() const;
  // The BPF programs' own cost since start when kernel.bpf_stats_enabled is on: (program name, runs, total ns).
  struct ProgramCost {
    std::string name;
    uint64_t runs = 0, ns = 0;
  };
  std::vector<ProgramCost> program_costs() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

std::unique_ptr<Collector> make_kernel_tracer();

}  // namespace stackscope::trace

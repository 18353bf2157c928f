// GPU telemetry through NVML, loaded with dlopen at run time: the binary has no link-time dependency on the
// driver, so it runs (without GPU series) on machines that have none.
//
// Per GPU (device "gpuN"), every interval: utilisation (gpu.util, gpu.mem.util), memory (gpu.mem.used,
// gpu.mem.total), power (gpu.power), temperature (gpu.temp), SM clock (gpu.clock.sm), clock-throttle reasons
// (gpu.throttle.reasons bitmask, gpu.throttle.power / .thermal / .hw_slowdown 0|1), PCIe throughput (gpu.pcie.tx,
// gpu.pcie.rx; from the 20 ms query, one GPU a round in turn, where the driver lacks the byte counters; not on an
// idle node's GPU without processes: live_idle). Every slow_interval_ms (values that change slowly or are counters,
// whose rate over a longer span loses nothing): energy
// (gpu.energy), memory clock (gpu.clock.mem), ECC (gpu.ecc.corrected, gpu.ecc.uncorrected), and the field values:
// PCIe replays (gpu.pcie.replay), NVLink data (gpu.nvlink.tx, gpu.nvlink.rx), PCIe byte counters (their rate is
// gpu.pcie.tx / rx). Every process_interval_ms, per process (device "gpuN/pidP"): gpu.proc.sm_util and
// gpu.proc.mem_util (the mean of NVML's samples since the last read), gpu.proc.mem.used, and its name:
// (the running-process list, a cheap query, is read first: a GPU where no process runs gets no process-utilization
// query, 10 ms of CPU a round on 4 idle H200s, with nothing to attribute)
// gpu.proc.present (1.0 each time the process is seen, device "gpuN/pidP/<comm>", comm "?" when /proc here does not
// know the pid; at most 256 such series). XID errors become events
// (layer nvml, name "xid", instant, args xid and gpu). A query that a GPU does not support is skipped from
// then on for that GPU (noted once); the rest of the sample goes on.
#pragma once
#include <atomic>
#include <memory>
#include <string>

#include "model/collector.h"

namespace stackscope {

struct NvmlSamplerOptions {
  std::string library = "libnvidia-ml.so.1";  // dlopen name or path (tests load a fake)
  int interval_ms = 0;                         // 0: CollectorOptions::interval_ms
  bool per_process = true;                     // gpu.proc.* series
  bool xid_events = true;                      // wait for XID events on a thread of their own
  // NVML's calls cost 0.3-0.5 ms of CPU each on busy H200s (39 ms CPU a 100 ms round of 4 GPUs): what
  // changes slowly is read less often. The per-process period is under the incident engine's 1 s window, so every
  // window holds a sample of each process.
  int slow_interval_ms = 1000;
  int process_interval_ms = 500;
  // When set, read before each round: the sampling period now (ms, > 0), so a sampler shared by several consumers
  // can follow the fastest of them (the agent's node sampler while jobs are traced).
  std::shared_ptr<const std::atomic<int>> live_interval_ms;
  // When set, read before each round: true while the node is idle (the agent traces no job). Those rounds follow the
  // idle schedule: slow readings and field values at most every idle_slow_interval_ms (on 4 idle H200s they cost
  // 29 ms of CPU a round, 3 % of a core at 1 s); the first round after it turns false reads them and goes back to
  // slow_interval_ms. The cost note gives each schedule's rounds apart. Idle rounds also leave out the 20 ms PCIe
  // throughput query of a GPU whose last running-process list was empty.
  std::shared_ptr<const std::atomic<bool>> live_idle;
  int idle_slow_interval_ms = 30'000;
};

std::unique_ptr<Collector> make_nvml_sampler(const NvmlSamplerOptions& options = {});

}  // namespace stackscope

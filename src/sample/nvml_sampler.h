// GPU telemetry through NVML, loaded with dlopen at run time: the binary has no link-time dependency on the
// driver, so it runs (without GPU series) on machines that have none.
//
// Per GPU (device "gpuN"), every interval: utilisation (gpu.util, gpu.mem.util), memory (gpu.mem.used,
// gpu.mem.total), power (gpu.power), energy (gpu.energy), temperature (gpu.temp), clocks (gpu.clock.sm,
// gpu.clock.mem), PCIe throughput and replays (gpu.pcie.tx, gpu.pcie.rx, gpu.pcie.replay), clock-throttle
// reasons (gpu.throttle.reasons bitmask, gpu.throttle.power / .thermal / .hw_slowdown 0|1), ECC
// (gpu.ecc.corrected, gpu.ecc.uncorrected), NVLink data (gpu.nvlink.tx, gpu.nvlink.rx). Per process
// (device "gpuN/pidP"): gpu.proc.sm_util, gpu.proc.mem_util, gpu.proc.mem.used, and its name: gpu.proc.present
// (1.0 each interval the process is seen, device "gpuN/pidP/<comm>", comm "?" when /proc here does not know the
// pid; at most 256 such series). XID errors become events
// (layer nvml, name "xid", instant, args xid and gpu). A query that a GPU does not support is skipped from
// then on for that GPU (noted once); the rest of the sample goes on.
#pragma once
#include <memory>
#include <string>

#include "model/collector.h"

namespace stackscope {

struct NvmlSamplerOptions {
  std::string library = "libnvidia-ml.so.1";  // dlopen name or path (tests load a fake)
  int interval_ms = 0;                         // 0: CollectorOptions::interval_ms
  bool per_process = true;                     // gpu.proc.* series
  bool xid_events = true;                      // wait for XID events on a thread of their own
};

std::unique_ptr<Collector> make_nvml_sampler(const NvmlSamplerOptions& options = {});

}  // namespace stackscope

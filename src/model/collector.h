// A source of telemetry started by `record` (procfs sampler, NVML sampler, eBPF tracer...). The recorder
// knows collectors only through this interface; collectors know only the TelemetrySink they write to.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/layer.h"
#include "model/sink.h"

namespace stackscope {

struct CollectorOptions {
  int interval_ms = 100;         // sampling period for samplers
  std::vector<uint32_t> pids;    // traced processes (empty with all_processes=false: none)
  bool all_processes = false;    // --all: every process that maps the libraries
  bool follow_children = true;   // new processes and threads of traced ones
  std::string host;              // host name stamped on series
  std::vector<std::string> torch_ops;  // PyTorch operators to probe (empty: the default list)
};

struct CollectorStatus {
  bool running = false;
  std::string message;  // why not running, or what was degraded ("no PMU: hardware counters unavailable")
};

class Collector {
 public:
  virtual ~Collector() = default;
  virtual std::string name() const = 0;
  virtual Layer layer() const = 0;
  // Needs root (CAP_BPF / CAP_PERFMON...) to work at all.
  virtual bool needs_root() const { return false; }
  // Starts collecting into `sink` (own threads allowed). Returns status; a collector that cannot run says why.
  virtual CollectorStatus start(TelemetrySink& sink, const CollectorOptions& options) = 0;
  // Processes started after start() (the recorder's child, say) are announced here.
  virtual void add_pid(uint32_t /*pid*/) {}
  // Stops and flushes everything it holds into the sink; the sink is not touched afterwards. Idempotent.
  virtual void stop() = 0;
  // Frees what stop() may leave in place because freeing it is slow (the kernel detaches uprobes one RCU grace
  // period at a time), so the recorder can close the recording first. Reports (done, total) as it goes; never
  // touches the sink. Idempotent; the destructor does it too.
  virtual void release(const std::function<void(size_t done, size_t total)>& /*progress*/ = {}) {}
};

}  // namespace stackscope

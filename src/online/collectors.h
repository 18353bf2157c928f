// Which collector serves which layer: the one place that knows every collector implementation.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "model/collector.h"
#include "sample/nvml_sampler.h"

namespace stackscope::online {

struct LayerSupport {
  Layer layer;
  bool built = false;       // this binary has a collector for it
  bool needs_root = false;
};

std::vector<LayerSupport> layer_support();

// Which of the requested layers can run here: `layers` can; the others need root or are not in this build.
struct LayerChoice {
  std::vector<Layer> layers, need_root, unbuilt;
};
LayerChoice choose_layers(const std::vector<Layer>& requested);
// "cuda,nccl,host"
std::string layer_names(const std::vector<Layer>& layers);
// eBPF maps count against RLIMIT_MEMLOCK on older kernels: raised to unlimited (root may) before loading.
void raise_memlock_limit();

// How CPython is traced (see trace/tracer.h): mode auto|stack|usdt|capi|off; duty cycle of the C-API probes
// (0: always attached); stack sampling rate and the shortest blocked time reported.
struct PythonOptions {
  std::string mode = "auto";
  int duty_on_ms = 0, duty_period_ms = 0;
  int sample_hz = 99;
  int64_t offcpu_min_ns = 200'000;
};
// What the uprobe families record (see trace/tracer.h): "budgeted" (entry-only asynchronous calls, torch operators
// counted in the kernel, hot families duty-cycled to stay within budget_pct of the job's CPU) or "full".
struct TraceDetail {
  bool full = false;
  double budget_pct = 1.0;
  uint32_t ringbuf_bytes = 0;  // each probe family's BPF ring buffer (a power of two); 0: the tracer's default
  int budget_period_ms = 0, budget_max_period_ms = 0;  // 0: the tracer's defaults
};
// Collectors for `layers` (one collector may serve several layers, e.g. the uprobe tracer); `nvml` sets the NVML
// sampler's options (the agent's node sampler follows a live period).
std::vector<std::unique_ptr<Collector>> make_collectors(const std::vector<Layer>& layers,
                                                       const PythonOptions& python = {},
                                                       const TraceDetail& detail = {},
                                                       const NvmlSamplerOptions& nvml = {});
// The CPython offsets the stack sampler uses, as JSON ("" in a build without eBPF).
std::string python_offsets_json();

}  // namespace stackscope::online

#include "online/collectors.h"

#include <sys/resource.h>
#include <unistd.h>

#include "sample/nvml_sampler.h"
#include "sample/procfs_sampler.h"
#ifdef STACKSCOPE_HAVE_BPF
#include "trace/kernel_tracer.h"
#include "trace/python_offsets.h"
#include "trace/tracer.h"
#endif

namespace stackscope::online {

std::vector<LayerSupport> layer_support() {
  std::vector<LayerSupport> out;
  for (Layer l : all_layers()) {
    LayerSupport s{l, false, false};
    if (l == Layer::host || l == Layer::nvml) s.built = true;
#ifdef STACKSCOPE_HAVE_BPF
    if (trace::is_traced_layer(l) || l == Layer::kernel) s.built = s.needs_root = true;
#endif
    out.push_back(s);
  }
  return out;
}

LayerChoice choose_layers(const std::vector<Layer>& requested) {
  LayerChoice c;
  const bool root = ::geteuid() == 0;
  auto support = layer_support();
  for (Layer l : requested) {
    auto& s = support[static_cast<size_t>(l)];
    if (!s.built) c.unbuilt.push_back(l);
    else if (s.needs_root && !root) c.need_root.push_back(l);
    else c.layers.push_back(l);
  }
  return c;
}

std::string layer_names(const std::vector<Layer>& layers) {
  std::string s;
  for (Layer l : layers) s += (s.empty() ? "" : ",") + std::string(layer_name(l));
  return s;
}

void raise_memlock_limit() {
  rlimit r{RLIM_INFINITY, RLIM_INFINITY};
  ::setrlimit(RLIMIT_MEMLOCK, &r);
}

std::string python_offsets_json() {
#ifdef STACKSCOPE_HAVE_BPF
  return trace::python_offsets_json();
#else
  return "";
#endif
}

std::vector<std::unique_ptr<Collector>> make_collectors(const std::vector<Layer>& layers, const PythonOptions& python,
                                                       const TraceDetail& detail, const NvmlSamplerOptions& nvml) {
  std::vector<std::unique_ptr<Collector>> out;
  std::vector<Layer> traced;
  (void)python;  // only the eBPF build uses them
  (void)detail;
  for (Layer l : layers) {
    if (l == Layer::host) out.push_back(make_procfs_sampler({}));
    if (l == Layer::nvml) out.push_back(make_nvml_sampler(nvml));
#ifdef STACKSCOPE_HAVE_BPF
    if (trace::is_traced_layer(l)) traced.push_back(l);
    if (l == Layer::kernel) out.push_back(trace::make_kernel_tracer());
#endif
  }
#ifdef STACKSCOPE_HAVE_BPF
  if (!traced.empty()) {
    trace::TracerOptions topts;
    topts.python_mode = python.mode;
    topts.python_duty_on_ms = python.duty_on_ms;
    topts.python_duty_period_ms = python.duty_period_ms;
    topts.python_sample_hz = python.sample_hz;
    topts.python_offcpu_min_ns = static_cast<uint64_t>(python.offcpu_min_ns);
    topts.full_detail = detail.full;
    topts.budget_pct = detail.budget_pct;
    if (detail.ringbuf_bytes) topts.ringbuf_bytes = detail.ringbuf_bytes;
    if (detail.budget_period_ms > 0) topts.budget_period_ms = detail.budget_period_ms;
    if (detail.budget_max_period_ms > 0) topts.budget_max_period_ms = detail.budget_max_period_ms;
    out.push_back(trace::make_uprobe_tracer(traced, topts));
  }
#endif
  return out;
}

}  // namespace stackscope::online

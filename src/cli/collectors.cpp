#include "cli/collectors.h"

namespace stackscope::cli {

// Collectors are added here as they land (procfs sampler, NVML sampler, eBPF tracer).
std::vector<LayerSupport> layer_support() {
  std::vector<LayerSupport> out;
  for (Layer l : all_layers()) out.push_back({l, false, l != Layer::host && l != Layer::nvml});
  return out;
}

std::vector<std::unique_ptr<Collector>> make_collectors(const std::vector<Layer>&) { return {}; }

}  // namespace stackscope::cli

// Which collector serves which layer: the one place that knows every collector implementation.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "model/collector.h"

namespace stackscope::cli {

struct LayerSupport {
  Layer layer;
  bool built = false;       // this binary has a collector for it
  bool needs_root = false;
};

std::vector<LayerSupport> layer_support();
// Collectors for `layers` (one collector may serve several layers, e.g. the uprobe tracer).
// python_mode: how CPython is traced (auto|usdt|capi|off); python_duty_*: duty cycle of the C-API probes
// (0: always attached). See trace/tracer.h.
std::vector<std::unique_ptr<Collector>> make_collectors(const std::vector<Layer>& layers,
                                                       const std::string& python_mode = "auto",
                                                       int python_duty_on_ms = 0, int python_duty_period_ms = 0);

}  // namespace stackscope::cli

#include "cli/series_sizing.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

namespace stackscope::cli {

analyze::WindowSpec resolve_window_spec(const std::string& window, const std::string& stride,
                                        std::optional<int64_t> interval_ns, int64_t span_ns, std::string& warning) {
  auto parse = [](const std::string& flag, const std::string& text) -> std::optional<int64_t> {
    if (text.empty()) return std::nullopt;
    auto ns = analyze::parse_duration_ns(text);
    if (!ns)
      throw std::invalid_argument(fmt::format("bad {} '{}': a positive duration such as 3s, 5m or 1h (units: {})", flag,
                                              text, analyze::duration_units()));
    return ns;
  };
  const auto given_window = parse("--window", window), given_stride = parse("--stride", stride);
  const analyze::SizedWindows sized = analyze::size_windows(interval_ns, span_ns);
  analyze::WindowSpec spec;
  spec.size_ns = given_window.value_or(std::max(sized.spec.size_ns, given_stride.value_or(0)));
  spec.stride_ns = given_stride.value_or(std::min(sized.spec.stride_ns, spec.size_ns));
  if (spec.stride_ns > spec.size_ns)
    throw std::invalid_argument(fmt::format("--stride {} is longer than the --window {}: windows would skip samples",
                                            analyze::format_duration(spec.stride_ns),
                                            analyze::format_duration(spec.size_ns)));
  warning = analyze::window_sample_warning(spec.size_ns, spec.stride_ns, interval_ns);
  return spec;
}

}  // namespace stackscope::cli

// Window sizing from a recording's own sampling interval (store/recording_sampling_interval.h,
// analyze/reveal/window_sizing.h), shared by `analyze --detector reveal` and `analyze --detector series`.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "analyze/reveal/window_sizing.h"

namespace stackscope::cli {

// --window / --stride as given ("" = size from the data), checked; throws std::invalid_argument naming the flag
// and the accepted units. `warning` gets window_sample_warning's text (empty when the window holds enough).
analyze::WindowSpec resolve_window_spec(const std::string& window, const std::string& stride,
                                        std::optional<int64_t> interval_ns, int64_t span_ns, std::string& warning);

}  // namespace stackscope::cli

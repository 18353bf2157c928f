// A CLI11 transform for options stored in seconds that a person writes as durations: "90", "1.5s", "500ms", "2m",
// "1h", "7d" all become seconds before CLI11 converts the value, and a bad one names the accepted units (CLI11's own
// message for "1s" on a double option was a range of 0 to 1.8e308).
#pragma once
#include <cstdlib>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "analyze/reveal/windows.h"

namespace stackscope::cli {

inline CLI::Validator duration_seconds() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        // A plain number (1e-6 too) is seconds already: left to CLI11 and the option's own range checks, which
        // give their own messages (a window too small for memory, a duration past 1e9 s).
        char* end = nullptr;
        std::strtod(text.c_str(), &end);
        if (!text.empty() && end == text.c_str() + text.size()) return {};
        const auto ns = analyze::parse_duration_ns(text);
        if (!ns)
          return fmt::format("'{}' is not a positive duration such as 30, 1.5s, 500ms, 5m or 1h (units: {})", text,
                             analyze::duration_units());
        text = fmt::format("{:.9g}", static_cast<double>(*ns) / 1e9);
        return {};
      },
      "DURATION");
}

}  // namespace stackscope::cli

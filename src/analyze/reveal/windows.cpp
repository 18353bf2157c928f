#include "analyze/reveal/windows.h"

#include <cctype>
#include <charconv>
#include <climits>
#include <cmath>
#include <stdexcept>
#include <string>

#include "analyze/features/window_limits.h"

namespace stackscope::analyze {

void validate_window_spec(const WindowSpec& spec) {
  if (spec.size_ns <= 0 || spec.stride_ns <= 0 || spec.stride_ns > spec.size_ns)
    throw std::invalid_argument("window spec: need 0 < stride <= size (size " + std::to_string(spec.size_ns) +
                                " ns, stride " + std::to_string(spec.stride_ns) + " ns)");
}

size_t window_count(int64_t t_begin, int64_t t_end, const WindowSpec& spec) {
  validate_window_spec(spec);
  if (t_end <= t_begin) return 0;
  int64_t span = t_end - t_begin;
  if (span < spec.size_ns) return 1;
  check_window_count(span - spec.size_ns, spec.stride_ns, "stride");
  return static_cast<size_t>((span - spec.size_ns) / spec.stride_ns) + 1;
}

TimeWindow window_at(int64_t t_begin, size_t index, const WindowSpec& spec) {
  int64_t start = t_begin + static_cast<int64_t>(index) * spec.stride_ns;
  return {start, start + spec.size_ns};
}

std::vector<TimeWindow> sliding_windows(int64_t t_begin, int64_t t_end, const WindowSpec& spec) {
  size_t n = window_count(t_begin, t_end, spec);
  std::vector<TimeWindow> out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) out.push_back(window_at(t_begin, i, spec));
  return out;
}

std::optional<int64_t> parse_duration_ns(std::string_view text) {
  // Split the number from its unit suffix.
  size_t pos = 0;
  while (pos < text.size() && (std::isdigit(static_cast<unsigned char>(text[pos])) || text[pos] == '.')) ++pos;
  if (pos == 0) return std::nullopt;
  double number = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + pos, number);
  if (ec != std::errc() || ptr != text.data() + pos) return std::nullopt;
  std::string_view unit = text.substr(pos);
  double scale;
  if (unit.empty() || unit == "s") scale = 1e9;
  else if (unit == "ms") scale = 1e6;
  else if (unit == "us") scale = 1e3;
  else if (unit == "ns") scale = 1;
  else if (unit == "m" || unit == "min") scale = 60e9;
  else if (unit == "h") scale = 3600e9;
  else if (unit == "d") scale = 86400e9;
  else return std::nullopt;
  double ns = std::round(number * scale);
  if (!(ns >= 1) || ns > 9e18) return std::nullopt;
  return static_cast<int64_t>(ns);
}

std::string_view duration_units() { return "ns, us, ms, s (a bare number), m or min, h, d"; }

std::string format_duration(int64_t ns) {
  struct Unit {
    int64_t ns;
    const char* name;
  };
  static constexpr Unit kUnits[] = {{86'400'000'000'000, "d"}, {3'600'000'000'000, "h"}, {60'000'000'000, "m"},
                                    {1'000'000'000, "s"},      {1'000'000, "ms"},          {1'000, "us"}};
  for (const Unit& u : kUnits) {
    if (ns < u.ns) continue;
    if (ns % u.ns == 0) return std::to_string(ns / u.ns) + u.name;
    // Up to three decimals when exact (1.5s, 2.25h), else the next unit down.
    for (int64_t d : {10, 100, 1000})
      if (ns <= INT64_MAX / d && (ns * d) % u.ns == 0) {
        std::string digits = std::to_string(ns * d / u.ns);
        const size_t dot = digits.size() - (d == 10 ? 1 : d == 100 ? 2 : 3);
        return digits.substr(0, dot) + "." + digits.substr(dot) + u.name;
      }
  }
  return std::to_string(ns) + "ns";
}

std::optional<CounterDifferencer::Step> CounterDifferencer::push(int64_t t_ns, double total) {
  if (!have_previous_) {
    have_previous_ = true;
    previous_t_ns_ = t_ns;
    previous_total_ = total;
    return std::nullopt;
  }
  Step step;
  step.increment = total >= previous_total_ ? total - previous_total_ : total;  // below: reset from zero
  int64_t dt = t_ns - previous_t_ns_;
  step.rate_per_s = dt > 0 ? step.increment / (static_cast<double>(dt) * 1e-9) : 0.0;
  previous_t_ns_ = t_ns;
  previous_total_ = total;
  return step;
}

}  // namespace stackscope::analyze

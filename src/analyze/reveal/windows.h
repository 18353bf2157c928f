// Reveal §4.2: overlapping sliding windows over time (default 3 s long, 1 s stride) and the conversion of
// cumulative counters into per-interval increments and rates, which is what windows of counters are built on.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace stackscope::analyze {

struct WindowSpec {
  int64_t size_ns = 3'000'000'000;
  int64_t stride_ns = 1'000'000'000;
};

// [start_ns, end_ns): a sample at end_ns belongs to the next window.
struct TimeWindow {
  int64_t start_ns = 0;
  int64_t end_ns = 0;
};

// Throws std::invalid_argument unless 0 < stride <= size.
void validate_window_spec(const WindowSpec& spec);

// Windows starting at t_begin every stride that end at or before t_end. A span shorter than one window
// yields one window covering [t_begin, t_begin + size) so that short recordings are still analysed.
size_t window_count(int64_t t_begin, int64_t t_end, const WindowSpec& spec);
TimeWindow window_at(int64_t t_begin, size_t index, const WindowSpec& spec);
std::vector<TimeWindow> sliding_windows(int64_t t_begin, int64_t t_end, const WindowSpec& spec);

// "3s", "1.5s", "500ms", "250us", "100ns", "2m", "1h", "7d"; a bare number is seconds. nullopt when malformed
// or <= 0.
std::optional<int64_t> parse_duration_ns(std::string_view text);
// The units parse_duration_ns accepts, for error messages: "ns, us, ms, s (default), m or min, h, d".
std::string_view duration_units();
// The shortest exact form in the largest unit that fits: 300000000000 -> "5m", 1500000000 -> "1.5s".
std::string format_duration(int64_t ns);

// Turns a cumulative counter into per-interval increments. A value below the previous one is a reset (the
// counter restarted from zero, e.g. after a reboot or a driver reload): its increment is the new value.
class CounterDifferencer {
 public:
  struct Step {
    double increment = 0;     // counted since the previous sample
    double rate_per_s = 0;    // increment / elapsed seconds (0 when the clock did not advance)
  };
  // nullopt for the first sample (no previous total to difference against).
  std::optional<Step> push(int64_t t_ns, double total);

 private:
  bool have_previous_ = false;
  int64_t previous_t_ns_ = 0;
  double previous_total_ = 0;
};

}  // namespace stackscope::analyze

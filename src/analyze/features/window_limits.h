// The most windows (and window x column cells) one analysis may build. A window or stride chosen far below the
// data's sampling interval (1 ns over a 3.5 s recording: 3.5e9 windows) would otherwise grow until the kernel's
// OOM killer strikes, on a training node perhaps the job itself; past these limits the command ends with an
// error that names the limit and the smallest window that fits. docs/FEATURES.md documents the numbers.
#pragma once
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace stackscope::analyze {

// A million windows: 11.5 days at a 1 s stride, 2.8 h at 10 ms.
inline constexpr size_t kMaxWindows = 1'000'000;
// What the windows x columns tables of one analysis may hold: 4 GiB.
inline constexpr size_t kMaxWindowTableBytes = size_t{4} << 30;

// Throws std::invalid_argument when a span of span_ns cut every step_ns makes more than kMaxWindows windows.
// `what` names the parameter ("window", "stride") for the message.
inline void check_window_count(int64_t span_ns, int64_t step_ns, const char* what) {
  if (step_ns <= 0 || span_ns <= 0) return;
  const double windows = static_cast<double>(span_ns) / static_cast<double>(step_ns);
  if (windows <= static_cast<double>(kMaxWindows)) return;
  const double smallest_s = static_cast<double>(span_ns) / static_cast<double>(kMaxWindows) * 1e-9;
  throw std::invalid_argument(fmt::format(
      "a {} of {:g} s over {:g} s of data would make {:.3g} windows, more than the limit of {} (memory); "
      "choose a {} of at least {:.3g} s",
      what, static_cast<double>(step_ns) * 1e-9, static_cast<double>(span_ns) * 1e-9, windows, kMaxWindows, what,
      smallest_s));
}

// Throws std::invalid_argument when `columns` columns of `windows` cells of `bytes_per_cell` bytes each would
// hold more than kMaxWindowTableBytes. `what` names the table for the message.
inline void check_window_cells(size_t windows, size_t columns, size_t bytes_per_cell, const char* what) {
  if (columns == 0 || windows == 0 || bytes_per_cell == 0) return;
  if (windows <= kMaxWindowTableBytes / bytes_per_cell / columns) return;
  throw std::invalid_argument(fmt::format(
      "{}: {} windows x {} columns would take {:.3g} GiB, more than the limit of {} GiB (memory); choose a longer "
      "window or stride, or fewer series",
      what, windows, columns,
      static_cast<double>(windows) * static_cast<double>(columns) * static_cast<double>(bytes_per_cell) /
          static_cast<double>(size_t{1} << 30),
      kMaxWindowTableBytes >> 30));
}

}  // namespace stackscope::analyze

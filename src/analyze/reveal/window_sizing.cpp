#include "analyze/reveal/window_sizing.h"

#include <algorithm>

namespace stackscope::analyze {

namespace {
int64_t median(std::vector<int64_t> v) {
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}
}  // namespace

void SamplingIntervalEstimator::add_run(SeriesId series, std::span<const int64_t> t_ns) {
  PerSeries& s = series_[series];
  for (int64_t t : t_ns) {
    if (s.gaps.size() >= kKeptGaps) return;
    if (s.last && t > *s.last) s.gaps.push_back(t - *s.last);
    s.last = t;
  }
}

std::optional<int64_t> SamplingIntervalEstimator::interval_ns() const {
  std::vector<int64_t> per_series;
  for (const auto& [id, s] : series_)
    if (!s.gaps.empty()) per_series.push_back(median(s.gaps));
  if (per_series.empty()) return std::nullopt;
  return median(std::move(per_series));
}

SizedWindows size_windows(std::optional<int64_t> interval_ns, int64_t span_ns) {
  constexpr int64_t kSecond = 1'000'000'000;
  SizedWindows out;
  out.interval_ns = interval_ns;
  WindowSpec& w = out.spec;  // Reveal's 3 s / 1 s
  if (interval_ns && *interval_ns > 0) {
    w.stride_ns = std::max(kSecond, *interval_ns);
    w.size_ns = std::max(3 * kSecond, static_cast<int64_t>(kWindowSamples) * *interval_ns);
  }
  if (span_ns > 0 && span_ns / w.stride_ns > static_cast<int64_t>(kMaxAutoWindows)) {
    // Whole multiples of the interval, so each stride still holds whole samples.
    const int64_t unit = interval_ns && *interval_ns > 0 ? *interval_ns : kSecond;
    const int64_t need = span_ns / static_cast<int64_t>(kMaxAutoWindows) + 1;
    w.stride_ns = (need + unit - 1) / unit * unit;
    w.size_ns = std::max(w.size_ns, 3 * w.stride_ns);
  }
  return out;
}

std::string window_sample_warning(int64_t window_ns, int64_t stride_ns, std::optional<int64_t> interval_ns) {
  if (!interval_ns || *interval_ns <= 0) return {};
  const double held = static_cast<double>(window_ns) / static_cast<double>(*interval_ns);
  if (held >= static_cast<double>(kMinWindowSamples)) return {};
  const SizedWindows sized = size_windows(interval_ns, 0);
  std::string msg =
      "a " + format_duration(window_ns) + " window holds " +
      (held < 1 ? std::string("at most one sample") : "about " + std::to_string(static_cast<int>(held)) + " samples") +
      " of series sampled every " + format_duration(*interval_ns) + " (window features need several): try --window " +
      format_duration(sized.spec.size_ns) + " --stride " + format_duration(sized.spec.stride_ns) +
      ", or leave both out to size them from the data";
  if (stride_ns < *interval_ns)
    msg += "; a " + format_duration(stride_ns) + " stride makes " +
           std::to_string(*interval_ns / std::max<int64_t>(stride_ns, 1)) + " windows per sample";
  return msg;
}

}  // namespace stackscope::analyze

// Medians, quantiles and MAD for the analysis engine. median(), mean_of(), quantile() and robust_sd() use the finite
// values of a sample and give NaN for none (the incident engine's baselines, robust to the episodes they are
// compared with); median_of() and median_in_place() take every value (samples known finite: durations, scores).
#pragma once
#include <algorithm>
#include <cmath>
#include <vector>

namespace stackscope::analyze {

// The median of a non-empty `v`, reordering it; for an even count the mean of the two middle values (with 4
// workers the upper middle value would often be an outlier's neighbour).
inline double median_in_place(std::vector<double>& v) {
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
  const double hi = v[mid];
  if (v.size() % 2) return hi;
  return (hi + *std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid))) / 2;
}

// The median of every value; 0 for an empty sample.
inline double median_of(std::vector<double> v) { return v.empty() ? 0 : median_in_place(v); }

// The median of the finite values; NaN for an empty sample (or one with no finite value).
inline double median(std::vector<double> v) {
  std::erase_if(v, [](double x) { return !std::isfinite(x); });
  if (v.empty()) return NAN;
  return median_in_place(v);
}

// The mean of the finite values; NaN when there is none.
inline double mean_of(const std::vector<double>& v) {
  double sum = 0;
  size_t n = 0;
  for (double x : v)
    if (std::isfinite(x)) sum += x, ++n;
  return n ? sum / static_cast<double>(n) : NAN;
}

inline double quantile(std::vector<double> v, double q) {
  std::erase_if(v, [](double x) { return !std::isfinite(x); });
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<size_t>(pos);
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (pos - static_cast<double>(lo)) * (v[hi] - v[lo]);
}

// 1.4826 x median absolute deviation: the standard deviation of a normal sample.
// median() and robust_sd() with `scratch` as their working copy, for hot loops (the online engine's cause rules
// take both over every matching column of every episode, every second): no allocation once it has grown.
inline double median(const std::vector<double>& v, std::vector<double>& scratch) {
  scratch.clear();
  for (double x : v)
    if (std::isfinite(x)) scratch.push_back(x);
  return scratch.empty() ? NAN : median_in_place(scratch);
}
inline double robust_sd(const std::vector<double>& v, double centre, std::vector<double>& scratch) {
  scratch.clear();
  for (double x : v)
    if (std::isfinite(x) && std::isfinite(std::abs(x - centre))) scratch.push_back(std::abs(x - centre));
  return 1.4826 * (scratch.empty() ? NAN : median_in_place(scratch));
}

inline double robust_sd(const std::vector<double>& v, double centre) {
  std::vector<double> scratch;
  scratch.reserve(v.size());
  return robust_sd(v, centre, scratch);
}

}  // namespace stackscope::analyze

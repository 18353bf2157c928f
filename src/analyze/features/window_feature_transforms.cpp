#include "analyze/features/window_feature_transforms.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "analyze/detectors/thresholds.h"

namespace stackscope::analyze {

namespace {

void require_features_header(const std::vector<std::string>& columns, const std::string& source) {
  if (columns.size() < 3 || columns[0] != "t0_ns" || columns[1] != "t1_ns")
    throw std::invalid_argument(source + " is not a table of `stackscope features` (t0_ns,t1_ns first)");
}

}  // namespace

WindowFeatureTable window_table_from_columns(const std::vector<std::string>& columns, std::span<const double> values,
                                             const std::string& source) {
  require_features_header(columns, source);
  const size_t width = columns.size(), rows = values.size() / width;
  if (rows == 0 || values.size() % width != 0) throw std::invalid_argument(source + " has no windows");
  auto at = [&](size_t r, size_t c) { return values[r * width + c]; };
  // Window bounds in ns, kept within +-4e18 (127 years) and so the grid's arithmetic within int64_t: converting
  // a double beyond it, or overflowing it, would be undefined.
  constexpr double kMaxNs = 4e18;
  auto ns_at = [&](size_t r, size_t c) {
    const double v = at(r, c);
    if (!(std::abs(v) <= kMaxNs))
      throw std::invalid_argument(source + ": window " + std::to_string(r) + " has a bound that is not a time in ns");
    return static_cast<int64_t>(v);
  };
  const int64_t first = ns_at(0, 0);
  const int64_t step = ns_at(0, 1) - first;
  if (step <= 0) throw std::invalid_argument(source + ": the first window ends before it starts");
  if (static_cast<double>(step) * static_cast<double>(rows) > kMaxNs)
    throw std::invalid_argument(source + ": its windows span more than 4e18 ns");
  WindowFeatureTable t;
  t.grid = {first, step, rows};
  for (size_t r = 0; r < rows; ++r)
    if (ns_at(r, 0) != t.grid.start(r) || ns_at(r, 1) != t.grid.end(r))
      throw std::invalid_argument(source + ": window " + std::to_string(r) +
                                  " is not back to back with the others at the first window's width");
  t.columns.assign(columns.begin() + 2, columns.end());
  t.values.resize(static_cast<Eigen::Index>(rows), static_cast<Eigen::Index>(width - 2));
  for (size_t r = 0; r < rows; ++r)
    for (size_t c = 2; c < width; ++c) t.values(static_cast<Eigen::Index>(r), static_cast<Eigen::Index>(c - 2)) = at(r, c);
  t.filled.assign(t.columns.size(), 0);
  return t;
}

WindowFeatureTable conform_to_reference(const WindowFeatureTable& table, const std::vector<std::string>& columns,
                                        std::span<const double> values, const std::string& source) {
  require_features_header(columns, source);
  // The reference's columns, its medians standing in for what this table lacks.
  const size_t width = columns.size(), rows = values.size() / width;
  std::map<std::string, double> medians;
  std::vector<double> col(rows);
  for (size_t c = 2; c < width; ++c) {
    for (size_t r = 0; r < rows; ++r) col[r] = values[r * width + c];
    medians[columns[c]] = threshold_at_quantile(std::span<const double>(col), 0.5);
  }
  return conform_columns(table, std::vector<std::string>(columns.begin() + 2, columns.end()), medians);
}

namespace {

struct SideBaseline {
  std::vector<double> median, spread;  // per window; NaN where the side has no usable neighbour
};

// Baseline of each window from the `n` windows before it (finite values only): their median and, with
// `want_spread`, 1.4826 x their median absolute deviation. A sorted copy of the sliding window is kept, so a
// step costs O(n) moves rather than a sort.
SideBaseline trailing_baseline(const std::vector<double>& v, size_t n, bool want_spread) {
  const size_t rows = v.size();
  SideBaseline b{std::vector<double>(rows, NAN), std::vector<double>(rows, NAN)};
  std::vector<double> sorted, dev;
  auto median_of_sorted = [](const std::vector<double>& s) {
    const size_t m = s.size() / 2;
    return s.size() % 2 ? s[m] : 0.5 * (s[m - 1] + s[m]);
  };
  for (size_t w = 0; w < rows; ++w) {
    if (!sorted.empty()) {
      const double med = median_of_sorted(sorted);
      b.median[w] = med;
      if (want_spread) {
        dev.resize(sorted.size());
        for (size_t i = 0; i < sorted.size(); ++i) dev[i] = std::abs(sorted[i] - med);
        std::sort(dev.begin(), dev.end());
        b.spread[w] = 1.4826 * median_of_sorted(dev);
      }
    }
    // Slide: window w joins, window w - n leaves (for the next window, w + 1, the neighbours are w + 1 - n .. w).
    if (std::isfinite(v[w])) sorted.insert(std::upper_bound(sorted.begin(), sorted.end(), v[w]), v[w]);
    if (w >= n && std::isfinite(v[w - n])) sorted.erase(std::lower_bound(sorted.begin(), sorted.end(), v[w - n]));
  }
  return b;
}

}  // namespace

WindowFeatureTable departure_from_baseline(const WindowFeatureTable& table, const BaselineOptions& opt) {
  if (opt.windows == 0) throw std::invalid_argument("baseline: the number of windows must be > 0");
  WindowFeatureTable out = table;
  const auto rows = static_cast<size_t>(table.values.rows());
  for (Eigen::Index c = 0; c < table.values.cols(); ++c) {
    std::vector<double> v(rows);
    for (size_t r = 0; r < rows; ++r) v[r] = table.values(static_cast<Eigen::Index>(r), c);
    const SideBaseline past = trailing_baseline(v, opt.windows, opt.scale_by_mad);
    SideBaseline future;
    if (opt.side == BaselineSide::both) {
      // The windows after w are the windows before it in reverse time.
      std::vector<double> rev(v.rbegin(), v.rend());
      future = trailing_baseline(rev, opt.windows, opt.scale_by_mad);
      std::reverse(future.median.begin(), future.median.end());
      std::reverse(future.spread.begin(), future.spread.end());
    }
    // Departure from one side's baseline; NaN when that side has none.
    auto departure = [&](const SideBaseline& b, size_t w) {
      if (b.median.empty() || std::isnan(b.median[w])) return static_cast<double>(NAN);
      const double d = v[w] - b.median[w];
      const double scale = opt.scale_by_mad ? std::max(b.spread[w], opt.floor.of(b.median[w])) : 1.0;
      return scale > 0 ? d / scale : d;  // a still baseline without a floor: the departure in the column's units
    };
    for (size_t w = 0; w < rows; ++w) {
      double x = 0;
      if (std::isfinite(v[w])) {
        const double p = departure(past, w), f = departure(future, w);
        if (std::isnan(p) || std::isnan(f)) {
          x = std::isnan(p) ? (std::isnan(f) ? 0.0 : f) : p;
        } else {
          // Both sides: only a departure from both, in the same direction, by the smaller amount.
          x = (p > 0) == (f > 0) && p != 0 && f != 0 ? std::copysign(std::min(std::abs(p), std::abs(f)), p) : 0.0;
        }
      }
      out.values(static_cast<Eigen::Index>(w), c) = x;
    }
  }
  return out;
}

}  // namespace stackscope::analyze

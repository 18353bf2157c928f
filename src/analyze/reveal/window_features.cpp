#include "analyze/reveal/window_features.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "analyze/features/window_limits.h"

namespace stackscope::analyze {

std::string_view window_feature_name(WindowFeature f) {
  switch (f) {
    case WindowFeature::mean: return "mean";
    case WindowFeature::variance: return "variance";
    case WindowFeature::std_dev: return "std_dev";
    case WindowFeature::min: return "min";
    case WindowFeature::max: return "max";
    case WindowFeature::skewness: return "skewness";
    case WindowFeature::kurtosis: return "kurtosis";
    case WindowFeature::autocorr_lag1: return "autocorr_lag1";
    case WindowFeature::trend_slope: return "trend_slope";
    case WindowFeature::stationarity: return "stationarity";
    case WindowFeature::sum: return "sum";
  }
  return "unknown";
}

void dynamic_window_features(std::span<const double> x, std::span<const int64_t> t_ns,
                             std::span<double, kDynamicFeatureCount> out) {
  std::fill(out.begin(), out.end(), 0.0);
  const size_t n = std::min(x.size(), t_ns.size());
  if (n == 0) return;
  // Pass 1: mean, extremes, time centre.
  double sum = 0, lo = x[0], hi = x[0];
  const int64_t t0 = t_ns[0];
  double tsum = 0;
  for (size_t i = 0; i < n; ++i) {
    sum += x[i];
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
    tsum += static_cast<double>(t_ns[i] - t0);
  }
  const double dn = static_cast<double>(n);
  const double mean = sum / dn, tmean = tsum / dn;
  // Pass 2: central moments, lag-1 covariance, time covariance, cumulative sums for KPSS.
  double m2 = 0, m3 = 0, m4 = 0, lag1 = 0, lag2 = 0, stt = 0, sxt = 0, cusum = 0, cusum_sq = 0;
  double prev = 0, prev2 = 0;
  for (size_t i = 0; i < n; ++i) {
    const double d = x[i] - mean, d2 = d * d;
    m2 += d2;
    m3 += d2 * d;
    m4 += d2 * d2;
    if (i >= 1) lag1 += d * prev;
    if (i >= 2) lag2 += d * prev2;
    prev2 = prev;
    prev = d;
    const double dt = static_cast<double>(t_ns[i] - t0) - tmean;
    stt += dt * dt;
    sxt += dt * d;
    cusum += d;
    cusum_sq += cusum * cusum;
  }
  const double var = m2 / dn;
  out[static_cast<size_t>(WindowFeature::mean)] = mean;
  out[static_cast<size_t>(WindowFeature::min)] = lo;
  out[static_cast<size_t>(WindowFeature::max)] = hi;
  // A spread below rounding noise of the level counts as constant: shape features stay 0 instead of noise.
  const double tiny = 1e-12 * std::max(1.0, mean * mean);
  if (var > tiny) {
    out[static_cast<size_t>(WindowFeature::variance)] = var;
    out[static_cast<size_t>(WindowFeature::std_dev)] = std::sqrt(var);
    out[static_cast<size_t>(WindowFeature::skewness)] = (m3 / dn) / (var * std::sqrt(var));
    out[static_cast<size_t>(WindowFeature::kurtosis)] = (m4 / dn) / (var * var) - 3.0;
    out[static_cast<size_t>(WindowFeature::autocorr_lag1)] = lag1 / m2;
    // KPSS (level): eta = sum S_t^2 / (n^2 s^2(l)), Newey-West long-run variance with Bartlett weights, l = 2
    // (Schwert's rule floor(4 (n/100)^(1/4)) for windows of ~30 samples).
    const double lrv = (m2 + 2.0 * (2.0 / 3.0) * lag1 + 2.0 * (1.0 / 3.0) * (n > 2 ? lag2 : 0.0)) / dn;
    const double s2 = lrv > 0 ? lrv : var;
    out[static_cast<size_t>(WindowFeature::stationarity)] = cusum_sq / (dn * dn * s2);
  }
  if (stt > 0) out[static_cast<size_t>(WindowFeature::trend_slope)] = sxt / stt * 1e9;  // per second
}

WindowFeatureExtractor::WindowFeatureExtractor(WindowSpec spec, int64_t t_begin, int64_t t_end, bool levels_only)
    : spec_(spec),
      t_begin_(t_begin),
      windows_(analyze::window_count(t_begin, t_end, spec)),
      levels_only_(levels_only) {}

void WindowFeatureExtractor::set_row_sink(RowSink sink, size_t max_pending) {
  if (layout_fixed_ || !columns_.empty()) throw std::logic_error("WindowFeatureExtractor: set_row_sink after add_series");
  sink_ = std::move(sink);
  max_pending_ = max_pending;
}

void WindowFeatureExtractor::fix_layout() {
  if (layout_fixed_) return;
  layout_fixed_ = true;
  if (sink_) {
    emitted_sum_.assign(columns_.size(), 0.0);
    emitted_n_.assign(columns_.size(), 0);
    if (max_pending_ == 0) max_pending_ = std::max<size_t>(600, (size_t{4} << 20) / std::max<size_t>(columns_.size(), 1));
    return;
  }
  check_window_cells(windows_, columns_.size(), sizeof(double) + sizeof(uint8_t), "reveal window features");
  matrix_.setZero(static_cast<Eigen::Index>(windows_), static_cast<Eigen::Index>(columns_.size()));
  missing_.assign(windows_ * columns_.size(), 1);
}

double* WindowFeatureExtractor::cell(size_t w, size_t c) {
  if (!sink_) {
    missing_[w * columns_.size() + c] = 0;
    return &matrix_(static_cast<Eigen::Index>(w), static_cast<Eigen::Index>(c));
  }
  if (w < first_pending_) {
    ++dropped_;
    return nullptr;
  }
  while (first_pending_ + pending_.size() <= w)
    pending_.push_back({std::vector<double>(columns_.size(), 0.0), std::vector<uint8_t>(columns_.size(), 1)});
  PendingRow& row = pending_[w - first_pending_];
  row.missing[c] = 0;
  return &row.values[c];
}

void WindowFeatureExtractor::emit_ready(bool all) {
  if (!sink_) return;
  // Every series has completed the windows before the smallest next_window.
  size_t ready = windows_;
  for (const auto& [id, s] : series_)
    if (s.category != SeriesCategory::static_value) ready = std::min(ready, s.next_window);
  if (all) ready = windows_;
  while (first_pending_ < windows_ && (first_pending_ < ready || pending_.size() > max_pending_)) {
    if (pending_.empty())
      pending_.push_back({std::vector<double>(columns_.size(), 0.0), std::vector<uint8_t>(columns_.size(), 1)});
    PendingRow& row = pending_.front();
    for (size_t c = 0; c < columns_.size(); ++c) {
      if (row.missing[c]) {
        row.values[c] = emitted_n_[c] ? emitted_sum_[c] / static_cast<double>(emitted_n_[c]) : 0.0;
      } else {
        emitted_sum_[c] += row.values[c];
        ++emitted_n_[c];
      }
    }
    sink_(first_pending_, row.values);
    pending_.pop_front();
    ++first_pending_;
  }
}

void WindowFeatureExtractor::add_series(SeriesId id, SeriesKind kind, SeriesCategory category) {
  if (layout_fixed_) throw std::logic_error("WindowFeatureExtractor: add_series after samples");
  if (series_.count(id)) return;
  SeriesState s;
  s.kind = kind;
  s.category = kind == SeriesKind::static_value ? SeriesCategory::static_value : category;
  s.first_column = columns_.size();
  if (s.category == SeriesCategory::dynamic) {
    const size_t features = levels_only_ ? 1 : kDynamicFeatureCount;
    for (size_t f = 0; f < features; ++f) columns_.push_back({id, static_cast<WindowFeature>(f)});
  } else if (s.category == SeriesCategory::event_counter) {
    columns_.push_back({id, WindowFeature::sum});
  }
  series_.emplace(id, std::move(s));
}

void WindowFeatureExtractor::add_samples(SeriesId id, std::span<const int64_t> t_ns, std::span<const double> values) {
  fix_layout();
  auto it = series_.find(id);
  if (it == series_.end()) return;  // not declared: not analysed
  SeriesState& s = it->second;
  const size_t n = std::min(t_ns.size(), values.size());
  for (size_t i = 0; i < n; ++i) {
    const int64_t t = t_ns[i];
    double v = values[i];
    if (!std::isfinite(v)) continue;  // a sensor that could not be read: not a value
    if (s.kind == SeriesKind::counter) {
      auto step = s.counter.push(t, v);
      if (!step) continue;
      v = s.category == SeriesCategory::event_counter ? step->increment : step->rate_per_s;
    }
    s.level_sum += v;
    ++s.level_n;
    if (s.category == SeriesCategory::static_value || t < t_begin_) continue;
    if (s.next_window >= windows_) continue;
    if (t < window_at(t_begin_, s.next_window, spec_).start_ns) {
      ++dropped_;
      continue;
    }
    complete_windows_before(s, t);
    s.t.push_back(t);
    s.v.push_back(v);
  }
  emit_ready(false);
}

void WindowFeatureExtractor::complete_windows_before(SeriesState& s, int64_t t_ns) {
  while (s.next_window < windows_ && window_at(t_begin_, s.next_window, spec_).end_ns <= t_ns) {
    complete_window(s, s.next_window);
    ++s.next_window;
    // Forget samples that no later window contains.
    const int64_t keep_from = window_at(t_begin_, s.next_window, spec_).start_ns;
    while (s.head < s.t.size() && s.t[s.head] < keep_from) ++s.head;
    if (s.head > 256 && s.head * 2 > s.t.size()) {
      s.t.erase(s.t.begin(), s.t.begin() + static_cast<std::ptrdiff_t>(s.head));
      s.v.erase(s.v.begin(), s.v.begin() + static_cast<std::ptrdiff_t>(s.head));
      s.head = 0;
    }
  }
}

void WindowFeatureExtractor::complete_window(SeriesState& s, size_t w) {
  const TimeWindow win = window_at(t_begin_, w, spec_);
  size_t b = s.head;
  while (b < s.t.size() && s.t[b] < win.start_ns) ++b;
  size_t e = b;
  while (e < s.t.size() && s.t[e] < win.end_ns) ++e;
  if (e == b) return;  // no sample: stays missing
  auto put = [&](size_t c, double value) {
    if (double* p = cell(w, c)) *p = value;
  };
  if (s.category == SeriesCategory::dynamic && levels_only_) {
    double sum = 0;
    for (size_t i = b; i < e; ++i) sum += s.v[i];
    put(s.first_column, sum / static_cast<double>(e - b));
  } else if (s.category == SeriesCategory::dynamic) {
    std::array<double, kDynamicFeatureCount> f;
    dynamic_window_features(std::span<const double>(s.v.data() + b, e - b),
                            std::span<const int64_t>(s.t.data() + b, e - b), f);
    for (size_t k = 0; k < kDynamicFeatureCount; ++k) put(s.first_column + k, f[k]);
  } else {
    double sum = 0;
    for (size_t i = b; i < e; ++i) sum += s.v[i];
    put(s.first_column, sum);
  }
}

void WindowFeatureExtractor::finish() {
  if (finished_) return;
  finished_ = true;
  fix_layout();
  for (auto& [id, s] : series_) {
    if (s.category == SeriesCategory::static_value) continue;
    complete_windows_before(s, std::numeric_limits<int64_t>::max());
  }
  if (sink_) {
    emit_ready(true);
    return;
  }
  // Gaps (a sampler that paused): the column's mean, so a gap itself is not an anomaly.
  const size_t cols = columns_.size();
  for (size_t c = 0; c < cols; ++c) {
    double sum = 0;
    size_t n = 0;
    for (size_t w = 0; w < windows_; ++w)
      if (!missing_[w * cols + c]) {
        sum += matrix_(static_cast<Eigen::Index>(w), static_cast<Eigen::Index>(c));
        ++n;
      }
    const double fill = n ? sum / static_cast<double>(n) : 0.0;
    for (size_t w = 0; w < windows_; ++w)
      if (missing_[w * cols + c]) matrix_(static_cast<Eigen::Index>(w), static_cast<Eigen::Index>(c)) = fill;
  }
  missing_.clear();
  missing_.shrink_to_fit();
}

std::vector<SeriesLevel> WindowFeatureExtractor::series_levels() const {
  std::vector<SeriesLevel> out;
  for (const auto& [id, s] : series_)
    if (s.level_n) out.push_back({id, s.level_sum / static_cast<double>(s.level_n), s.level_n});
  return out;
}

}  // namespace stackscope::analyze

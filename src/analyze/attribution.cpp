#include "analyze/attribution.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <map>
#include <set>
#include <stdexcept>

namespace stackscope::analyze {

namespace {
double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
  double m = v[mid];
  if (v.size() % 2 == 0) m = (m + *std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid))) / 2;
  return m;
}

// Scale of a sample: 1.4826 MAD, else the standard deviation, else a floor relative to the level.
double robust_scale(const std::vector<double>& v, double centre) {
  std::vector<double> dev(v.size());
  for (size_t i = 0; i < v.size(); ++i) dev[i] = std::abs(v[i] - centre);
  double s = 1.4826 * median_of(dev);
  if (s <= 1e-12 * std::max(1.0, std::abs(centre)) && v.size() > 1) {
    double mean = 0;
    for (double x : v) mean += x;
    mean /= static_cast<double>(v.size());
    double var = 0;
    for (double x : v) var += (x - mean) * (x - mean);
    s = std::sqrt(var / static_cast<double>(v.size() - 1));
  }
  return std::max(s, 1e-9 * std::max(1.0, std::abs(centre)));
}

std::string_view feature_phrase(WindowFeature f) {
  switch (f) {
    case WindowFeature::mean: return "within-window mean";
    case WindowFeature::variance: return "within-window variance";
    case WindowFeature::std_dev: return "standard deviation";
    case WindowFeature::min: return "minimum";
    case WindowFeature::max: return "maximum";
    case WindowFeature::skewness: return "skewness";
    case WindowFeature::kurtosis: return "kurtosis (burstiness)";
    case WindowFeature::autocorr_lag1: return "lag-1 autocorrelation";
    case WindowFeature::trend_slope: return "linear trend";
    case WindowFeature::stationarity: return "non-stationarity (KPSS)";
    case WindowFeature::sum: return "event count in the window";
  }
  return "feature";
}
}  // namespace

FeatureBaseline robust_baseline(const Eigen::MatrixXd& x) {
  FeatureBaseline b;
  b.centre.resize(x.cols());
  b.scale.resize(x.cols());
  std::vector<double> col(static_cast<size_t>(x.rows()));
  for (Eigen::Index j = 0; j < x.cols(); ++j) {
    for (Eigen::Index i = 0; i < x.rows(); ++i) col[static_cast<size_t>(i)] = x(i, j);
    b.centre(j) = median_of(col);
    b.scale(j) = robust_scale(col, b.centre(j));
  }
  return b;
}

std::string attribution_claim(const std::string& subject, Subsystem subsystem, WindowFeature feature, double value,
                              double expected, double z) {
  const char* direction = z > 0 ? "above" : "below";
  return fmt::format("{} ({}): {} is {} the baseline ({:.4g} vs {:.4g}, z={:+.1f}).", subject,
                     subsystem_name(subsystem), feature_phrase(feature), direction, value, expected, z);
}

WindowAttribution attribute_window(const Eigen::VectorXd& row, const FeatureBaseline& baseline,
                                   const std::vector<AttributedColumn>& columns, const AttributionOptions& options) {
  if (static_cast<size_t>(row.size()) != columns.size() || baseline.centre.size() != row.size() ||
      baseline.scale.size() != row.size())
    throw std::invalid_argument("attribution: row, baseline and column descriptions differ in size");
  std::vector<std::pair<double, Eigen::Index>> order;
  order.reserve(columns.size());
  for (Eigen::Index j = 0; j < row.size(); ++j) {
    double z = (row(j) - baseline.centre(j)) / baseline.scale(j);
    if (!std::isfinite(z)) z = 0;
    order.emplace_back(std::clamp(z, -1e6, 1e6), j);
  }
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return std::abs(a.first) != std::abs(b.first) ? std::abs(a.first) > std::abs(b.first) : a.second < b.second;
  });
  WindowAttribution out;
  std::set<std::string> subjects;
  for (const auto& [z, j] : order) {
    if (out.reasons.size() >= options.max_reasons) break;
    if (!out.reasons.empty() && std::abs(z) < options.min_abs_z) break;
    const AttributedColumn& c = columns[static_cast<size_t>(j)];
    if (!subjects.insert(c.subject).second) continue;  // one reason per metric: its strongest feature
    Contribution k;
    k.column = j;
    k.subject = c.subject;
    k.subsystem = c.subsystem;
    k.feature = c.feature;
    k.value = row(j);
    k.expected = baseline.centre(j);
    k.z = z;
    k.claim = attribution_claim(c.subject, c.subsystem, c.feature, k.value, k.expected, z);
    out.reasons.push_back(std::move(k));
  }
  std::map<Subsystem, double> weight;
  double total = 0;
  for (const Contribution& k : out.reasons) {
    weight[k.subsystem] += std::abs(k.z);
    total += std::abs(k.z);
  }
  double best = -1;
  for (const auto& [s, w] : weight)
    if (w > best) {
      best = w;
      out.subsystem = s;
    }
  out.subsystem_share = total > 0 ? best / total : 0;
  return out;
}

std::vector<HostDeviation> cross_host_deviations(const std::vector<HostLevel>& levels, const CrossHostOptions& options) {
  std::map<std::string, std::vector<const HostLevel*>> by_subject;
  for (const HostLevel& l : levels)
    if (std::isfinite(l.level)) by_subject[l.subject].push_back(&l);
  std::vector<HostDeviation> out;
  for (const auto& [subject, hosts] : by_subject) {
    if (hosts.size() < std::max<size_t>(options.min_hosts, 3)) continue;
    for (const HostLevel* h : hosts) {
      // Compare each host with the others (leave-one-out), so the odd host does not hide in its own baseline.
      std::vector<double> others;
      for (const HostLevel* o : hosts)
        if (o != h) others.push_back(o->level);
      const double med = median_of(others);
      // A few hosts give a fragile spread: never trust one tighter than 5% of the level.
      const double scale = std::max(robust_scale(others, med), 0.05 * std::abs(med));
      const double gap = h->level - med;
      const double rz = gap / scale;
      const double rel = std::abs(gap) / std::max({std::abs(med), std::abs(h->level), 1e-12});
      if (std::abs(rz) < options.min_robust_z || rel < options.min_relative_gap) continue;
      HostDeviation d;
      d.host = h->host;
      d.subject = subject;
      d.subsystem = h->subsystem;
      d.level = h->level;
      d.cluster_median = med;
      d.robust_z = std::clamp(rz, -1e6, 1e6);
      d.claim = fmt::format("host {} deviates from the cluster baseline on {} ({}): {:.4g} vs median {:.4g} of {} "
                            "other hosts ({:+.0f}%).",
                            h->host, subject, subsystem_name(h->subsystem), h->level, med, others.size(),
                            100.0 * gap / std::max(std::abs(med), 1e-12));
      out.push_back(std::move(d));
    }
  }
  std::sort(out.begin(), out.end(),
            [](const HostDeviation& a, const HostDeviation& b) { return std::abs(a.robust_z) > std::abs(b.robust_z); });
  return out;
}

}  // namespace stackscope::analyze

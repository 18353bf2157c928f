#include "analyze/reveal/attribution.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <map>
#include <set>
#include <stdexcept>

#include "analyze/robust_stats.h"

namespace stackscope::analyze {

namespace {
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

double feature_resolution(std::string_view unit, WindowFeature feature) {
  switch (feature) {  // sampling standard errors on n = 30: sqrt(6/n), sqrt(24/n), 1/sqrt(n); KPSS ~0.1
    case WindowFeature::skewness: return 0.45;
    case WindowFeature::kurtosis: return 0.9;
    case WindowFeature::autocorr_lag1: return 0.18;
    case WindowFeature::stationarity: return 0.1;
    default: break;
  }
  struct UnitResolution {
    std::string_view unit;
    double resolution;
  };
  static constexpr UnitResolution kUnits[] = {
      {"count", 1}, {"count/s", 1},                     // one event (a second)
      {"jiffies", 1},                                   // 1 % of a core (USER_HZ 100)
      {"bytes", 1 << 20},                               // 1 MiB (held or moved a second)
      {"bytes/s", 1 << 20}, {"bytes_per_second", 1 << 20},
      {"ratio", 0.01}, {"percent", 1},                  // one point
      {"microseconds", 1000}, {"milliseconds", 1}, {"nanoseconds", 1e6}, {"seconds", 1e-3},  // 1 ms (a second)
      {"hertz", 1e6}, {"celsius", 1}, {"watts", 1}, {"joules", 1}, {"bool", 1}, {"bitmask", 1},
  };
  double u = 0;
  for (const auto& k : kUnits)
    if (k.unit == unit) u = k.resolution;
  return feature == WindowFeature::variance ? u * u : u;
}

FeatureBaseline robust_baseline(const Eigen::MatrixXd& x, std::span<const double> resolution, double relative) {
  if (!resolution.empty() && resolution.size() != static_cast<size_t>(x.cols()))
    throw std::invalid_argument("robust baseline: resolutions and columns differ in number");
  FeatureBaseline b;
  b.centre.resize(x.cols());
  b.scale.resize(x.cols());
  std::vector<double> col(static_cast<size_t>(x.rows()));
  for (Eigen::Index j = 0; j < x.cols(); ++j) {
    for (Eigen::Index i = 0; i < x.rows(); ++i) col[static_cast<size_t>(i)] = x(i, j);
    b.centre(j) = median_of(col);
    b.scale(j) = robust_scale(col, b.centre(j));
    if (!resolution.empty())
      b.scale(j) = std::max({b.scale(j), relative * std::abs(b.centre(j)), resolution[static_cast<size_t>(j)]});
  }
  return b;
}

double reason_weight(double z) { return std::log1p(std::abs(z)); }

std::string_view metric_meaning(std::string_view subject) {
  // Longest prefix first where prefixes nest (irq.LOC before irq.).
  static constexpr std::pair<std::string_view, std::string_view> kMeanings[] = {
      {"irq.LOC", "local timer interrupts"},
      {"irq.RES", "rescheduling interrupts"},
      {"irq.CAL", "function-call interrupts"},
      {"irq.TLB", "TLB shootdowns"},
      {"irq.", "interrupts"},
      {"softirq.TIMER", "timer softirqs"},
      {"softirq.HRTIMER", "high-resolution timer softirqs"},
      {"softirq.NET_RX", "network receive softirqs"},
      {"softirq.NET_TX", "network transmit softirqs"},
      {"softirq.BLOCK", "block I/O completion softirqs"},
      {"softirq.", "softirqs"},
      {"cpu.interrupts", "interrupts"},
      {"cpu.time.irq", "CPU time in interrupt handlers"},
      {"cpu.time.softirq", "CPU time in softirqs"},
      {"mem.Dirty", "dirty page cache waiting for writeback"},
      {"vm.nr_dirty", "dirty page cache waiting for writeback"},
      {"mem.Writeback", "pages being written back"},
      {"vm.nr_writeback", "pages being written back"},
      {"vm.nr_dirtied", "pages dirtied"},
      {"vm.nr_written", "pages written back"},
      {"pressure.io", "I/O stall time (PSI)"},
      {"pressure.memory", "memory stall time (PSI)"},
      {"pressure.cpu", "CPU stall time (PSI)"},
      {"net.Tcp.RetransSegs", "TCP retransmissions"},
      {"net.TcpExt.TCPTimeouts", "TCP retransmission timeouts"},
      {"net.TcpExt.TCPLostRetransmit", "TCP retransmissions lost again"},
      {"net.TcpExt.TCPFastRetrans", "TCP fast retransmissions"},
  };
  for (const auto& [prefix, meaning] : kMeanings)
    if (subject.substr(0, prefix.size()) == prefix) return meaning;
  return {};
}

std::string attribution_claim(const std::string& subject, Subsystem subsystem, WindowFeature feature, double value,
                              double expected, double z) {
  const char* direction = z > 0 ? "above" : "below";
  const std::string_view meaning = metric_meaning(subject);
  return fmt::format("{} ({}{}{}): {} is {} the baseline ({:.4g} vs {:.4g}, z={:+.1f}).", subject,
                     subsystem_name(subsystem), meaning.empty() ? "" : ", ", meaning, feature_phrase(feature),
                     direction, value, expected, z);
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
    // The variance says what the standard deviation says, squared: its z would outrank every linear feature
    // of every other metric. The standard deviation speaks for both.
    if (c.feature == WindowFeature::variance && options.variance_via_std_dev) continue;
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
    weight[k.subsystem] += reason_weight(k.z);
    total += reason_weight(k.z);
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

namespace {
// "+410%", or "from 0" where the baseline is zero (a percentage of nothing says nothing).
std::string relative_change(double level, double median) {
  if (std::abs(median) <= 1e-12 * std::max(1.0, std::abs(level))) return "from 0";
  return fmt::format("{:+.0f}%", 100.0 * (level - median) / std::abs(median));
}
}  // namespace

std::vector<HostDeviation> cross_host_deviations(const std::vector<HostLevel>& levels, const CrossHostOptions& options) {
  std::map<std::string, std::vector<const HostLevel*>> by_subject;
  for (const HostLevel& l : levels)
    if (std::isfinite(l.level)) by_subject[l.subject].push_back(&l);
  std::vector<HostDeviation> out;
  for (const auto& [subject, hosts] : by_subject) {
    if (hosts.size() < std::max<size_t>(options.min_hosts, 3)) continue;
    // A host's level is the median of its windows: robust to a burst, which is single-host detection's business.
    std::vector<double> level(hosts.size()), spread;
    for (size_t i = 0; i < hosts.size(); ++i) {
      const HostLevel& h = *hosts[i];
      level[i] = h.windows.empty() ? h.level : median_of(h.windows);
      if (h.windows.size() > 1) {
        std::vector<double> dev(h.windows.size());
        for (size_t k = 0; k < dev.size(); ++k) dev[k] = std::abs(h.windows[k] - level[i]);
        spread.push_back(1.4826 * median_of(dev));
      }
    }
    const double within_host = spread.empty() ? 0.0 : median_of(spread);
    double resolution = 0;
    for (const HostLevel* h : hosts) resolution = std::max(resolution, h->resolution);
    std::vector<HostDeviation> found;
    for (size_t i = 0; i < hosts.size(); ++i) {
      const HostLevel& h = *hosts[i];
      std::vector<double> others;
      for (size_t k = 0; k < hosts.size(); ++k)
        if (k != i) others.push_back(level[k]);
      const double med = median_of(others);
      std::vector<double> dev(others.size());
      for (size_t k = 0; k < others.size(); ++k) dev[k] = std::abs(others[k] - med);
      const double scale = std::max({1.4826 * median_of(dev), within_host, options.min_scale_rel * std::abs(med),
                                     resolution, 1e-12 * std::max(1.0, std::abs(med))});
      const double gap = level[i] - med;
      const double rz = gap / scale;
      const double rel = std::abs(gap) / std::max({std::abs(med), std::abs(level[i]), 1e-300});
      if (std::abs(rz) < options.min_robust_z || rel < options.min_relative_gap) continue;
      double persistence = 1;
      if (!h.windows.empty()) {
        size_t beyond = 0;
        for (double x : h.windows) beyond += (x - med) * (gap > 0 ? 1 : -1) >= 0.5 * std::abs(gap);
        persistence = static_cast<double>(beyond) / static_cast<double>(h.windows.size());
      }
      if (persistence < options.min_persistence) continue;
      HostDeviation d;
      d.host = h.host;
      d.subject = subject;
      d.subsystem = h.subsystem;
      d.level = level[i];
      d.cluster_median = med;
      d.scale = scale;
      d.robust_z = std::clamp(rz, -1e6, 1e6);
      d.persistence = persistence;
      d.claim = fmt::format("host {} deviates from the cluster baseline on {} ({}): {:.4g} vs median {:.4g} of {} "
                            "other hosts ({}, z={:+.1f}, in {:.0f}% of its windows).",
                            h.host, subject, subsystem_name(h.subsystem), d.level, med, others.size(),
                            relative_change(d.level, med), d.robust_z, 100 * persistence);
      found.push_back(std::move(d));
    }
    // The odd hosts must be a minority: half the cluster or more apart is two groups, not a baseline and outliers.
    if (found.size() <= (hosts.size() - 1) / 2) out.insert(out.end(), found.begin(), found.end());
  }
  std::sort(out.begin(), out.end(),
            [](const HostDeviation& a, const HostDeviation& b) { return std::abs(a.robust_z) > std::abs(b.robust_z); });
  return out;
}

std::vector<HostReport> cross_host_reports(const std::vector<HostDeviation>& deviations, size_t max_metrics) {
  max_metrics = std::max<size_t>(max_metrics, 1);  // a report names at least its strongest metric
  std::map<std::string, std::vector<const HostDeviation*>> by_host;
  for (const HostDeviation& d : deviations) by_host[d.host].push_back(&d);
  std::vector<HostReport> out;
  for (const auto& [host, devs] : by_host) {
    std::map<Subsystem, std::pair<size_t, double>> weight;  // metrics, summed |z|
    for (const HostDeviation* d : devs) {
      ++weight[d->subsystem].first;
      weight[d->subsystem].second += std::min(std::abs(d->robust_z), 1e6);
    }
    HostReport r;
    r.host = host;
    r.deviating_metrics = devs.size();
    r.subsystem = std::max_element(weight.begin(), weight.end(), [](const auto& a, const auto& b) {
                    return a.second != b.second ? a.second < b.second : a.first > b.first;
                  })->first;
    for (const HostDeviation* d : devs)  // deviations come strongest first
      if (d->subsystem == r.subsystem && r.metrics.size() < max_metrics) r.metrics.push_back(*d);
    const HostDeviation& top = r.metrics.front();
    const size_t same = weight[r.subsystem].first;
    r.claim = fmt::format("host {} deviates from the cluster on {}: {} {:.4g} vs median {:.4g} of the other hosts "
                          "({}, z={:+.1f}){}.",
                          host, subsystem_name(r.subsystem), top.subject, top.level, top.cluster_median,
                          relative_change(top.level, top.cluster_median), top.robust_z,
                          same > 1 ? fmt::format(", and {} more {} metric{}", same - 1, subsystem_name(r.subsystem),
                                                 same > 2 ? "s" : "")
                                   : "");
    out.push_back(std::move(r));
  }
  std::sort(out.begin(), out.end(), [](const HostReport& a, const HostReport& b) {
    return std::abs(a.metrics.front().robust_z) > std::abs(b.metrics.front().robust_z);
  });
  return out;
}

}  // namespace stackscope::analyze

// Stage 2 (KAIR §III-B): per operator identity across workers, z-scores of start time and duration against
// the cluster; a_i = max of the two; a_i > 3 is an outlier. Robust variant (median, 1.4826 x MAD) by default:
// the classical z of one outlier among N values is at most (N-1)/sqrt(N), below 3 for N <= 10 workers, and the
// outlier itself inflates the standard deviation it is measured with.
#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include "analyze/straggler.h"

namespace stackscope::analyze {

namespace {

struct Entry {
  uint32_t group, name, occ;
  int32_t step;
  uint32_t worker, op;
  bool operator<(const Entry& o) const {
    return std::tie(group, step, name, occ) < std::tie(o.group, o.step, o.name, o.occ);
  }
  bool same_identity(const Entry& o) const {
    return group == o.group && step == o.step && name == o.name && occ == o.occ;
  }
};

struct Center {
  double center, scale;
};

Center center_scale(std::vector<double>& v, bool robust, double floor) {
  const size_t n = v.size();
  double c, s;
  if (robust) {
    std::nth_element(v.begin(), v.begin() + n / 2, v.end());
    c = v[n / 2];
    for (auto& x : v) x = std::abs(x - c);
    std::nth_element(v.begin(), v.begin() + n / 2, v.end());
    s = 1.4826 * v[n / 2];
  } else {
    double sum = 0, sq = 0;
    for (double x : v) sum += x;
    c = sum / n;
    for (double x : v) sq += (x - c) * (x - c);
    s = std::sqrt(sq / n);
  }
  return {c, std::max(s, floor)};
}

}  // namespace

Stage2Result stage2_outliers(const TimelineSet& set, const std::vector<int64_t>& offsets, const std::vector<int>& group,
                             const Stage2Options& options) {
  Stage2Result r;
  r.robust = options.robust;
  r.group = group.empty() ? std::vector<int>(set.workers.size(), 0) : group;
  const size_t n = set.workers.size();
  r.stats.resize(n);
  std::vector<Entry> entries;
  std::map<int32_t, std::vector<double>> step_first;  // step -> first corrected start per worker
  std::vector<double> step_lengths;
  for (size_t w = 0; w < n; ++w) {
    const auto& ops = set.workers[w].ops;
    r.stats[w].assign(ops.size(), OpStats{});
    std::map<std::pair<int32_t, uint32_t>, uint32_t> occ;
    int32_t cur = INT32_MIN;
    int64_t first = 0, last = 0;
    for (uint32_t i = 0; i < ops.size(); ++i) {
      const auto& op = ops[i];
      if (op.step < 0) continue;
      if (op.step != cur) {
        if (cur != INT32_MIN) step_lengths.push_back(double(last - first));
        cur = op.step;
        first = op.start_ns;
        last = op.end_ns();
        step_first[cur].push_back(double(op.start_ns - offsets[w]));
      }
      last = std::max(last, op.end_ns());
      entries.push_back({static_cast<uint32_t>(group.empty() ? 0 : group[w]), op.name, occ[{op.step, op.name}]++,
                         op.step, static_cast<uint32_t>(w), i});
    }
  }
  std::vector<double> tmp = step_lengths;
  const double step_len = tmp.empty() ? 0 : (std::nth_element(tmp.begin(), tmp.begin() + tmp.size() / 2, tmp.end()),
                                             tmp[tmp.size() / 2]);
  std::map<int32_t, double> step_start;
  for (auto& [s, v] : step_first) {
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    step_start[s] = v[v.size() / 2];
  }
  const double time_floor = std::max(2000.0, 1e-3 * step_len);
  std::sort(entries.begin(), entries.end());
  std::vector<double> starts, durs, ends;
  for (size_t b = 0; b < entries.size();) {
    size_t e = b + 1;
    while (e < entries.size() && entries[e].same_identity(entries[b])) ++e;
    const int peers = static_cast<int>(e - b);
    if (peers >= options.min_peers) {
      starts.clear();
      durs.clear();
      ends.clear();
      for (size_t i = b; i < e; ++i) {
        const auto& op = set.workers[entries[i].worker].ops[entries[i].op];
        const double off = double(offsets[entries[i].worker]);
        starts.push_back(double(op.start_ns) - off);
        durs.push_back(double(op.duration_ns));
        ends.push_back(double(op.end_ns()) - off);
      }
      std::vector<double> d2 = durs;
      std::nth_element(d2.begin(), d2.begin() + d2.size() / 2, d2.end());
      const double dur_floor = std::max(2000.0, 0.02 * std::abs(d2[d2.size() / 2]));
      auto cs = center_scale(starts, options.robust, time_floor);
      auto cd = center_scale(durs, options.robust, dur_floor);
      auto ce = center_scale(ends, options.robust, time_floor);
      const double s0 = step_start.count(entries[b].step) ? step_start[entries[b].step] : 0;
      for (size_t i = b; i < e; ++i) {
        const auto& op = set.workers[entries[i].worker].ops[entries[i].op];
        const double off = double(offsets[entries[i].worker]);
        auto& st = r.stats[entries[i].worker][entries[i].op];
        st.z_start = static_cast<float>((double(op.start_ns) - off - cs.center) / cs.scale);
        st.z_duration = static_cast<float>((double(op.duration_ns) - cd.center) / cd.scale);
        st.z_end = static_cast<float>((double(op.end_ns()) - off - ce.center) / ce.scale);
        st.expected_start = static_cast<float>(cs.center - s0);
        st.expected_duration = static_cast<float>(cd.center);
        st.start_delay = static_cast<float>(double(op.start_ns) - off - cs.center);
        st.end_delay = static_cast<float>(double(op.end_ns()) - off - ce.center);
        st.peers = peers;
        const double a = std::max(std::abs(st.z_start), std::abs(st.z_duration));
        if (a > options.threshold) r.flagged.push_back({static_cast<int>(entries[i].worker), entries[i].op, a});
      }
    }
    b = e;
  }
  std::sort(r.flagged.begin(), r.flagged.end(), [](auto& a, auto& b) { return a.a > b.a; });
  return r;
}

}  // namespace stackscope::analyze

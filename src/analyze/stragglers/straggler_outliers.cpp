// Stage 2 (KAIR §III-B): per operator identity across workers, z-scores of start time and duration against
// the cluster; a_i = max of the two; a_i > 3 is an outlier. Robust variant (median, 1.4826 x MAD) by default:
// the classical z of one outlier among N values is at most sqrt(N-1), below 3 for N <= 9 workers, and the
// outlier itself inflates the standard deviation it is measured with.
#include <algorithm>
#include <cmath>
#include <array>
#include <map>
#include <tuple>

#include "analyze/robust_stats.h"
#include "analyze/stragglers/straggler.h"

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
    c = median_in_place(v);
    for (auto& x : v) x = std::abs(x - c);
    s = 1.4826 * median_in_place(v);
  } else {
    double sum = 0, sq = 0;
    for (double x : v) sum += x;
    c = sum / n;
    for (double x : v) sq += (x - c) * (x - c);
    s = std::sqrt(sq / n);
  }
  return {c, std::max(s, floor)};
}

// Across steps: an operation that is a little slow on one worker in every step may never pass 3 sigma in a
// single noisy step, yet its median over steps stands out among the workers' medians. Per identity without
// the step (group, name, occurrence), each worker's median deviation over steps is scored against the other
// workers' medians; where that persistent z is larger, it becomes the instance's z (for instances that
// deviate the same way).
void persistent_outliers(const TimelineSet& set, const std::vector<Entry>& entries, const Stage2Options& options,
                         double time_floor, Stage2Result& r) {
  struct Key {
    uint32_t group, name, occ;
    bool operator<(const Key& o) const { return std::tie(group, name, occ) < std::tie(o.group, o.name, o.occ); }
  };
  std::map<Key, std::map<uint32_t, std::vector<uint32_t>>> by_id;  // identity -> worker -> op indices
  for (auto& e : entries)
    if (r.stats[e.worker][e.op].peers) by_id[{e.group, e.name, e.occ}][e.worker].push_back(e.op);
  std::vector<double> dur_med, start_med, tmp, expected;
  for (auto& [key, workers] : by_id) {
    if (static_cast<int>(workers.size()) < std::max(options.min_peers, 3)) continue;
    dur_med.clear();
    start_med.clear();
    expected.clear();
    std::vector<uint32_t> ids;
    for (auto& [w, ops] : workers) {
      tmp.clear();
      for (auto i : ops) tmp.push_back(double(set.workers[w].ops[i].duration_ns) - r.stats[w][i].expected_duration);
      dur_med.push_back(median_in_place(tmp));
      tmp.clear();
      for (auto i : ops) tmp.push_back(r.stats[w][i].start_delay);
      start_med.push_back(median_in_place(tmp));
      for (auto i : ops) expected.push_back(r.stats[w][i].expected_duration);
      ids.push_back(w);
    }
    const double dur_floor = std::max(2000.0, 0.02 * std::abs(median_in_place(expected)));
    auto centre_scale = [](std::vector<double> v, double floor) {
      const double c = median_in_place(v);
      for (auto& x : v) x = std::abs(x - c);
      return std::pair{c, std::max(1.4826 * median_in_place(v), floor)};
    };
    const auto [cd, sd] = centre_scale(dur_med, dur_floor);
    const auto [cs, ss] = centre_scale(start_med, time_floor);
    for (size_t k = 0; k < ids.size(); ++k) {
      const double zd = (dur_med[k] - cd) / sd, zs = (start_med[k] - cs) / ss;
      for (auto i : workers[ids[k]]) {
        auto& st = r.stats[ids[k]][i];
        const double dev = double(set.workers[ids[k]].ops[i].duration_ns) - st.expected_duration;
        if (zd > st.z_duration && dev > 0.5 * (dur_med[k] - cd)) st.z_duration = static_cast<float>(zd);
        if (zs > st.z_start && st.start_delay > 0.5 * (start_med[k] - cs)) st.z_start = static_cast<float>(zs);
      }
    }
  }
}

// Peer groups of two (two ranks, or two replicas of a pipeline stage): a median of two says nothing, so each
// worker is compared with the other, step by step. The expected difference is zero; its scale is how much
// the difference varies from step to step (1.4826 x MAD over steps), so an operation that is consistently
// slower on one worker stands out against the noise of the pair.
void pair_outliers(const TimelineSet& set, const std::vector<int64_t>& offsets, const std::vector<int>& group,
                   const Stage2Options& options, double time_floor, Stage2Result& r) {
  std::map<int, std::vector<int>> members;
  for (size_t w = 0; w < set.workers.size(); ++w) members[group[w]].push_back(static_cast<int>(w));
  for (auto& [g, m] : members) {
    if (m.size() != 2 || options.min_peers <= 2) continue;
    // (name, occurrence) -> step -> op index, per worker
    std::map<std::pair<uint32_t, uint32_t>, std::map<int32_t, std::array<int64_t, 2>>> ids;
    for (int k = 0; k < 2; ++k) {
      const auto& ops = set.workers[m[k]].ops;
      std::map<std::pair<int32_t, uint32_t>, uint32_t> occ;
      for (uint32_t i = 0; i < ops.size(); ++i) {
        if (ops[i].step < 0) continue;
        auto& per_step = ids[{ops[i].name, occ[{ops[i].step, ops[i].name}]++}];
        auto it = per_step.try_emplace(ops[i].step, std::array<int64_t, 2>{-1, -1}).first;
        it->second[k] = i;
      }
    }
    for (auto& [id, steps] : ids) {
      std::vector<std::array<int64_t, 2>> both;
      for (auto& [step, idx] : steps)
        if (idx[0] >= 0 && idx[1] >= 0) both.push_back(idx);
      if (both.size() < 3) continue;  // the step-to-step spread needs a few steps
      // A named reference: clang 14 (the fuzz build) cannot capture a structured binding.
      const std::vector<int>& pair = m;
      auto op = [&](int k, int64_t i) -> const TimelineOp& { return set.workers[pair[k]].ops[i]; };
      std::vector<double> ds, dd, de, durs;
      for (auto& idx : both) {
        const auto &a = op(0, idx[0]), &b = op(1, idx[1]);
        ds.push_back(double(a.start_ns - offsets[m[0]]) - double(b.start_ns - offsets[m[1]]));
        dd.push_back(double(a.duration_ns) - double(b.duration_ns));
        de.push_back(double(a.end_ns() - offsets[m[0]]) - double(b.end_ns() - offsets[m[1]]));
        durs.push_back(double(std::min(a.duration_ns, b.duration_ns)));
      }
      const double dur_floor = std::max(2000.0, 0.02 * median_in_place(durs));
      auto spread = [](std::vector<double> v, double floor) {
        const double c = median_in_place(v);
        for (auto& x : v) x = std::abs(x - c);
        return std::max(1.4826 * median_in_place(v), floor);
      };
      const double ss = spread(ds, time_floor), sd = spread(dd, dur_floor), se = spread(de, time_floor);
      for (size_t k = 0; k < both.size(); ++k)
        for (int side = 0; side < 2; ++side) {
          const double sign = side == 0 ? 1 : -1;
          const auto& mine = op(side, both[k][side]);
          const auto& other = op(1 - side, both[k][1 - side]);
          auto& st = r.stats[m[side]][both[k][side]];
          st.z_start = static_cast<float>(sign * ds[k] / ss);
          st.z_duration = static_cast<float>(sign * dd[k] / sd);
          st.z_end = static_cast<float>(sign * de[k] / se);
          st.start_delay = static_cast<float>(sign * ds[k]);
          st.end_delay = static_cast<float>(sign * de[k]);
          st.expected_duration = static_cast<float>(other.duration_ns);
          st.expected_start = 0;
          st.peers = 2;
          (void)mine;
        }
    }
  }
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
      }
    }
    b = e;
  }
  if (options.robust) persistent_outliers(set, entries, options, time_floor, r);  // part of the robust variant
  pair_outliers(set, offsets, r.group, options, time_floor, r);
  for (size_t w = 0; w < r.stats.size(); ++w)
    for (uint32_t i = 0; i < r.stats[w].size(); ++i) {
      const auto& st = r.stats[w][i];
      const double a = std::max(std::abs(st.z_start), std::abs(st.z_duration));
      if (st.peers && a > options.threshold) r.flagged.push_back({static_cast<int>(w), i, a});
    }
  std::sort(r.flagged.begin(), r.flagged.end(), [](auto& a, auto& b) { return a.a > b.a; });
  return r;
}

}  // namespace stackscope::analyze

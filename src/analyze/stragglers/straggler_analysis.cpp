// The three stages wired together: steps, clock offsets, peer groups, then stage 1 -> 2 -> 3.
#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "analyze/stragglers/straggler.h"

namespace stackscope::analyze {

namespace {

std::map<int32_t, double> cluster_step_starts(const TimelineSet& set, const std::vector<int64_t>& offsets) {
  std::map<int32_t, std::vector<double>> firsts;
  for (size_t w = 0; w < set.workers.size(); ++w) {
    int32_t cur = INT32_MIN;
    for (auto& op : set.workers[w].ops) {
      if (op.step < 0 || op.step == cur) continue;
      cur = op.step;
      firsts[cur].push_back(double(op.start_ns - offsets[w]));
    }
  }
  std::map<int32_t, double> out;
  for (auto& [s, v] : firsts) {
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    out[s] = v[v.size() / 2];
  }
  return out;
}

}  // namespace

StragglerReport analyze_stragglers(TimelineSet set, const StragglerOptions& options) {
  StragglerReport r;
  for (auto& w : set.workers) {
    std::stable_sort(w.ops.begin(), w.ops.end(), [](auto& a, auto& b) { return a.start_ns < b.start_ns; });
    r.workers.push_back(w.worker);
  }
  const size_t n = set.workers.size();
  r.steps = assign_steps(set);
  // Recordings of CPU jobs (gloo) and GPU recordings whose collectives carry no shared sequence: the cadence of
  // the synchronisation points is the step.
  promote_coincident_blocks(set);
  SyncPoints points = find_sync_points(set);
  if ((r.steps.source == StepSource::none || r.steps.source == StepSource::autocorrelation) && points.steps >= 3) {
    r.steps.source = StepSource::syncs;
    r.steps.period = points.period;
    r.steps.steps = points.steps;
    // The ends of steps nobody waited in (balanced steps) included: each step is numbered, not each point.
    const std::vector<int64_t>& bounds = points.step_ends;
    // Step k ends at bound k. Before the first step (start-up) and after the last bound (the final barrier,
    // shutdown) nothing is a step: otherwise start-up counted as one more step.
    std::vector<double> lengths;
    for (size_t k = 1; k < bounds.size(); ++k) lengths.push_back(double(bounds[k] - bounds[k - 1]));
    std::nth_element(lengths.begin(), lengths.begin() + lengths.size() / 2, lengths.end());
    const int64_t first_start = bounds.front() - static_cast<int64_t>(lengths.empty() ? 0 : lengths[lengths.size() / 2]);
    for (auto& w : set.workers)
      for (auto& op : w.ops) {
        const auto k = std::upper_bound(bounds.begin(), bounds.end(), op.start_ns) - bounds.begin();
        op.step = (op.start_ns < first_start || k == static_cast<long>(bounds.size())) ? -1 : static_cast<int32_t>(k);
      }
  }
  // Steps numbered from the collectives or markers: the verdict weighs whole steps, not each wait in them.
  if (r.steps.source == StepSource::collectives || r.steps.source == StepSource::markers)
    if (SyncPoints per_step = points_per_step(points); !per_step.end_ns.empty()) points = std::move(per_step);
  r.verdict = wait_verdict(set, points, options.verdict);
  for (auto& w : set.workers) {
    WorkerTimeline id;
    id.worker = w.worker;
    id.rank = w.rank;
    id.local_rank = w.local_rank;
    id.host = w.host;
    id.gpu = w.gpu;
    id.pid = w.pid;
    id.loop_function = w.loop_function;
    r.identity.push_back(std::move(id));
  }
  r.clock_offsets = estimate_clock_offsets(set);
  r.group = peer_groups(set);
  const auto starts = cluster_step_starts(set, r.clock_offsets);
  // Steps cut by the ends of the trace hold only a few operations: they would look like everybody's anomaly.
  std::map<int32_t, size_t> ops_in_step;
  for (auto& w : set.workers)
    for (auto& op : w.ops)
      if (op.step >= 0) ops_in_step[op.step]++;
  std::vector<size_t> counts;
  for (auto& [s, c] : ops_in_step) counts.push_back(c);
  std::sort(counts.begin(), counts.end());
  const size_t typical = counts.empty() ? 0 : counts[counts.size() / 2];
  // Only the first and the last step: elsewhere a step with fewer operations is one whose collectives a
  // duty-cycled recorder missed, still a step (its synchronisation was recorded).
  std::set<int32_t> cut;
  if (!ops_in_step.empty() && ops_in_step.begin()->second * 2 < typical) cut.insert(ops_in_step.begin()->first);
  if (!ops_in_step.empty() && ops_in_step.rbegin()->second * 2 < typical) cut.insert(ops_in_step.rbegin()->first);
  for (auto& w : set.workers)
    for (auto& op : w.ops)
      if (op.step >= 0 && cut.count(op.step)) op.step = -1;
  for (auto& [s, t0] : starts)
    if (ops_in_step.count(s) && !cut.count(s)) r.step_labels.push_back(s);
  // Steps from the sync cadence that left no operation (balanced, every wait under the recorder's threshold, and
  // the operator probes detached by the cost budget) are steps of the run all the same.
  if (r.steps.source == StepSource::syncs && r.step_labels.size() >= 2) {
    std::vector<int32_t> all;
    for (int32_t s = r.step_labels.front(); s <= r.step_labels.back(); ++s) all.push_back(s);
    r.step_labels = std::move(all);
  }
  std::map<int32_t, size_t> step_index;
  for (size_t k = 0; k < r.step_labels.size(); ++k) step_index[r.step_labels[k]] = k;

  // Stage 1 samples: when in its step each operation completed (the rhythm), clock-corrected.
  std::vector<std::vector<std::vector<double>>> samples(n, std::vector<std::vector<double>>(r.step_labels.size()));
  for (size_t w = 0; w < n; ++w)
    for (auto& op : set.workers[w].ops)
      if (op.step >= 0)
        samples[w][step_index[op.step]].push_back(double(op.end_ns() - r.clock_offsets[w]) - starts.at(op.step));
  Stage1Options stage1 = options.stage1;
  stage1.ks.fixed_windows = true;
  r.stage1 = stage1_rhythm(samples, r.step_labels, r.group, stage1);
  r.stage2 = stage2_outliers(set, r.clock_offsets, r.group, options.stage2);
  r.root_causes = stage3_blame(set, r.clock_offsets, r.stage2, options.stage3);
  for (size_t f = 0; f < r.stage2.flagged.size() && f < options.max_flagged_reported; ++f) {
    const auto& fl = r.stage2.flagged[f];
    const auto& op = set.workers[fl.worker].ops[fl.op];
    const auto& st = r.stage2.stats[fl.worker][fl.op];
    r.flagged.push_back({fl.worker, set.names[op.name], op.kind, op.step, fl.a, st.z_start, st.z_duration,
                         double(op.duration_ns), st.expected_duration, st.start_delay});
  }
  // The waiting signal, when it names somebody, outranks KAIR's order (it measures who made the others wait;
  // stage 1 measures who differs); otherwise the worker of the strongest root cause, then stage 1's order.
  if (r.verdict.kind == VerdictKind::one_straggler || r.verdict.kind == VerdictKind::slow_group)
    r.stragglers = r.verdict.workers;
  else if (!r.root_causes.empty())
    r.stragglers.push_back(r.root_causes.front().worker);
  for (int w : r.stage1.ranking)
    if (std::find(r.stragglers.begin(), r.stragglers.end(), w) == r.stragglers.end()) r.stragglers.push_back(w);

  // Fig. 4: operations completed per time bin for the workers of the heatmap.
  int64_t lo = INT64_MAX, hi = INT64_MIN;
  for (size_t w = 0; w < n; ++w)
    for (auto& op : set.workers[w].ops) {
      lo = std::min(lo, op.start_ns - r.clock_offsets[w]);
      hi = std::max(hi, op.end_ns() - r.clock_offsets[w]);
    }
  auto& tl = r.timeline;
  tl.workers = r.stage1.heatmap_workers;
  if (lo < hi && options.timeline_bins > 0) {
    tl.t0_ns = lo;
    tl.bin_ns = std::max<int64_t>(1, (hi - lo) / options.timeline_bins + 1);
    for (int w : tl.workers) {
      std::vector<uint32_t> c(options.timeline_bins, 0);
      for (auto& op : set.workers[w].ops) c[(op.end_ns() - r.clock_offsets[w] - lo) / tl.bin_ns]++;
      tl.counts.push_back(std::move(c));
    }
  }
  return r;
}

StragglerReport analyze_step_times(const StepTimeTable& table, const StragglerOptions& options) {
  StragglerReport r;
  r.from_step_table = true;
  r.workers = table.workers;
  const size_t n = table.workers.size();
  r.group.assign(n, 0);
  r.clock_offsets.assign(n, 0);
  for (auto s : table.steps) r.step_labels.push_back(static_cast<int32_t>(s));
  r.steps.steps = static_cast<int>(table.steps.size());
  std::vector<std::vector<std::vector<double>>> samples(n, std::vector<std::vector<double>>(table.steps.size()));
  for (size_t w = 0; w < n; ++w)
    for (size_t k = 0; k < table.steps.size() && k < table.time[w].size(); ++k)
      if (std::isfinite(table.time[w][k])) samples[w][k].push_back(table.time[w][k]);
  Stage1Options stage1 = options.stage1;
  stage1.self_normalize_windows = true;
  r.stage1 = stage1_rhythm(samples, r.step_labels, r.group, stage1);
  r.stragglers = r.stage1.ranking;
  for (int w : r.stage1.heatmap_workers) r.step_times.push_back(table.time[w]);
  r.timeline.workers = r.stage1.heatmap_workers;
  return r;
}

}  // namespace stackscope::analyze

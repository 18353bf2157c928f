// Steps without markers, and clock offsets from collectives (KAIR Feature 4 does this with heartbeats; a trace
// read after the fact has only the collectives, which end together on every participant).
#include <algorithm>
#include <map>
#include <unordered_map>

#include "analyze/straggler.h"

namespace stackscope::analyze {

std::string_view step_source_name(StepSource s) {
  switch (s) {
    case StepSource::markers: return "markers";
    case StepSource::collectives: return "collective-sequence";
    case StepSource::autocorrelation: return "autocorrelation";
    case StepSource::none: break;
  }
  return "none";
}

int sequence_period(const std::vector<uint64_t>& seq, int max_period, double min_match) {
  const int n = static_cast<int>(seq.size());
  for (int p = 1; p <= std::min(max_period, n / 2); ++p) {
    int match = 0;
    for (int i = 0; i + p < n; ++i) match += seq[i] == seq[i + p];
    if (match >= min_match * (n - p)) return p;
  }
  return 0;
}

namespace {

uint64_t collective_signature(const TimelineOp& op) {
  return (static_cast<uint64_t>(op.name) << 40) ^ (static_cast<uint64_t>(op.comm) << 20) ^
         static_cast<uint64_t>(op.bytes & 0xfffff);
}

// Numbers ops by the boundaries at positions `boundary` (indices into ops, in time order): ops up to and
// including a boundary belong to the step it closes.
void number_steps(WorkerTimeline& w, const std::vector<size_t>& boundary_ops, int32_t first_step) {
  size_t b = 0;
  int32_t step = first_step;
  for (size_t i = 0; i < w.ops.size(); ++i) {
    w.ops[i].step = step;
    if (b < boundary_ops.size() && boundary_ops[b] == i) {
      ++b;
      ++step;
    }
  }
}

// Among positions 0..p-1 of the period, the one followed by the longest mean pause: where one step ends.
int boundary_phase(const std::vector<double>& gap_after, int p) {
  std::vector<double> sum(p, 0);
  for (size_t i = 0; i < gap_after.size(); ++i) sum[i % p] += gap_after[i];
  return static_cast<int>(std::max_element(sum.begin(), sum.end()) - sum.begin());
}

bool by_markers(TimelineSet& set) {
  bool any = false;
  for (auto& w : set.workers) any |= !w.markers.empty();
  if (!any) return false;
  for (auto& w : set.workers) {
    auto marks = w.markers;
    std::sort(marks.begin(), marks.end(), [](auto& a, auto& b) { return a.start_ns < b.start_ns; });
    size_t m = 0;
    for (auto& op : w.ops) {
      while (m < marks.size() && marks[m].end_ns <= op.start_ns) ++m;
      op.step = (m < marks.size() && op.start_ns >= marks[m].start_ns) ? marks[m].step : -1;
    }
  }
  return true;
}

}  // namespace

StepDetection assign_steps(TimelineSet& set) {
  // Missing sequence numbers: the n-th operation on a communicator is the same instance everywhere.
  for (auto& w : set.workers) {
    std::unordered_map<uint64_t, int64_t> next;
    for (auto& op : w.ops) {
      if (!is_communication(op.kind) || op.kind == OpKind::sync || op.collective_seq >= 0) continue;
      op.collective_seq = next[op.comm]++;  // NCCL semantics: a communicator's operations run in one order
    }
  }
  StepDetection det;
  auto count_steps = [&] {
    std::vector<int32_t> all;
    for (auto& w : set.workers)
      for (auto& op : w.ops)
        if (op.step >= 0) all.push_back(op.step);
    std::sort(all.begin(), all.end());
    det.steps = static_cast<int>(std::unique(all.begin(), all.end()) - all.begin());
  };
  if (by_markers(set)) {
    det.source = StepSource::markers;
    count_steps();
    return det;
  }
  // Collective sequence: the period of (name, communicator, size) of each worker's collectives.
  std::vector<int> periods;
  for (auto& w : set.workers) {
    std::vector<uint64_t> sig;
    for (auto& op : w.ops)
      if (op.kind == OpKind::collective || op.kind == OpKind::p2p) sig.push_back(collective_signature(op));
    if (sig.size() >= 4) {
      int p = sequence_period(sig, std::min<int>(512, sig.size() / 2), 0.9);
      if (p > 0) periods.push_back(p);
    }
  }
  if (!periods.empty() && periods.size() * 2 >= set.workers.size()) {
    std::sort(periods.begin(), periods.end());
    det.source = StepSource::collectives;
    det.period = periods[periods.size() / 2];
    for (auto& w : set.workers) {
      std::vector<size_t> comm_idx;
      for (size_t i = 0; i < w.ops.size(); ++i)
        if (w.ops[i].kind == OpKind::collective || w.ops[i].kind == OpKind::p2p) comm_idx.push_back(i);
      if (comm_idx.empty()) continue;
      std::vector<double> gaps;
      for (size_t k = 0; k + 1 < comm_idx.size(); ++k)
        gaps.push_back(double(w.ops[comm_idx[k + 1]].start_ns - w.ops[comm_idx[k]].end_ns()));
      const int p = det.period;
      int phase = boundary_phase(gaps, p);
      std::vector<size_t> bounds;
      for (size_t k = phase; k < comm_idx.size(); k += p) bounds.push_back(comm_idx[k]);
      // Align step numbers: the boundary collective's sequence number says which iteration it closes.
      int64_t seq0 = w.ops[comm_idx[phase]].collective_seq;
      int32_t first = seq0 >= 0 ? static_cast<int32_t>(seq0 / p) : 0;
      number_steps(w, bounds, first);
    }
    count_steps();
    return det;
  }
  // Autocorrelation of the operation-name sequence.
  periods.clear();
  for (auto& w : set.workers) {
    std::vector<uint64_t> names;
    for (size_t i = 0; i < w.ops.size() && i < 20000; ++i) names.push_back(w.ops[i].name);
    int p = sequence_period(names, std::min<int>(2000, names.size() / 2), 0.9);
    if (p > 0) periods.push_back(p);
  }
  if (periods.empty()) {
    for (auto& w : set.workers)
      for (auto& op : w.ops) op.step = 0;
    det.steps = set.workers.empty() ? 0 : 1;
    return det;
  }
  std::sort(periods.begin(), periods.end());
  det.source = StepSource::autocorrelation;
  det.period = periods[periods.size() / 2];
  for (auto& w : set.workers) {
    std::vector<double> gaps;
    for (size_t i = 0; i + 1 < w.ops.size(); ++i) gaps.push_back(double(w.ops[i + 1].start_ns - w.ops[i].end_ns()));
    int phase = boundary_phase(gaps, det.period);
    std::vector<size_t> bounds;
    for (size_t i = phase; i < w.ops.size(); i += det.period) bounds.push_back(i);
    number_steps(w, bounds, 0);
  }
  count_steps();
  return det;
}

std::vector<int64_t> estimate_clock_offsets(const TimelineSet& set) {
  // (communicator, sequence) -> participants' (worker, end)
  std::unordered_map<uint64_t, std::vector<std::pair<int, int64_t>>> instances;
  for (size_t w = 0; w < set.workers.size(); ++w)
    for (auto& op : set.workers[w].ops)
      if ((op.kind == OpKind::collective || op.kind == OpKind::p2p) && op.collective_seq >= 0)
        instances[(static_cast<uint64_t>(op.comm) << 40) ^ static_cast<uint64_t>(op.collective_seq)]
            .emplace_back(static_cast<int>(w), op.end_ns());
  std::vector<std::vector<int64_t>> deltas(set.workers.size());
  std::vector<int64_t> ends;
  for (auto& [key, parts] : instances) {
    if (parts.size() < 2) continue;
    ends.clear();
    for (auto& p : parts) ends.push_back(p.second);
    std::nth_element(ends.begin(), ends.begin() + ends.size() / 2, ends.end());
    const int64_t med = ends[ends.size() / 2];
    for (auto& p : parts) deltas[p.first].push_back(p.second - med);
  }
  std::vector<int64_t> offsets(set.workers.size(), 0);
  for (size_t w = 0; w < deltas.size(); ++w) {
    auto& d = deltas[w];
    if (d.empty()) continue;
    std::nth_element(d.begin(), d.begin() + d.size() / 2, d.end());
    offsets[w] = d[d.size() / 2];
  }
  return offsets;
}

std::vector<int> peer_groups(const TimelineSet& set) {
  std::map<std::vector<uint32_t>, int> ids;
  std::vector<int> group(set.workers.size(), 0);
  for (size_t w = 0; w < set.workers.size(); ++w) {
    std::vector<uint32_t> comms;
    for (auto& op : set.workers[w].ops)
      if (op.comm) comms.push_back(op.comm);
    std::sort(comms.begin(), comms.end());
    comms.erase(std::unique(comms.begin(), comms.end()), comms.end());
    group[w] = ids.emplace(comms, static_cast<int>(ids.size())).first->second;
  }
  // A group of one has nobody to be compared with: then communicator sets say nothing useful, use one group.
  std::vector<int> size(ids.size(), 0);
  for (int g : group) ++size[g];
  if (size.empty() || *std::min_element(size.begin(), size.end()) < 2) std::fill(group.begin(), group.end(), 0);
  return group;
}

}  // namespace stackscope::analyze

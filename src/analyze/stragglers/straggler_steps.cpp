// Steps without markers, and clock offsets from collectives (KAIR Feature 4 does this with heartbeats; a trace
// read after the fact has only the collectives, which end together on every participant).
#include <algorithm>
#include <cmath>
#include <map>
#include <unordered_map>

#include "analyze/stragglers/straggler.h"

namespace stackscope::analyze {

std::string_view step_source_name(StepSource s) {
  switch (s) {
    case StepSource::markers: return "markers";
    case StepSource::collectives: return "collective-sequence";
    case StepSource::autocorrelation: return "autocorrelation";
    case StepSource::syncs: return "sync-cadence";
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

// The largest mean pause at one position of a period of length p.
double phase_peak(const std::vector<double>& gap_after, int p) {
  std::vector<double> sum(p, 0);
  std::vector<int> cnt(p, 0);
  for (size_t i = 0; i < gap_after.size(); ++i) {
    sum[i % p] += gap_after[i];
    cnt[i % p]++;
  }
  double best = 0;
  for (int r = 0; r < p; ++r)
    if (cnt[r]) best = std::max(best, sum[r] / cnt[r]);
  return best;
}

// A name sequence can repeat faster than the step (three equal all-reduce buckets repeat every collective):
// the step is the multiple k*p whose pauses line up, i.e. one position carries the long pause between steps.
int step_multiple(const std::vector<double>& gap_after, int p) {
  const int max_k = std::max<int>(1, static_cast<int>(gap_after.size() / (3 * p)));
  std::vector<double> peak(max_k + 1, 0);
  double best = 0;
  for (int k = 1; k <= max_k; ++k) best = std::max(best, peak[k] = phase_peak(gap_after, k * p));
  for (int k = 1; k <= max_k; ++k)
    if (peak[k] >= 0.85 * best) return k;
  return 1;
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
      if (op.step >= 0) continue;  // the reader knew better (a GPU kernel belongs to the step that launched it)
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
  // Collective sequence: the period of (name, communicator, size) of each worker's collectives, per worker
  // (pipeline stages issue different numbers of transfers per step), stretched to the multiple whose pauses
  // line up; the step ends after the collective followed by the longest pause.
  std::vector<int> worker_period(set.workers.size(), 0);
  std::vector<std::vector<size_t>> comm_idx(set.workers.size());
  std::vector<std::vector<double>> gaps(set.workers.size());
  std::vector<int> periods, base_period(set.workers.size(), 0), multiple(set.workers.size(), 1);
  for (size_t w = 0; w < set.workers.size(); ++w) {
    const auto& ops = set.workers[w].ops;
    std::vector<uint64_t> sig;
    for (size_t i = 0; i < ops.size(); ++i)
      if (ops[i].kind == OpKind::collective || ops[i].kind == OpKind::p2p) {
        comm_idx[w].push_back(i);
        sig.push_back(collective_signature(ops[i]));
      }
    for (size_t k = 0; k + 1 < comm_idx[w].size(); ++k)
      gaps[w].push_back(double(ops[comm_idx[w][k + 1]].start_ns - ops[comm_idx[w][k]].end_ns()));
    if (sig.size() < 4) continue;
    const int p0 = sequence_period(sig, std::min<int>(512, sig.size() / 2), 0.9);
    if (p0 == 0) continue;
    base_period[w] = p0;
    multiple[w] = step_multiple(gaps[w], p0);
  }
  // Workers with the same base period do the same work: they take the multiple most of them see (the smaller
  // on a tie). A straggler's intermittent stalls can make every other repetition pause longest on its own
  // timeline, which alone would double its step and misalign it with its peers.
  std::map<int, std::map<int, int>> votes;  // base period -> multiple -> workers
  for (size_t w = 0; w < set.workers.size(); ++w)
    if (base_period[w]) votes[base_period[w]][multiple[w]]++;
  for (size_t w = 0; w < set.workers.size(); ++w) {
    if (!base_period[w]) continue;
    const auto& v = votes[base_period[w]];
    const int k = std::max_element(v.begin(), v.end(), [](auto& a, auto& b) { return a.second < b.second; })->first;
    worker_period[w] = base_period[w] * k;
    periods.push_back(worker_period[w]);
  }
  if (!periods.empty() && periods.size() * 2 >= set.workers.size()) {
    std::sort(periods.begin(), periods.end());
    det.source = StepSource::collectives;
    det.period = periods[periods.size() / 2];
    for (size_t w = 0; w < set.workers.size(); ++w) {
      const int p = worker_period[w];
      auto& ci = comm_idx[w];
      auto& ops = set.workers[w].ops;
      if (p == 0) {
        for (auto& op : ops) op.step = -1;
        continue;
      }
      // Pipeline stages wait for each other inside transfers, so their pauses tie; the step ends at a
      // collective (the data-parallel all-reduce) when the period has one.
      int phase = -1;
      double best = -1;
      std::vector<double> sum(p, 0);
      for (size_t k = 0; k < gaps[w].size(); ++k) sum[k % p] += gaps[w][k];
      for (int k = 0; k < p && k < static_cast<int>(ci.size()); ++k)
        if (ops[ci[k]].kind == OpKind::collective && sum[k] > best) {
          best = sum[k];
          phase = k;
        }
      if (phase < 0) phase = boundary_phase(gaps[w], p);
      std::vector<size_t> bounds;
      for (size_t k = phase; k < ci.size(); k += p) bounds.push_back(ci[k]);
      // Align step numbers: the boundary collective's sequence number says which iteration it closes
      // (sequence numbers count per communicator: divide by that communicator's operations per step).
      const int64_t seq0 = ops[ci[phase]].collective_seq;
      int64_t per_step = 0;
      for (int k = 0; k < p && k < static_cast<int>(ci.size()); ++k) per_step += ops[ci[k]].comm == ops[ci[phase]].comm;
      number_steps(set.workers[w], bounds, seq0 >= 0 ? static_cast<int32_t>(seq0 / std::max<int64_t>(1, per_step)) : 0);
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
    if (&w == &set.workers.front()) det.period *= step_multiple(gaps, det.period);
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
  struct CommSeqHash {
    size_t operator()(const std::pair<uint32_t, int64_t>& k) const {
      return std::hash<uint64_t>()((static_cast<uint64_t>(k.first) << 32) ^ static_cast<uint64_t>(k.second));
    }
  };
  // Keyed on the whole pair: packing both into one integer dropped bits of one of them.
  std::unordered_map<std::pair<uint32_t, int64_t>, std::vector<std::pair<int, int64_t>>, CommSeqHash> by_key;
  for (size_t w = 0; w < set.workers.size(); ++w)
    for (auto& op : set.workers[w].ops)
      if ((op.kind == OpKind::collective || op.kind == OpKind::p2p) && op.collective_seq >= 0)
        by_key[{static_cast<uint32_t>(op.comm), static_cast<int64_t>(op.collective_seq)}].emplace_back(
            static_cast<int>(w), op.end_ns());
  struct Instance {
    size_t slot0;  // index of the first participant's (worker, communicator) slot
    std::vector<std::pair<int, int64_t>> parts;
  };
  // One residual list per (worker, communicator): a worker's ends on different communicators are compared
  // with different peers, and a quantile over the mixture sticks where one communicator's residuals are
  // centred and another's are not (a pipeline replica offset against its stage peers while its point-to-point
  // neighbours agree with it).
  std::map<std::pair<int, uint32_t>, size_t> slot_of;
  std::vector<int> slot_worker;
  std::vector<Instance> instances;
  std::vector<size_t> part_slot;
  for (auto& [key, parts] : by_key) {
    if (parts.size() < 2) continue;
    const uint32_t comm = key.first;
    Instance inst{part_slot.size(), std::move(parts)};
    for (auto& [w, e] : inst.parts) {
      auto [it, fresh] = slot_of.try_emplace({w, comm}, slot_worker.size());
      if (fresh) slot_worker.push_back(w);
      part_slot.push_back(it->second);
    }
    instances.push_back(std::move(inst));
  }
  // Participants of one instance end together, so offset differences are end differences. Each worker moves
  // by the mean over its communicators of the 10% quantile of its residuals against each instance's median
  // end (delays only add, so a low quantile; the small collectives that a slow link barely delays anchor
  // it), until nothing moves.
  const size_t n = set.workers.size();
  std::vector<double> offset(n, 0), move(n), comms(n);
  std::vector<std::vector<double>> residuals(slot_worker.size());
  std::vector<double> ends;
  for (int iter = 0; iter < 100; ++iter) {
    for (auto& r : residuals) r.clear();
    for (auto& inst : instances) {
      ends.clear();
      for (auto& [w, e] : inst.parts) ends.push_back(double(e) - offset[w]);
      std::sort(ends.begin(), ends.end());
      const size_t m = ends.size();
      const double med = m % 2 ? ends[m / 2] : 0.5 * (ends[m / 2 - 1] + ends[m / 2]);
      for (size_t k = 0; k < inst.parts.size(); ++k)
        residuals[part_slot[inst.slot0 + k]].push_back(double(inst.parts[k].second) - offset[inst.parts[k].first] - med);
    }
    std::fill(move.begin(), move.end(), 0.0);
    std::fill(comms.begin(), comms.end(), 0.0);
    for (size_t sl = 0; sl < residuals.size(); ++sl) {
      auto& d = residuals[sl];
      if (d.empty()) continue;
      const size_t q = d.size() / 10;
      std::nth_element(d.begin(), d.begin() + q, d.end());
      move[slot_worker[sl]] += d[q];
      comms[slot_worker[sl]] += 1;
    }
    // A low quantile sits below each worker's centre by about the same amount everywhere, so all workers
    // would keep moving together; that common shift says nothing about relative offsets and is taken out.
    std::vector<double> steps;
    for (size_t w = 0; w < n; ++w)
      if (comms[w]) steps.push_back(move[w] / comms[w]);
    if (steps.empty()) break;
    std::nth_element(steps.begin(), steps.begin() + steps.size() / 2, steps.end());
    const double common = steps[steps.size() / 2];
    double moved = 0;
    for (size_t w = 0; w < n; ++w) {
      if (!comms[w]) continue;
      const double step = (iter < 5 ? 1.0 : 0.7) * (move[w] / comms[w] - common);
      offset[w] += step;
      moved = std::max(moved, std::abs(step));
    }
    if (moved < 1000) break;  // 1 us
  }
  std::vector<double> sorted = offset;
  std::sort(sorted.begin(), sorted.end());
  const double centre = sorted.empty() ? 0 : sorted[sorted.size() / 2];
  std::vector<int64_t> out(n);
  for (size_t w = 0; w < n; ++w) out[w] = static_cast<int64_t>(std::llround(offset[w] - centre));
  return out;
}

std::vector<int> peer_groups(const TimelineSet& set) {
  std::map<std::vector<uint32_t>, int> ids;
  std::vector<int> group(set.workers.size(), 0);
  for (size_t w = 0; w < set.workers.size(); ++w) {
    // Collective communicators only: point-to-point ones are per pair (pipeline neighbours) and would make
    // every worker unique, while the data-parallel group of a pipeline stage is shared by its replicas.
    std::vector<uint32_t> comms;
    for (auto& op : set.workers[w].ops)
      if (op.comm && op.kind == OpKind::collective) comms.push_back(op.comm);
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

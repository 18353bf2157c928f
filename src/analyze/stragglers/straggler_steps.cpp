// Steps without markers, and clock offsets from collectives (KAIR Feature 4 does this with heartbeats; a trace
// read after the fact has only the collectives, which end together on every participant).
#include <algorithm>
#include <span>
#include <cmath>
#include <cstdint>
#include <map>
#include <numeric>
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

// The median pause after each position 0..p-1 of a period of length p (0 where a position has none). Medians,
// not sums: one long pause (a stall, the hole a duty-cycled recorder leaves) must not move the step boundary.
std::vector<double> phase_medians(std::span<const double> gap_after, int p) {
  std::vector<double> out(p, 0), v;  // one buffer for every position (step_multiple calls this thousands of times)
  v.reserve(gap_after.size() / static_cast<size_t>(p) + 1);
  for (int r = 0; r < p; ++r) {
    v.clear();
    for (size_t i = static_cast<size_t>(r); i < gap_after.size(); i += static_cast<size_t>(p)) v.push_back(gap_after[i]);
    if (v.empty()) continue;
    std::nth_element(v.begin(), v.begin() + static_cast<ptrdiff_t>(v.size() / 2), v.end());
    out[r] = v[v.size() / 2];
  }
  return out;
}

// Among positions 0..p-1 of the period, the one followed by the longest typical pause: where one step ends.
int boundary_phase(const std::vector<double>& gap_after, int p) {
  const auto med = phase_medians(gap_after, p);
  return static_cast<int>(std::max_element(med.begin(), med.end()) - med.begin());
}

// The largest typical pause at one position of a period of length p. Typical (the median): a mean let one long
// pause (start-up, a stall, a recorder's hole) dominate a position seen only a few times, so the longest multiple
// always looked best and 600 DDP steps were read as 5.
double phase_peak(const std::vector<double>& gap_after, int p) {
  const auto med = phase_medians(gap_after, p);
  return *std::max_element(med.begin(), med.end());
}

// A name sequence can repeat faster than the step (three equal all-reduce buckets repeat every collective):
// the step is the multiple k*p whose pauses line up, i.e. one position carries the long pause between steps.
// Multiples are tried only while each position is seen at least 60 times; a maximum over many medians of a few
// noisy pauses still grows with k by chance alone (at 30, a 4-rank run whose NCCL probes were watched for 195
// collectives passed a chance pair of medians, 3.0 against 2.0 ms: 34 steps of 600).
// Bounded cost: the online engine runs this on every pass until its prefix is full (200,000 operations), and over
// every multiple up to n / 60p it cost O(n^2): 105 ms a pass at 15,000 syncs of one H200 job (a pass a second), 14 s
// at 200,000 (bench/straggler_bench, BM_StepsOfASyncLoop). So multiples go up to kMaxMultiple (a step of more than
// 128 repeats of its name sequence is read as the sequence), and each position's median is taken over at most
// kMaxPerPosition consecutive periods from the middle of the run. Consecutive, not spread: periods taken at a
// regular stride alias with the true step (a stride that is a multiple of it puts the step's pause at one position
// of every period tried), so each non-multiple period looked like a step too and none stood alone.
constexpr int kMaxMultiple = 128;
constexpr size_t kMaxPerPosition = 400;

std::span<const double> middle_periods(const std::vector<double>& gap_after, int period) {
  const size_t blocks = gap_after.size() / static_cast<size_t>(period);
  if (blocks <= kMaxPerPosition) return gap_after;
  const size_t first = (blocks - kMaxPerPosition) / 2 * static_cast<size_t>(period);
  return std::span<const double>(gap_after).subspan(first, kMaxPerPosition * static_cast<size_t>(period));
}

int step_multiple(const std::vector<double>& gap_after, int p) {
  const int max_k = std::clamp<int>(static_cast<int>(gap_after.size() / (60 * p)), 1, kMaxMultiple);
  std::vector<double> peak(max_k + 1, 0);
  std::vector<bool> stands_out(max_k + 1, true);
  double best = 0;
  for (int k = 1; k <= max_k; ++k) {
    const auto med = phase_medians(middle_periods(gap_after, k * p), k * p);
    const int at = static_cast<int>(std::max_element(med.begin(), med.end()) - med.begin());
    best = std::max(best, peak[k] = med[at]);
    // In a real multiple one position of the k that share a place in the name sequence carries the pause
    // between steps and the other k-1 ordinary ones. Pauses that are long at random (a rank sharing its CPU
    // is descheduled for a time slice every few collectives: 1.8 ms typical, 4.4 ms at the chance peak) lift
    // the peak at every multiple, its siblings with it, and read 600 steps as 41.
    double sibling = 0;
    for (int q = at % p; q < k * p; q += p)
      if (q != at) sibling = std::max(sibling, med[q]);
    stands_out[k] = k == 1 || peak[k] >= 1.5 * sibling;
  }
  // A real multiple lifts the peak from an ordinary pause to the pause between steps (several times longer);
  // chance lifts it by 10-25 % (1.9 -> 2.4 ms over 600 H200 steps): a third more is needed to leave k = 1.
  if (best < 1.33 * peak[1]) return 1;
  for (int k = 1; k <= max_k; ++k) {
    if (peak[k] < 0.85 * best) continue;
    // A real multiple repeats only at its own multiples: a period j that is no multiple of k puts the pause
    // between steps into gcd(j, k) / k of each position's samples and stays at the ordinary peak; at exactly a
    // half (k = 2, j odd) the median is either, so those j say nothing. A time slice lost every ~28 ms lines up
    // with several periods near it (12, 15 and 16 collective triples on one run).
    bool alone = stands_out[k];
    for (int j = k + 1; j <= max_k && alone; ++j)
      if (j % k != 0 && 2 * std::gcd(j, k) != k && peak[j] >= 0.85 * peak[k]) alone = false;
    return alone ? k : 1;
  }
  return 1;
}

// The collective sequence numbers only the steps whose collectives were recorded. A recorder under its cost
// budget attaches the NCCL probes for part of each second (393 and 264 of 600 steps on two H200 recordings), but
// never duty-cycles blocking CUDA calls nor the Python off-CPU samples. An operation of that kind which occurs
// exactly once in nearly every numbered step on every worker (loss.item()'s stream sync, the wait at the end of
// backward) marks the steps where no collective was seen: from its first occurrence in a numbered step on, each
// occurrence closes one step. Returns whether the numbering was carried (only when the anchor saw more steps).
bool carry_steps_by_anchor(TimelineSet& set) {
  const size_t n = set.workers.size();
  if (n == 0) return false;
  // share[name]: over workers, the smallest share of numbered steps in which the name occurs exactly once.
  std::map<uint32_t, double> share;
  for (size_t w = 0; w < n; ++w) {
    std::map<int32_t, std::map<uint32_t, int>> per_step;  // numbered step -> candidate name -> occurrences
    for (auto& op : set.workers[w].ops) {
      if (op.step < 0) continue;
      auto& c = per_step[op.step];
      if (op.kind == OpKind::sync || op.kind == OpKind::offcpu) c[op.name]++;
    }
    if (per_step.size() < 10) return false;
    std::map<uint32_t, int> once;
    for (auto& [step, c] : per_step)
      for (auto& [name, k] : c) once[name] += k == 1;
    std::map<uint32_t, double> mine;
    for (auto& [name, k] : once) mine[name] = double(k) / double(per_step.size());
    if (w == 0) share = mine;
    for (auto& [name, v] : share) v = std::min(v, mine.count(name) ? mine[name] : 0.0);
  }
  // A probe sees every call; a stack sample only blocks of >= 0.2 ms: calls first on a tie.
  auto sampled = [&](uint32_t name) { return set.names[name].find(" (") != std::string::npos; };
  uint32_t best = 0;
  double best_share = 0.9;
  for (auto& [name, v] : share)
    if (v > best_share || (v == best_share && best && sampled(best) && !sampled(name))) {
      best = name;
      best_share = v;
    }
  if (!best) return false;
  // Carry only when the anchor counts clearly more steps than the collectives numbered, on most workers.
  std::vector<size_t> first(n, SIZE_MAX);
  int more = 0;
  for (size_t w = 0; w < n; ++w) {
    const auto& ops = set.workers[w].ops;
    // Start-up (rendezvous, DDP's broadcasts and its first step) is numbered too, irregularly, with syncs of its
    // own: anchors count from the first one whose step and the 4 after it hold one anchor each.
    std::map<int32_t, int> anchors_in;
    for (auto& op : ops)
      if (op.name == best && op.step >= 0) anchors_in[op.step]++;
    auto regular_from = [&](int32_t step) {
      for (int32_t s = step; s < step + 5; ++s)
        if (auto it = anchors_in.find(s); it == anchors_in.end() || it->second != 1) return false;
      return true;
    };
    size_t anchors = 0;
    std::vector<int32_t> numbered;
    for (size_t i = 0; i < ops.size(); ++i) {
      if (ops[i].name == best && ops[i].step >= 0 && first[w] == SIZE_MAX && regular_from(ops[i].step)) first[w] = i;
      if (first[w] == SIZE_MAX) continue;
      anchors += ops[i].name == best;
      if (ops[i].step >= 0 && (ops[i].kind == OpKind::collective || ops[i].kind == OpKind::p2p)) numbered.push_back(ops[i].step);
    }
    std::sort(numbered.begin(), numbered.end());
    const size_t steps = std::unique(numbered.begin(), numbered.end()) - numbered.begin();
    more += first[w] != SIZE_MAX && anchors > steps + std::max<size_t>(1, steps / 100);
  }
  if (more * 2 <= static_cast<int>(n)) return false;
  for (size_t w = 0; w < n; ++w) {
    auto& ops = set.workers[w].ops;
    if (first[w] == SIZE_MAX) continue;
    // Operations after an anchor belong to the step the next anchor closes; those of the irregular start-up
    // before the first regular step belong to no step.
    int32_t label = ops[first[w]].step;
    for (size_t i = 0; i < first[w]; ++i)
      if (ops[i].step < label) ops[i].step = -1;
    for (size_t i = first[w] + 1; i < ops.size(); ++i) {
      ops[i].step = label + 1;
      if (ops[i].name == best) ++label;
    }
  }
  return true;
}

// Signatures that occur in every step, leaving out the occasional ones: a training loop that all-reduces a flag
// or a logged loss every N steps (the incident harness checks whether to stop every 5 steps) repeats its
// collective sequence only every N steps, and was read as one step of N (456 steps of a 2,260-step job). Per-step
// signatures occur an integer number of times per step; such extras at most once in 3 steps. Counts sorted
// from the most frequent: the cut is at the first drop to under a third of the count above. Empty when nothing
// is left out, or when what would be is more than a quarter of the collectives (then it is not an extra).
std::vector<bool> every_step_signatures(const std::vector<uint64_t>& sig) {
  std::unordered_map<uint64_t, size_t> count;
  for (uint64_t s : sig) count[s]++;
  std::vector<size_t> counts;
  for (auto& kv : count) counts.push_back(kv.second);
  std::sort(counts.rbegin(), counts.rend());
  size_t cut = 0;  // counts below this are extras
  for (size_t i = 0; i + 1 < counts.size(); ++i)
    if (3 * counts[i + 1] < counts[i]) {
      cut = counts[i];
      break;
    }
  if (cut == 0) return {};
  std::vector<bool> keep(sig.size());
  size_t dropped = 0;
  for (size_t i = 0; i < sig.size(); ++i) {
    keep[i] = count[sig[i]] >= cut;
    dropped += !keep[i];
  }
  if (4 * dropped > sig.size() || sig.size() - dropped < 4) return {};
  return keep;
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
    auto gaps_of = [&](const std::vector<size_t>& idx) {
      std::vector<double> g;
      for (size_t k = 0; k + 1 < idx.size(); ++k) g.push_back(double(ops[idx[k + 1]].start_ns - ops[idx[k]].end_ns()));
      return g;
    };
    gaps[w] = gaps_of(comm_idx[w]);
    if (sig.size() < 4) continue;
    const int p0 = sequence_period(sig, std::min<int>(512, sig.size() / 2), 0.9);
    const int k0 = p0 ? step_multiple(gaps[w], p0) : 1;
    // The steps may be read from the collectives every step makes, the occasional ones falling in whichever
    // step they occur in: when without them the sequence repeats at least twice within its period, and the
    // pause closing each repetition is as long as the one closing the period (a step's own pause; a pipeline's
    // micro-batches repeat their transfers too, but pause less between them than between steps).
    if (const auto keep = every_step_signatures(sig); !keep.empty()) {
      std::vector<size_t> idx;
      std::vector<uint64_t> core;
      for (size_t k = 0; k < sig.size(); ++k)
        if (keep[k]) {
          idx.push_back(comm_idx[w][k]);
          core.push_back(sig[k]);
        }
      const auto core_gaps = gaps_of(idx);
      const int pf = core.size() >= 4 ? sequence_period(core, std::min<int>(512, core.size() / 2), 0.9) : 0;
      const int kf = pf ? step_multiple(core_gaps, pf) : 1;
      const double kept_per_period = p0 ? double(p0 * k0) * double(core.size()) / double(sig.size()) : 0;
      const bool splits = pf > 0 && (p0 == 0 || (kept_per_period >= 1.8 * pf * kf &&
                                                 phase_peak(core_gaps, pf * kf) >= 0.7 * phase_peak(gaps[w], p0 * k0)));
      if (splits) {
        comm_idx[w] = std::move(idx);
        gaps[w] = core_gaps;
        base_period[w] = pf;
        multiple[w] = kf;
        continue;
      }
    }
    if (p0 == 0) continue;
    base_period[w] = p0;
    multiple[w] = k0;
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
      const auto typical = phase_medians(gaps[w], p);
      for (int k = 0; k < p && k < static_cast<int>(ci.size()); ++k)
        if (ops[ci[k]].kind == OpKind::collective && typical[k] > best) {
          best = typical[k];
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
    carry_steps_by_anchor(set);
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

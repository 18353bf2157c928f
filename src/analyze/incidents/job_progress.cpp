#include "analyze/incidents/job_progress.h"

#include <algorithm>
#include <optional>
#include <cmath>
#include <map>
#include <type_traits>

#include "analyze/robust_stats.h"
#include "analyze/stragglers/straggler.h"

namespace stackscope::analyze::incidents {

struct JobProgressCounter::FullPrefixSteps {
  std::vector<WorkerTimeline> workers;  // sorted, steps assigned (the names table keeps growing: not kept)
  StepDetection det;
};

namespace {

constexpr size_t kMaxCountedNames = 1024;
constexpr int kMinSteps = 8;

bool is_sync(std::string_view n) { return n.find("Synchronize") != std::string::npos; }
bool is_launch(std::string_view n) {
  return n.rfind("cudaLaunch", 0) == 0 || n.rfind("cuLaunch", 0) == 0 || n == "cudaGraphLaunch";
}

// Robust CV of the central 80 % of windows (start-up and shutdown are not the job's rhythm).
double regularity(const std::vector<double>& v) {
  if (v.size() < 3) return NAN;
  const size_t skip = v.size() / 10;
  std::vector<double> mid(v.begin() + static_cast<std::ptrdiff_t>(skip), v.end() - static_cast<std::ptrdiff_t>(skip));
  const double m = median(mid);
  if (!(m > 0)) return NAN;
  return robust_sd(mid, m) / m;
}

// The loop's period in synchronisations of one name, from their timing (1: none found). A loop that syncs m times
// a step (loss.item(), then a stop flag's .item()) repeats one name, so the names cannot show its step; its timing
// can: the wait for the step's GPU work is long and the others short, and the gaps between them repeat. The step
// is the smallest m in 2..8 at which the log durations and log gaps together repeat (mean autocorrelation >= 0.5)
// clearly more (by 0.3) than at every shorter lag; a loop that syncs once a step shows no such lag and keeps its
// synchronisations as its progress. Taken over the middle of the sample (start-up and the end are not the loop).
int sync_period(const std::vector<int64_t>& start_ns, const std::vector<int64_t>& duration_ns) {
  constexpr int kMaxPeriod = 8;
  constexpr size_t kMaxSample = 4000;
  const size_t n = std::min(start_ns.size(), duration_ns.size());
  if (n < 16 * kMaxPeriod) return 1;
  const size_t first = std::max<size_t>(1, n / 10);
  const size_t last = std::min(n - n / 10, first + kMaxSample);
  std::vector<double> dur, gap;
  for (size_t i = first; i < last; ++i) {
    dur.push_back(std::log(static_cast<double>(std::max<int64_t>(0, duration_ns[i])) + 1e3));  // 1 us floor
    gap.push_back(std::log(static_cast<double>(std::max<int64_t>(start_ns[i] - start_ns[i - 1], 1000))));
  }
  auto autocorrelation = [](const std::vector<double>& x) {
    double mean = 0;
    for (double v : x) mean += v;
    mean /= static_cast<double>(x.size());
    double var = 0;
    for (double v : x) var += (v - mean) * (v - mean);
    std::vector<double> out(kMaxPeriod + 1, 0.0);
    if (!(var > 0)) return out;
    for (int lag = 1; lag <= kMaxPeriod; ++lag) {
      double c = 0;
      for (size_t i = 0; i + static_cast<size_t>(lag) < x.size(); ++i) c += (x[i] - mean) * (x[i + lag] - mean);
      out[static_cast<size_t>(lag)] = c / var;
    }
    return out;
  };
  const auto a = autocorrelation(dur), b = autocorrelation(gap);
  double best_shorter = -INFINITY;
  for (int m = 1; m <= kMaxPeriod; ++m) {
    const double r = (a[static_cast<size_t>(m)] + b[static_cast<size_t>(m)]) / 2;
    if (m >= 2 && r >= 0.5 && r >= best_shorter + 0.3) return m;
    best_shorter = std::max(best_shorter, r);
  }
  return 1;
}

}  // namespace

JobProgress choose_progress(std::vector<ProgressSignal> candidates, std::optional<StepStats> steps,
                            double min_per_window) {
  JobProgress out;
  out.steps = steps;
  for (auto& c : candidates) c.regularity_cv = regularity(c.per_window);
  // A job that has made GPU work calls (a synchronisation, a kernel launch, a collective) is judged by its GPU work
  // only. Its interpreter's on-CPU samples and its operators run from the first import: while it imports, reads its
  // data, builds its model and sets up CUDA and its process group they rise and dip with that set-up, not with the
  // work it is for. Offline the GPU work is the signal and its empty first seconds are the start-up; online, the
  // early passes had too few windows of it to judge by and fell back on the Python samples, so the set-up's waits
  // became host and storage stalls (5 false incidents in the first 7-24 s of the benchmark's GPU jobs, none of them
  // offline). Until one GPU signal can be judged, such a job has no progress signal: it is starting up.
  const bool gpu_work = std::any_of(candidates.begin(), candidates.end(), [](const ProgressSignal& c) {
    return c.metric == "syncs" || c.metric == "launches" || c.metric == "collectives";
  });
  const ProgressSignal* best = nullptr;
  for (const auto& c : candidates) {
    if (!std::isfinite(c.regularity_cv)) continue;
    if (gpu_work && (c.metric == "python_samples" || c.metric == "torch_ops")) continue;
    const size_t skip = c.per_window.size() / 10;
    const double typical = median(std::vector<double>(c.per_window.begin() + static_cast<std::ptrdiff_t>(skip),
                                                      c.per_window.end() - static_cast<std::ptrdiff_t>(skip)));
    // Steps are what the job is for: taken whenever they are regular enough to judge a slowdown by.
    const double need = c.metric == "steps" ? 1 : min_per_window;
    if (typical < need) continue;
    if (c.metric == "steps" && c.regularity_cv < 0.5) {
      best = &c;
      break;
    }
    // Python's on-CPU samples measure the interpreter's CPU time, not work done: a thread spinning in a
    // synchronisation while the GPU is slowed keeps its sample rate. Taken only where no call count of the job's
    // own work (collectives, synchronisations, launches, operators) is regular enough to judge by.
    // A duty-cycled count (an estimate; its unwatched windows hold the last watched value, which looks regular)
    // comes after an exact one.
    auto rank = [&](const ProgressSignal& s) {
      return s.metric == "python_samples" || s.regularity_cv > 0.6 ? 2 : s.sampled ? 1 : 0;
    };
    if (!best || std::pair(rank(c), c.regularity_cv) < std::pair(rank(*best), best->regularity_cv)) best = &c;
  }
  if (best) out.signal = *best;
  out.candidates = std::move(candidates);
  return out;
}

// Under the cost budget the tracer keeps the CUDA family's blocking calls (synchronisations, blocking copies,
// allocations: recorded with a duration) attached all the time; only its entry-only calls (instant records:
// launches, asynchronous copies) follow trace.cuda.watching. Other families are sampled whole.
static bool follows_watching(Layer layer, bool instant) { return layer != Layer::cuda || instant; }

JobProgressCounter::JobProgressCounter(WindowGrid grid, std::set<uint32_t> job_pids, size_t max_step_ops)
    : grid_(grid), pids_(std::move(job_pids)), max_ops_(max_step_ops) {
  for (auto& c : counts_) c.assign(grid_.count, 0.0);
}

void JobProgressCounter::add(const CallRecord& e) {
  if (!pids_.empty() && !pids_.count(e.pid)) return;
  const auto w = grid_.index_of(e.start_ns);
  if (!w) return;
  const bool instant = e.instant;
  OpKind kind = OpKind::compute;
  bool op = false;
  switch (e.layer) {
    case Layer::nccl:
      if (instant) return;
      counts_[kCollectives][*w] += 1;
      kind = (e.name.find("Send") != std::string::npos || e.name.find("Recv") != std::string::npos) ? OpKind::p2p
                                                                                                    : OpKind::collective;
      op = true;
      break;
    case Layer::cuda:
      if (is_sync(e.name)) {
        counts_[kSyncs][*w] += 1;
        kind = OpKind::sync;
        op = !instant;
      } else if (is_launch(e.name)) {
        counts_[kLaunches][*w] += 1;
      }
      break;
    case Layer::torch:
      counts_[kTorch][*w] += 1;
      // Outermost operators only: nested ones start within microseconds of each other and their recorded order
      // varies, which hides the step's period.
      op = !instant && e.depth == 0;
      break;
    case Layer::python:
      if (e.sample && !e.offcpu) counts_[kPython][*w] += 1;  // on-CPU stack samples
      break;
    default:
      break;
  }
  if (!op) return;
  auto& per_window = ops_per_window_[{e.pid, e.layer}];
  if (per_window.empty()) per_window.assign(grid_.count, 0.0f);
  per_window[*w] += 1;
  const uint32_t name = ops_.intern(e.name);
  auto it = name_counts_.find(name);
  if (it == name_counts_.end() && name_counts_.size() < kMaxCountedNames) {
    it = name_counts_.emplace(name, std::vector<float>(grid_.count, 0.0f)).first;
    if (follows_watching(e.layer, instant)) name_layer_[name] = e.layer;  // else never rescaled
  }
  if (it != name_counts_.end()) it->second[*w] += 1;
  if (buffered_ >= max_ops_) {
    capped_ = true;
    return;
  }
  auto [wi, fresh] = worker_of_pid_.try_emplace(e.pid, ops_.workers.size());
  if (fresh) {
    ops_.workers.emplace_back();
    ops_.workers.back().worker = "pid" + std::to_string(e.pid);
  }
  TimelineOp t;
  t.name = name;
  t.kind = kind;
  t.start_ns = e.start_ns;
  t.duration_ns = std::max<int64_t>(0, e.duration_ns);
  t.stream = static_cast<int32_t>(e.tid);
  if (e.layer == Layer::nccl) t.bytes = static_cast<int64_t>(std::max(0.0, e.bytes));
  ops_.workers[wi->second].ops.push_back(t);
  ++buffered_;
}

void JobProgressCounter::credit_watched(Layer layer, int64_t from, int64_t to) {
  auto& ns = watched_ns_[layer];
  if (ns.empty()) ns.assign(grid_.count, 0.0);
  int64_t a = std::max(from, grid_.first_ns);
  const int64_t b = std::min(to, grid_.end(grid_.count - 1));
  while (a < b) {
    const auto w = grid_.index_of(a);
    if (!w) break;
    const int64_t cut = std::min(b, grid_.end(*w));
    ns[*w] += static_cast<double>(cut - a);
    a = cut;
  }
}

void JobProgressCounter::add_watching(const std::string& series_name, std::span<const int64_t> t,
                                      std::span<const double> v) {
  static const std::map<std::string, Layer, std::less<>> kFamilies{
      {"trace.cuda.watching", Layer::cuda},   {"trace.nccl.watching", Layer::nccl},
      {"trace.torch.watching", Layer::torch}, {"trace.python.watching", Layer::python},
      {"python.capi.watching", Layer::python}};
  const auto f = kFamilies.find(series_name);
  const size_t n = std::min(t.size(), v.size());
  if (f == kFamilies.end() || n == 0 || grid_.count == 0) return;
  const Layer layer = f->second;
  if (watched_ns_[layer].empty()) watched_ns_[layer].assign(grid_.count, 0.0);
  auto [first, fresh] = first_watch_ns_.try_emplace(layer, t[0]);
  if (!fresh) first->second = std::min(first->second, t[0]);
  // A step function: each value holds until the next sample. A series arrives in runs (blocks of a recording,
  // batches of a live stream): the last sample of a run is held until the next run, or until finish().
  auto [held, none] = watch_held_.try_emplace(series_name, t[0], 0.0);
  if (!none && held->second.second > 0.5) credit_watched(layer, held->second.first, t[0]);
  for (size_t i = 0; i + 1 < n; ++i)
    if (v[i] > 0.5) credit_watched(layer, t[i], t[i + 1]);
  held->second = {t[n - 1], v[n - 1]};
  watch_layer_of_[series_name] = layer;
}

std::vector<double> JobProgressCounter::watch_scale(Layer layer) const {
  std::vector<double> scale(grid_.count, 1.0);
  const auto it = watched_ns_.find(layer);
  if (it == watched_ns_.end()) return scale;
  // A window watched for less than 1 % of its length says nothing of its own (NaN: the caller fills it from a
  // watched neighbour; its counts, 0 or a handful, would be scaled by a huge factor).
  const double width = static_cast<double>(grid_.width_ns);
  const int64_t first = first_watch_ns_.at(layer);
  for (size_t w = 0; w < grid_.count && w < it->second.size(); ++w) {
    const double share = it->second[w] / width;
    if (grid_.end(w) <= first) continue;  // before the family's first probes: its counts are what they are (none)
    if (share >= 0.01) {
      scale[w] = 1.0 / std::min(1.0, share);
    } else {
      scale[w] = NAN;
    }
  }
  return scale;
}

JobProgress JobProgressCounter::finish(size_t windows) {
  if (windows < grid_.count) {  // online: only the windows so far
    grid_.count = windows;
    for (auto& c : counts_) c.resize(windows);
    for (auto& [name, per_window] : name_counts_) per_window.resize(windows);
    for (auto& [key, per_window] : ops_per_window_) per_window.resize(windows);
    for (auto& [layer, ns] : watched_ns_) ns.resize(windows);
  }
  // The held last sample of each watching series lasts to the end of the windows being finished.
  for (const auto& [series, held] : watch_held_)
    if (held.second > 0.5 && grid_.count > 0) credit_watched(watch_layer_of_.at(series), held.first, grid_.end(grid_.count - 1));
  // Duty-cycled families: counts divided by the watched share of their window; a window never watched takes
  // the previous watched window's scaled count (the next one's at the start).
  std::map<Layer, std::vector<double>> scales;
  for (const auto& [layer, ns] : watched_ns_) scales[layer] = watch_scale(layer);
  auto rescale = [&](auto& per_window, Layer layer) {
    const auto sc = scales.find(layer);
    if (sc == scales.end()) return;
    const std::vector<double>& scale = sc->second;
    std::optional<double> held;
    for (size_t w = 0; w < per_window.size() && w < scale.size(); ++w) {
      if (std::isfinite(scale[w])) {
        per_window[w] = static_cast<std::remove_reference_t<decltype(per_window[w])>>(per_window[w] * scale[w]);
        held = per_window[w];
      } else if (held) {
        per_window[w] = static_cast<std::remove_reference_t<decltype(per_window[w])>>(*held);
      }
    }
    // Leading unwatched windows take the first watched window's value (found once: linear).
    size_t first_watched = 0;
    while (first_watched < scale.size() && !std::isfinite(scale[first_watched])) ++first_watched;
    if (first_watched < per_window.size())
      for (size_t w = 0; w < first_watched; ++w) per_window[w] = per_window[first_watched];
  };
  rescale(counts_[kCollectives], Layer::nccl);
  rescale(counts_[kLaunches], Layer::cuda);
  rescale(counts_[kTorch], Layer::torch);
  for (auto& [name, per_window] : name_counts_)
    if (auto l = name_layer_.find(name); l != name_layer_.end()) rescale(per_window, l->second);
  for (auto& [key, per_window] : ops_per_window_)
    if (key.second != Layer::cuda) rescale(per_window, key.second);  // a CUDA operation is a synchronisation
  static const char* kNames[kKinds] = {"collectives", "syncs", "launches", "torch_ops", "python_samples"};
  std::vector<ProgressSignal> candidates;
  std::optional<StepStats> steps;
  // A step signal found: the job's progress candidate, with the step count and times it was found with.
  auto take_steps = [&](ProgressSignal sig, int count, std::string source, const std::vector<double>& step_ms,
                        bool from_prefix) {
    StepStats st;
    st.steps = count;
    st.source = std::move(source);
    st.median_ms = median(step_ms);
    st.p95_ms = quantile(step_ms, 0.95);
    st.from_prefix = from_prefix;
    candidates.push_back(std::move(sig));
    steps = st;
  };
  // Steps found from the operation names may be a fraction of the job's: a loop that syncs twice a step with the
  // same calls before each sync repeats its names every half step (kept clean small-batch inference and CNN
  // recordings: 118,574 steps for the workload's 59,276, 39,154 for 19,170). The main
  // synchronisation's timing tells the step (sync_period): where it repeats every m of them and a step found
  // holds k, with m a multiple of k at least twice it, the step is m synchronisations (counted from them below,
  // exact where the operators are sampled) and the names' steps are not taken.
  std::optional<int> timing_period;  // sync_period of the main synchronisation, found once
  auto timing_says_longer = [&](double syncs_per_step) {
    if (main_pid_ == 0 || other_workers_sync_ || main_sync_start_.empty()) return false;
    const int k = static_cast<int>(std::lround(syncs_per_step));
    if (k < 1 || std::abs(syncs_per_step - k) >= 0.1) return false;
    if (!timing_period) timing_period = sync_period(main_sync_start_, main_sync_duration_);
    return *timing_period >= 2 * k && *timing_period % k == 0;
  };
  if (buffered_ > 0) {
    StepDetection det;
    if (const auto& kept = *full_prefix_steps_) {  // the full prefix, as a previous finish() numbered it
      ops_.workers = kept->workers;
      det = kept->det;
    } else {
      for (auto& w : ops_.workers)
        std::stable_sort(w.ops.begin(), w.ops.end(), [](auto& a, auto& b) { return a.start_ns < b.start_ns; });
      det = assign_steps(ops_);
      if (buffered_ >= max_ops_) *full_prefix_steps_ = std::make_shared<const FullPrefixSteps>(FullPrefixSteps{ops_.workers, det});
    }
    // The worker with the most operations is the job's main process.
    const WorkerTimeline* main = nullptr;
    for (const auto& w : ops_.workers)
      if (!main || w.ops.size() > main->ops.size()) main = &w;
    if (main) {
      for (size_t i = 0; i < main->ops.size() && i < 20000; ++i) main_ops_.push_back(main->ops[i].name);
      // The main process's most frequent synchronisation, in order (a few others -- an autotuner's device syncs
      // at start-up -- are left out: the loop's own repeats).
      std::map<uint32_t, size_t> syncs_by_name;
      for (const auto& op : main->ops)
        if (op.kind == OpKind::sync) ++syncs_by_name[op.name];
      if (!syncs_by_name.empty()) {
        main_sync_name_ = std::max_element(syncs_by_name.begin(), syncs_by_name.end(), [](auto& a, auto& b) {
                            return a.second < b.second;
                          })->first;
        for (const auto& op : main->ops)
          if (op.kind == OpKind::sync && op.name == main_sync_name_) {
            main_sync_start_.push_back(op.start_ns);
            main_sync_duration_.push_back(op.duration_ns);
          }
      }
      for (const auto& w : ops_.workers)
        if (&w != main && std::any_of(w.ops.begin(), w.ops.end(), [](const TimelineOp& o) { return o.kind == OpKind::sync; }))
          other_workers_sync_ = true;
      for (const auto& [pid, wi] : worker_of_pid_)
        if (&ops_.workers[wi] == main) main_pid_ = pid;
    }
    if (det.source != StepSource::none && det.steps >= kMinSteps && main) {
      // Each step's first operation: its name marks a step everywhere in the recording.
      std::map<int32_t, const TimelineOp*> first;
      std::map<int32_t, std::map<uint32_t, int>> names_in_step;
      for (const auto& op : main->ops) {
        if (op.step < 0) continue;
        auto [it, fresh] = first.try_emplace(op.step, &op);
        if (!fresh && op.start_ns < it->second->start_ns) it->second = &op;
        ++names_in_step[op.step][op.name];
      }
      std::map<uint32_t, int> votes;
      for (auto& [s, op] : first) ++votes[op->name];
      const auto boundary = std::max_element(votes.begin(), votes.end(), [](auto& a, auto& b) { return a.second < b.second; });
      std::vector<double> per_step_uses, durations_ms;
      int64_t prev = -1;
      for (auto& [s, op] : first) {
        per_step_uses.push_back(names_in_step[s][boundary->first]);
        if (prev >= 0) durations_ms.push_back(static_cast<double>(op->start_ns - prev) * 1e-6);
        prev = op->start_ns;
      }
      const double uses = median(per_step_uses);
      // A synchronisation seen the same m >= 2 times in nearly every step found: the collective pattern may
      // repeat every m loop steps (a data loader's prefetch rhythm lengthening every m-th pause) or the loop may
      // sync m times a step; which one, the collectives cannot say, so these steps are not taken (the operation
      // sequence's own period is tried below).
      int m = 1;
      {
        std::map<uint32_t, std::map<int, int>> per_count;  // sync name -> occurrences in a step -> steps
        std::map<uint32_t, bool> is_sync;
        for (const auto& op : main->ops)
          if (op.kind == OpKind::sync) is_sync[op.name] = true;
        for (auto& [s, names] : names_in_step)
          for (auto& [name, k] : names)
            if (is_sync.count(name)) per_count[name][k]++;
        for (auto& [name, counts] : per_count) {
          const auto mode = std::max_element(counts.begin(), counts.end(),
                                             [](auto& a, auto& b) { return a.second < b.second; });
          if (mode->first >= 2 && mode->second * 10 >= static_cast<int>(first.size()) * 8 &&
              (m == 1 || mode->first < m))
            m = mode->first;
        }
      }
      auto counted = name_counts_.find(boundary->first);
      std::vector<double> main_syncs_per_step;
      for (const auto& [st, names] : names_in_step) {
        const auto it = names.find(main_sync_name_);
        main_syncs_per_step.push_back(it != names.end() ? it->second : 0);
      }
      if (m == 1 && !timing_says_longer(median(main_syncs_per_step)) &&
          boundary->second * 10 >= static_cast<int>(first.size()) * 8 && uses >= 1 &&
          counted != name_counts_.end()) {
        ProgressSignal sig{"steps", std::vector<double>(grid_.count)};
        for (size_t w = 0; w < grid_.count; ++w) sig.per_window[w] = counted->second[w] / uses;
        take_steps(std::move(sig), static_cast<int>(first.size()), std::string(step_source_name(det.source)),
                   durations_ms, capped_);
      }
    }
  }
  // No step boundary, but the operation sequence repeats at a looser match than assign_steps asks for (some
  // operators' order varies): a step is `period` operations, so the operations per window give steps per window.
  if (!steps && main_ops_.size() >= 40) {
    int period = sequence_period(main_ops_, std::min<int>(2000, static_cast<int>(main_ops_.size() / 4)), 0.75);
    if (period >= 1) {
      size_t syncs_in_sequence = 0;
      for (uint64_t name : main_ops_) syncs_in_sequence += name == main_sync_name_;
      if (timing_says_longer(static_cast<double>(syncs_in_sequence) * period / static_cast<double>(main_ops_.size())))
        period = 0;
    }
    std::vector<float> ops(grid_.count, 0.0f);
    for (const auto& [key, per_window] : ops_per_window_)
      if (key.first == main_pid_)
        for (size_t w = 0; w < ops.size() && w < per_window.size(); ++w) ops[w] += per_window[w];
    if (period >= 2) {
      ProgressSignal sig{"steps", std::vector<double>(grid_.count)};
      std::vector<double> step_ms;
      const double width_ms = static_cast<double>(grid_.width_ns) * 1e-6;
      double total = 0;
      for (size_t w = 0; w < grid_.count; ++w) {
        sig.per_window[w] = w < ops.size() ? ops[w] / period : 0.0;
        total += sig.per_window[w];
        if (sig.per_window[w] >= 1) step_ms.push_back(width_ms / sig.per_window[w]);
      }
      if (total >= kMinSteps)
        take_steps(std::move(sig), static_cast<int>(std::round(total)), "autocorrelation", step_ms, false);
    }
  }
  // Still no step, and the main process's most frequent synchronisation (never duty-cycled: exact) repeats its
  // timing every m >= 2 calls (sync_period): a step is m of them. Counted per window by its name, so only where no
  // other process of the job synchronises (their calls of that name would be counted too).
  if (!steps && main_pid_ != 0 && !other_workers_sync_) {
    const auto counted = name_counts_.find(main_sync_name_);
    const int m = counted != name_counts_.end() ? sync_period(main_sync_start_, main_sync_duration_) : 1;
    if (m >= 2) {
      ProgressSignal sig{"steps", std::vector<double>(grid_.count)};
      double total = 0;
      for (size_t w = 0; w < grid_.count && w < counted->second.size(); ++w) {
        sig.per_window[w] = counted->second[w] / m;
        total += sig.per_window[w];
      }
      std::vector<double> step_ms;
      for (size_t i = 0; i + static_cast<size_t>(m) < main_sync_start_.size(); ++i)
        step_ms.push_back(static_cast<double>(main_sync_start_[i + static_cast<size_t>(m)] - main_sync_start_[i]) * 1e-6);
      if (total >= kMinSteps)
        take_steps(std::move(sig), static_cast<int>(std::round(total)), "sync_period", step_ms, capped_);
    }
  }
  // A family watched for only part of some windows gives estimates, not counts.
  auto sampled = [&](Layer layer) {
    const auto sc = scales.find(layer);
    return sc != scales.end() &&
           std::any_of(sc->second.begin(), sc->second.end(), [](double f) { return !std::isfinite(f) || f > 1.05; });
  };
  static const std::optional<Layer> kFamily[kKinds] = {Layer::nccl, std::nullopt, Layer::cuda, Layer::torch,
                                                       std::nullopt};
  for (int k = 0; k < kKinds; ++k) {
    const bool any = std::any_of(counts_[k].begin(), counts_[k].end(), [](double c) { return c > 0; });
    if (any) candidates.push_back({kNames[k], counts_[k], NAN, kFamily[k] && sampled(*kFamily[k])});
  }
  return choose_progress(std::move(candidates), steps);
}

}  // namespace stackscope::analyze::incidents

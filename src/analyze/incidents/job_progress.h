// The job's own rate of progress per window: the symptom every incident is measured by. Fed one event at a
// time (a recording is streamed, never held), it counts per window what the job gets done -- training steps when
// they can be found (markers, collective sequence or operator-sequence period: stragglers/assign_steps, run on a
// bounded prefix of the job's operations), else collectives, synchronisations, kernel launches, Torch operators
// or Python on-CPU stack samples -- and picks the most regular signal present.
// Under the tracer's cost budget a hot probe family is attached only part of each second (series
// trace.<family>.watching, python.capi.watching: 1 while attached): that family's counts in a window are divided
// by the window's watched share, so a duty cycle is never read as the job slowing down. The CUDA family's
// blocking calls (synchronisations) are never duty-cycled: their counts are exact, and the step cadence with them.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "analyze/features/window_layer_features.h"
#include "model/event.h"
#include "model/worker_timeline.h"

namespace stackscope::analyze::incidents {

// One candidate signal: progress units per window (steps, calls, samples).
struct ProgressSignal {
  std::string metric;  // steps | collectives | syncs | launches | torch_ops | python_samples
  std::vector<double> per_window;
  double regularity_cv = NAN;  // robust coefficient of variation over the central windows (lower: more regular)
  bool sampled = false;        // scaled up from a duty-cycled probe family: an estimate, not a count
};

struct StepStats {
  int steps = 0;           // steps seen in the analysed prefix
  std::string source;      // markers | collectives | autocorrelation
  double median_ms = NAN, p95_ms = NAN;
  bool from_prefix = false;  // the operations were more than the bounded prefix: times are of the prefix
};

struct JobProgress {
  ProgressSignal signal;                 // the chosen one (empty metric: no signal)
  std::optional<StepStats> steps;
  std::vector<ProgressSignal> candidates;
};

// Chooses among candidate signals: steps when found and regular enough, else the most regular signal with at
// least `min_per_window` units in a typical window; once the job has made GPU work calls, only its GPU work (steps,
// collectives, synchronisations, launches) is judged by, none while none is typical yet (start-up). Pure; the
// counter below produces the candidates.
JobProgress choose_progress(std::vector<ProgressSignal> candidates, std::optional<StepStats> steps,
                            double min_per_window = 5);

class JobProgressCounter {
 public:
  // `job_pids`: the traced processes (empty: every event is the job's).
  JobProgressCounter(WindowGrid grid, std::set<uint32_t> job_pids = {}, size_t max_step_ops = 200'000);
  void add(const Event& e) { add(call_record_of(e)); }
  // `c.name` is copied where kept.
  void add(const CallRecord& c);
  // A watching series (0/1 steps) of the tracer's budget; other series are ignored. Any order against add().
  void add_watching(const std::string& series_name, std::span<const int64_t> t_ns, std::span<const double> values);
  // The signals over the first `windows` windows (all of them by default): online, the windows so far. Once.
  JobProgress finish(size_t windows = SIZE_MAX);

 private:
  enum Kind { kCollectives, kSyncs, kLaunches, kTorch, kPython, kKinds };
  WindowGrid grid_;
  std::set<uint32_t> pids_;
  size_t max_ops_;
  std::vector<double> counts_[kKinds];
  // Per layer: time the family's probes were attached, per window (ns); absent: always attached.
  std::map<Layer, std::vector<double>> watched_ns_;
  std::map<Layer, int64_t> first_watch_ns_;  // the family's first watching sample: before it, nothing was probed
  std::map<std::string, std::pair<int64_t, double>> watch_held_;  // per watching series: its last sample so far
  std::map<std::string, Layer> watch_layer_of_;
  void credit_watched(Layer layer, int64_t from, int64_t to);
  std::vector<double> watch_scale(Layer layer) const;  // per window: 1 / watched share (carried over unwatched windows)
  // Steps: a bounded prefix of the job's operations for assign_steps, and per-window counts of every operation
  // name (bounded) so that the step boundary found in the prefix can be counted over the whole recording.
  TimelineSet ops_;
  std::unordered_map<uint32_t, size_t> worker_of_pid_;
  size_t buffered_ = 0;
  bool capped_ = false;
  std::unordered_map<uint32_t, std::vector<float>> name_counts_;  // name id -> per window
  std::unordered_map<uint32_t, Layer> name_layer_;                 // name id -> the layer its calls come from
  // (pid, layer) -> that process's operations of that layer per window
  std::map<std::pair<uint32_t, Layer>, std::vector<float>> ops_per_window_;
  std::vector<uint64_t> main_ops_;  // the main process's first operation names, in order
  std::vector<int64_t> main_sync_start_, main_sync_duration_;  // its most frequent synchronisation (prefix), in order
  uint32_t main_sync_name_ = 0;
  bool other_workers_sync_ = false;  // another process of the job synchronises too
  uint32_t main_pid_ = 0;
  // Online, finish() runs on a copy every window: once the prefix is full it no longer changes, so its sorted,
  // step-numbered operations are kept here after the first such finish() (shared by the copies) and reused.
  struct FullPrefixSteps;
  std::shared_ptr<std::shared_ptr<const FullPrefixSteps>> full_prefix_steps_ =
      std::make_shared<std::shared_ptr<const FullPrefixSteps>>();
};

}  // namespace stackscope::analyze::incidents

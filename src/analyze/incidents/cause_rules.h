// Root cause of one episode: every class of the contract is one row of a table (cause_rules.cpp) listing the
// window features that support it, each with the direction it must move in, the smallest change that matters
// and its weight. A feature supports when, in the episode against the steady windows around it, it moved by at
// least `z` robust deviations (floored at the feature's resolution) AND by a material amount; a class scores
// the weighted strength of its supporting features (less those that speak against it); the best class wins,
// others with support are "also", no support is "unexplained". Culprits come from per-process series. Pure.
#pragma once
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "analyze/features/window_layer_features.h"
#include "model/incident.h"

namespace stackscope::analyze::incidents {

// A per-entity series on the grid (per process: proc.cpu.util "pid:<pid>:<comm>", gpu.proc.sm_util
// "gpu0/pid42", gpu.proc.present "gpu0/pid42/<comm>"): NaN in windows without a sample.
struct EntitySeries {
  std::string name, device;
  std::vector<double> values;
};

struct SignalRule {
  std::string layer;    // which table: host, nvml, cuda, nccl, torch, python, kernel
  std::string pattern;  // ECMAScript regex on the column name
  int direction = 1;    // +1: a rise supports the class, -1: a fall
  double min_change = 0;  // material change in the column's units (0: none asked)
  double min_ratio = 0;   // material change relative to the steady value (0: none asked)
  double weight = 1;      // < 0: speaks against the class
  bool required = false;  // the class is supported only when this signal is
  std::string unit;
  double min_observed = -INFINITY;  // the episode's value must reach this (a copy of a few bytes is no PCIe load)
  bool key = false;  // where a class has key signals, it is supported only when one of them is
  // A counter of rare events (lost packets): judged on its mean over the episode, not its median. A connection that
  // loses packets stalls between bursts of retransmits (each RTO doubles the wait), so most of the episode's windows
  // may see none while the loss is what holds the job.
  bool bursty = false;
};

struct CauseRule {
  CauseClass cls;
  std::vector<SignalRule> signals;
  bool only_alone = false;  // claimed only when no other class has support (collective_slowdown)
};

const std::vector<CauseRule>& cause_rules();

struct WindowSet {
  std::vector<size_t> episode, baseline;  // window indices
};

struct ClassScore {
  CauseClass cls;
  double score = 0;
  std::vector<IncidentEvidence> evidence;  // supporting features, strongest first
  std::vector<std::string> columns;        // their column names (for culprits)
};

struct CauseVerdict {
  IncidentCause cause;
  std::vector<CauseClass> also;
  std::vector<ClassScore> scores;  // every class with support, best first
};

struct CauseOptions {
  double z = 3.0;
};

// The columns of `tables` each signal of cause_rules() names (by_signal: by the signal's index, rules and signals
// in order; column indices into the signal's layer's table). The same for every episode of the same tables.
struct SignalColumns {
  std::vector<std::vector<size_t>> by_signal;
  std::set<std::string> job_gpus;  // as given to match_signal_columns: also scopes the contention culprits
};
// `job_gpus` (job_gpus() below): where not empty, a GPU's own columns (gpuN.*) count only for the job's GPUs. On a
// node shared by several jobs, a neighbour's GPU idling down its clocks or running other processes is no evidence
// about this job (4 jobs on one H200 host would each blame throttling and contention on the others' GPUs).
SignalColumns match_signal_columns(const std::map<std::string, WindowFeatureTable>& tables,
                                   const std::set<std::string>& job_gpus = {});

// The GPUs ("gpu3") on which NVML saw one of the job's processes (gpu.proc.present "gpuN/pidP/comm"); empty when it
// saw none of them (no per-process data, a CPU job, or not yet): then every GPU's columns count.
std::set<std::string> job_gpus(const std::vector<EntitySeries>& entities, const std::set<uint32_t>& job_pids);

// `tables`: per-layer window features on one grid. `job_pids`: the job's processes (never culprits).
CauseVerdict explain_episode(const std::map<std::string, WindowFeatureTable>& tables,
                             const std::vector<EntitySeries>& entities, const std::set<uint32_t>& job_pids,
                             const WindowSet& windows, const CauseOptions& options = {});
// The same with the signals' columns matched once for several episodes (find_incidents: every episode and each of
// its trial splits).
CauseVerdict explain_episode(const std::map<std::string, WindowFeatureTable>& tables,
                             const std::vector<EntitySeries>& entities, const std::set<uint32_t>& job_pids,
                             const WindowSet& windows, const CauseOptions& options, const SignalColumns& matched);

// Robust comparison of one column in the episode against the baseline: z and the two medians.
struct Shift {
  double expected = 0, observed = 0, z = 0;
};
// bursty: the episode's value is its mean (SignalRule::bursty).
Shift column_shift(const Eigen::MatrixXd& values, Eigen::Index column, const WindowSet& windows, bool log10_column,
                   bool bursty = false);

}  // namespace stackscope::analyze::incidents

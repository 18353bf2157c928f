// The incident engine: per-layer window features of one recording, on one grid, plus the job's progress per
// window, in; the job's phases and its incidents (episodes of lost progress, ranked by the job time they cost,
// each with its root cause) out. Offline (`analyze`) and online use the same engine. Pure: no I/O.
#pragma once
#include <map>
#include <set>
#include <string>
#include <vector>

#include "analyze/features/window_layer_features.h"
#include "analyze/incidents/cause_rules.h"
#include "analyze/incidents/episodes.h"
#include "analyze/incidents/job_progress.h"
#include "model/incident.h"

namespace stackscope::analyze::incidents {

struct IncidentInput {
  WindowGrid grid;
  std::map<std::string, WindowFeatureTable> layers;  // by layer name: cuda, nccl, torch, python, kernel, nvml, host
  JobProgress progress;
  std::vector<EntitySeries> entities;  // per-process series (culprits)
  std::set<uint32_t> job_pids;         // the job's processes: never culprits
};

struct IncidentOptions {
  EpisodeOptions episodes;
  CauseOptions cause;
  size_t baseline_windows = 60;  // steady windows nearest the episode (before it first) form its baseline
  double layer_z = 5.0;          // a layer "moved" when one of its features moved this much...
  double layer_ratio = 0.25;     // ...and by this share of its steady value (log10 features: 0.1)
};

struct IncidentReport {
  std::string progress_metric;  // "" when the recording has no progress signal
  std::optional<StepStats> steps;
  double steady_per_window = 0;
  std::vector<Phase> phases;
  std::vector<Incident> incidents;  // ranked by impact, largest first; ids 1..n in that order
  std::vector<std::string> layers;  // layers the recording has
  size_t windows = 0;
};

IncidentReport find_incidents(const IncidentInput& input, const IncidentOptions& options = {});

// Adds derived host columns the rules read (cpu.busy_fraction from cpu.time.*; proc.cpu.others_top_util from
// the per-process series when the aggregate is missing). find_incidents calls it; exposed for tests.
void add_derived_columns(std::map<std::string, WindowFeatureTable>& tables, const std::vector<EntitySeries>& entities,
                         const std::set<uint32_t>& job_pids);

}  // namespace stackscope::analyze::incidents

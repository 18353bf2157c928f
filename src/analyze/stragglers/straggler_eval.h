// Accuracy of straggler localisation over random simulated trials (truth known): is the top stage-1 worker an
// injected straggler, and does the top root cause name that worker with the right class (compute operator vs
// communication/synchronisation edge)?
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "analyze/stragglers/straggler.h"
#include "analyze/stragglers/straggler_sim.h"

namespace stackscope::analyze {

struct StragglerEvalOptions {
  int trials = 100;
  std::vector<int> worker_counts{8, 16, 32, 64, 128};  // trials cycle through these
  int steps = 8;
  uint64_t seed = 7;
  double pipeline_share = 0.3;  // fraction of trials with pipeline parallelism
  double multi_share = 0.15;    // fraction of trials with 2-3 stragglers at once
};

struct StragglerEvalTrial {
  int workers = 0;
  bool pipeline = false;
  std::vector<SimFault> faults;
  int top_worker = -1;        // the report's verdict (stragglers.front())
  bool top1_correct = false;
  bool stage1_top1_correct = false;  // stage 1 alone (KS rhythm) ranks an injected straggler first
  bool class_correct = false;
  std::string top_cause;  // "compute-operator rank3 backward.layer2"
  // The scenario it tests: the fault kind's name, or "several" for 2-3 stragglers at once.
  std::string scenario() const { return faults.size() == 1 ? sim_fault_name(faults.front().kind) : "several"; }
};

// Accuracy over a subset of the trials (one scenario, or one worker count).
struct StragglerEvalRow {
  std::string label;
  int trials = 0, top1_correct = 0, class_correct = 0, stage1_top1_correct = 0;
};

struct StragglerEvalResult {
  int trials = 0, top1_correct = 0, class_correct = 0, stage1_top1_correct = 0;
  std::vector<StragglerEvalTrial> details;
  double top1_accuracy() const { return trials ? double(top1_correct) / trials : 0; }
  double class_accuracy() const { return trials ? double(class_correct) / trials : 0; }
  double stage1_top1_accuracy() const { return trials ? double(stage1_top1_correct) / trials : 0; }
  std::vector<StragglerEvalRow> by_scenario() const;
  std::vector<StragglerEvalRow> by_workers() const;
};

// One random trial's simulation options (exposed so a failing trial can be replayed).
SimOptions random_trial(uint64_t seed, int workers, double pipeline_share, double multi_share, int steps);
// Scores one trial: runs the analysis on the simulated timelines and compares with the injected faults.
StragglerEvalTrial score_trial(const SimOptions& sim, const StragglerOptions& options = {});
StragglerEvalResult evaluate_straggler_detection(const StragglerEvalOptions& options);

}  // namespace stackscope::analyze

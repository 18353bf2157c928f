// From the job's progress per window to its phases and its episodes. The steady level is the median of the
// central windows; a window is low when its progress is materially below it (a relative drop of at least
// `material_drop`, and `z` robust deviations of the steady windows). Low stretches at the start are start-up
// (and the climb after it warm-up), at the end shutdown, dips recurring at a regular period are periodic
// (checkpoints, evaluation), long stretches with no progress at all are idle; what is left, merged across short
// gaps and at least `min_windows` long, are the episodes that become incidents. Pure.
#pragma once
#include <cstddef>
#include <vector>

#include "analyze/features/window_layer_features.h"
#include "model/incident.h"

namespace stackscope::analyze::incidents {

struct EpisodeOptions {
  double material_drop = 0.15;   // progress at least this fraction below steady
  double z = 3.0;                // and this many robust deviations
  size_t merge_gap = 2;          // low stretches separated by at most this many windows are one episode
  size_t min_windows = 2;        // shorter low stretches are noise
  double max_edge_fraction = 0.3;  // start-up / shutdown take at most this share of the run...
  size_t max_edge_windows = 120;   // ...and at most this many windows
  size_t min_periodic = 3;       // recurring dips needed to call them periodic
  double idle_level = 0.05;      // progress below this fraction of steady is no progress
  size_t min_idle_windows = 30;  // a stretch of no progress this long (and unexplained) is idle
  // Online (record --detect): the windows so far, the job still running, so a low tail is not its shutdown but an
  // incident in progress.
  bool open_end = false;
  // The first thresholds (level cut below only, its spread alone as the noise, no error of the level, z fixed):
  // only to compare with the current ones (analyze's hidden --episodes-v1).
  bool v1_thresholds = false;
};

struct Episode {
  size_t first = 0, last = 0;  // windows, inclusive
};

struct ProgressAnalysis {
  double steady = 0;        // steady progress per window
  double steady_sd = 0;     // robust deviation of the steady windows
  double z = 0;             // the robust deviations a drop needed, raised for the places tested in the run
  std::vector<bool> low;    // per window: materially below steady
  std::vector<Phase> phases;
  std::vector<bool> in_phase;  // per window: part of a phase
  std::vector<Episode> episodes;
};

ProgressAnalysis analyze_progress(const std::vector<double>& progress, const WindowGrid& grid,
                                  const EpisodeOptions& options = {});

// How far the mean of `k` windows in a row strays from the steady level in this job, outside its phases: the
// robust spread of every such mean, and never less than one window's deviation over sqrt(k). A job whose speed
// drifts over tens of seconds (a host-bound loop on a VM: 9-13 % from one 4 s stretch to the next) keeps that
// spread however many windows are averaged, where independent windows would average it away. Windows marked in
// `excluded` (the stretch judged, stretches with a cause) are left out of the spread.
double run_noise_sd(const std::vector<double>& progress, const ProgressAnalysis& analysis, size_t k,
                    const std::vector<bool>& excluded = {});

// The drop below the steady level that the mean of `k` windows in a row must exceed to be more than this job's own
// variation: z robust deviations of run_noise_sd, the z that found the stretch (analysis.z). With too few windows to
// measure the job's drift, the deviation is itself a guess from those windows, and z becomes Student's t at the same
// tail probability with their degrees of freedom.
double variation_bar(const std::vector<double>& progress, const ProgressAnalysis& analysis, size_t k,
                     const std::vector<bool>& excluded = {});

// Job time lost in windows [first, last]: sum of (1 - progress/steady) x window length, at most the stretch.
double impact_seconds(const std::vector<double>& progress, double steady, const WindowGrid& grid, size_t first,
                      size_t last);

}  // namespace stackscope::analyze::incidents

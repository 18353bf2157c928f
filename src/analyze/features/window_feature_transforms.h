// Transforms of a window feature table (window_layer_features.h) after it is built: rebuilding one from the
// columns of a `stackscope features` CSV, conforming it to another recording's columns (`features --like`), and
// the job's own recent baseline (`features --baseline`). Pure: tables in, tables out.
//
// Why a baseline. A model fitted on a clean first period flags every later window once something moves to a new
// level and stays there: GPU memory held by PyTorch's caching allocator after a burst of allocations, an
// all-reduce that drifts slower. Such shifts are real but not faults; what an operator wants flagged is a
// departure from what the job was just doing. So each window's value is replaced by its departure from a robust
// baseline of its neighbours: the median of the N windows before it (side past: causal, usable while the job
// runs; a persistent shift stops counting once it fills half of them), or of the N windows before and the N
// after (side both: a window departs only if it departs from both, with the same sign, by the smaller of the
// two; a step up or down agrees with one side and scores 0 from the first window, while a transient shorter than
// N/2 windows stands out from both; the verdict waits N windows for its future side). The current window is
// never part of its own baseline. Optionally the departure is divided by the baseline's own spread (1.4826 x
// median absolute deviation, floored), a robust z-score that carries no units.
//
// Cost: O(N) per window and column, O(N log N) with the MAD (2 M cells with N = 60: 1 s, 3.7 s with MAD, CPU VM).
//
// Every column gets the transform: a count that is 0 whenever the job is healthy keeps its value (its baseline
// is 0); levels (memory, power, latency, bandwidth) lose their slow drift. A cost worth stating: a change that
// lasts longer than N/2 windows becomes the new normal (side past: after N/2 windows; side both: at once).
#pragma once
#include <cstddef>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "analyze/detectors/feature_scaling.h"
#include "analyze/features/window_layer_features.h"

namespace stackscope::analyze {

// A table from the columns of a `stackscope features` CSV: the first two must be t0_ns and t1_ns, the windows of
// equal width and back to back. `values` is row-major (rows x columns.size()). Throws std::invalid_argument,
// naming `source`, otherwise.
WindowFeatureTable window_table_from_columns(const std::vector<std::string>& columns, std::span<const double> values,
                                             const std::string& source);

// `table` with exactly the feature columns of a reference `stackscope features` CSV (`columns` with t0_ns and
// t1_ns first, `values` row-major): conform_columns with the reference's per-column medians standing in for what
// this table lacks. Throws std::invalid_argument, naming `source`, when the reference is not such a table.
WindowFeatureTable conform_to_reference(const WindowFeatureTable& table, const std::vector<std::string>& columns,
                                        std::span<const double> values, const std::string& source);

enum class BaselineSide { past, both };

struct BaselineOptions {
  size_t windows = 60;                   // N: windows on each side that make the baseline
  BaselineSide side = BaselineSide::both;
  bool scale_by_mad = false;             // divide by the baseline windows' robust spread
  // With scale_by_mad: the spread is at least floor.of(baseline median) (1 % of the level, 0.01 in the column's
  // units), so a column that sat still does not turn the smallest move into an infinite score.
  ScaleFloor floor{.relative = 0.01, .absolute = 0.01};
};

// Each value minus its baseline as described above. Defined everywhere: a NaN or infinite value is left out of
// every baseline and its own window gets 0 (no departure known); a window with no usable neighbour on a side
// uses the other side (the first window of a recording, side both: its future), and with none at all gets 0.
// Column names, grid, subjects and filled counts are kept. Throws std::invalid_argument for windows == 0.
WindowFeatureTable departure_from_baseline(const WindowFeatureTable& table, const BaselineOptions& options);

}  // namespace stackscope::analyze

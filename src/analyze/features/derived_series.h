// Reveal Appendix B: derived metrics computed at read time from the raw samples a recording stores --
// rates of cumulative counters, CPU utilisation per core and in total from jiffies, memory and network
// utilisation, and PMU ratios (IPC, cache and branch miss rates, stall ratios). Pure: no I/O.
#pragma once
#include <cstdint>
#include <map>
#include <span>
#include <utility>
#include <vector>

#include "model/series.h"

namespace stackscope::analyze {

// Per series, times (ascending) and values: the shape RecordingReader::load_samples returns.
using SeriesSamples = std::map<SeriesId, std::pair<std::vector<int64_t>, std::vector<double>>>;

struct DerivedSeriesOptions {
  bool counter_rates = true;        // "<name>.rate" for every counter except cpu.time.* (see utilisation)
  bool cpu_utilisation = true;      // cpu.util, cpu.util.{user,system,iowait,irq,steal} per core and total
  bool memory_utilisation = true;   // mem.util = 1 - MemAvailable / MemTotal
  bool network_utilisation = true;  // net.util where the link speed is known
  bool pmu_ratios = true;           // cpu.ipc, cpu.cache_miss_rate, cpu.branch_miss_rate, cpu.stall_*_ratio
  SeriesId first_id = 0;            // ids of derived series start here; 0: above the largest input id
};

struct DerivedSeries {
  std::vector<SeriesInfo> series;  // source "derived", same host/device/subsystem as their inputs
  SeriesSamples samples;
};

// Series whose samples are missing or malformed (unsorted times) yield nothing rather than wrong values;
// every derived value is finite; utilisations and miss rates are clamped to [0, 1].
DerivedSeries derive_series(std::span<const SeriesInfo> series, const SeriesSamples& samples,
                            const DerivedSeriesOptions& options = {});
// The same from a flat list of samples (any order).
DerivedSeries derive_series(std::span<const SeriesInfo> series, std::span<const Sample> samples,
                            const DerivedSeriesOptions& options = {});

}  // namespace stackscope::analyze

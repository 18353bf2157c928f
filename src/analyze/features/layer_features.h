// Per-layer feature rows for eACGM's GMM (§IV-A: "features such as CUDA calls, Torch operators, GPU usage and
// communication latency"). Pure: takes events and samples, returns matrices with a row -> event/time mapping.
//  - cuda, torch, python: one group per event name; columns log10 latency, log10 size (when the calls carry
//    "bytes"), log10 call rate (calls of that name in the trailing second).
//  - nccl: one group per collective; log10 latency, log10 bytes, log10 achieved bandwidth (bytes / duration).
//  - nvml: one group per GPU; the GPU's NVML series (utilisation, memory, power, temperature, clocks) aligned
//    on the sample times of its densest series (each other series: its latest value at or before that time).
#pragma once
#include <Eigen/Dense>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "model/event.h"
#include "model/series.h"

namespace stackscope::analyze {

// How a column relates to the quantity a person reads: value = 10^column for log10 features.
struct FeatureColumn {
  std::string name;     // "log10_latency_ns"
  std::string display;  // "latency_us": what evidence reports
  bool log10 = false;
  double display_scale = 1;  // display value = (log10 ? 10^x : x) * display_scale
  double to_display(double x) const;
};

struct FeatureGroup {
  std::string layer;    // "cuda", "nccl", "torch", "python", "nvml"
  std::string subject;  // event name, or the GPU ("gpu0") for nvml
  std::vector<FeatureColumn> columns;
  Eigen::MatrixXd x;                 // rows x columns
  std::vector<int64_t> t_ns;         // row -> start (events) or sample time (nvml)
  std::vector<int64_t> duration_ns;  // row -> event duration (0 for nvml rows)
  std::vector<size_t> source_index;  // row -> index into the events span (nvml: index of the aligned sample)
};

struct LayerFeatureOptions {
  int64_t rate_window_ns = 1'000'000'000;  // call rate: calls of the same name in this trailing window
};

// Events of any layer; instants and unfinished events are left out (their duration means nothing).
std::vector<FeatureGroup> event_feature_groups(std::span<const Event> events, const LayerFeatureOptions& options = {});

using SeriesSamples = std::map<SeriesId, std::pair<std::vector<int64_t>, std::vector<double>>>;
// Series whose source is "nvml", grouped by device. Series without samples are left out.
std::vector<FeatureGroup> nvml_feature_groups(const std::vector<SeriesInfo>& series, const SeriesSamples& samples);

}  // namespace stackscope::analyze

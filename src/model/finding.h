// An anomaly with its evidence and attribution, as stored in a recording and printed in reports.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace stackscope {

struct Evidence {
  std::string subject;  // a series key ("cpu.util{cpu3}"), an event name, a worker, an edge
  std::string feature;  // "mean", "variance", "latency", "ks_D", "start_z"...
  double value = 0;     // observed
  double expected = 0;  // baseline
  double score = 0;     // contribution, detector-specific
};

struct Finding {
  int64_t id = 0;            // assigned by the store
  std::string detector;      // "gmm", "reveal", "ks-straggler", ...
  std::string layer;         // layer or "host"
  std::string subsystem;     // cpu|gpu|memory|network|storage|software or "" when unknown
  std::string host;
  std::string subject;       // what is abnormal: event name, worker, series...
  int64_t t_start_ns = 0;    // CLOCK_MONOTONIC of the recording
  int64_t t_end_ns = 0;
  double score = 0;          // higher is more anomalous
  std::string summary;       // one line a person reads
  std::vector<Evidence> evidence;
};

}  // namespace stackscope

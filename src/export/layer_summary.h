// What each traced layer of a recording spent its time on, for the HTML report: top CUDA kernels (by launches
// and host enqueue time: never GPU execution time), CUDA API calls, Torch operators, Python functions (stack
// samples: on-CPU time and blocked time by leaf function; function events: inclusive time), NCCL collectives
// (calls, bytes, time, bytes per second of call time). One streaming pass over the events, no Event objects.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "store/recording_reader.h"

namespace stackscope {

struct NameTotal {
  std::string name;
  uint64_t count = 0;
  double total_ns = 0;  // summed durations (inclusive for nested calls)
  double bytes = 0;     // summed "bytes" argument (NCCL, copies)
};

struct LayerSummary {
  std::map<std::string, uint64_t> events_by_layer;
  std::vector<NameTotal> kernels;           // cuda: launches by kernel name, host enqueue time
  std::vector<NameTotal> cuda_calls;        // cuda: API calls by name
  std::vector<NameTotal> torch_ops;         // torch operators, inclusive time
  std::vector<NameTotal> python_functions;  // python function events (inclusive time) or on-CPU stack samples by leaf
  std::vector<NameTotal> python_blocked;    // off-CPU stack samples by leaf: time blocked there
  std::vector<NameTotal> nccl;              // collectives and other NCCL calls
  bool python_sampled = false;              // python_functions come from stack samples
};

// Each list sorted by total time (largest first) and cut to `top` entries.
LayerSummary summarise_layers(const RecordingReader& reader, size_t top = 12);

}  // namespace stackscope

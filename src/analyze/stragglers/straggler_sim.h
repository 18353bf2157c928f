// A generator of multi-worker training timelines with injected stragglers, to validate straggler localisation
// where the truth is known. Data-parallel (forward, backward with bucketed all-reduces) or pipeline-parallel
// (GPipe micro-batches with send/recv between stages, all-reduce among the replicas of a stage) steps, with
// duration noise, background hiccups and skewed worker clocks. Collectives end together on all participants
// (after the last one arrives); a point-to-point transfer ends together on sender and receiver.
#pragma once
#include <cstdint>
#include <vector>

#include "model/worker_timeline.h"

namespace stackscope::analyze {

enum class SimFaultKind {
  slow_compute,        // one compute operator of the worker runs `factor` times longer in every step
  slow_link,           // the worker's communications complete `delay_ns` late (its link is slow)
  late_start,          // the worker starts each step `delay_ns` late (host-side stall before its first op)
  intermittent_stall,  // one compute operator runs `factor` times longer in a fraction of the steps
};
const char* sim_fault_name(SimFaultKind k);
// The class a correct diagnosis names: a compute operator, or an edge (communication or synchronisation).
inline bool sim_fault_is_edge(SimFaultKind k) { return k == SimFaultKind::slow_link || k == SimFaultKind::late_start; }

struct SimFault {
  SimFaultKind kind = SimFaultKind::slow_compute;
  int worker = 0;
  int op = 0;               // compute operator slot (slow_compute, intermittent_stall)
  double factor = 2.0;
  int64_t delay_ns = 0;
  double probability = 0.2;  // intermittent_stall: fraction of steps
};

struct SimOptions {
  enum class Parallelism { data, pipeline };
  Parallelism parallelism = Parallelism::data;
  int workers = 8;
  int steps = 10;
  int compute_ops = 12;       // forward+backward operators per step (data-parallel)
  int buckets = 3;            // all-reduce buckets per step (data-parallel)
  int stages = 4;             // pipeline stages (workers must be a multiple)
  int micro_batches = 4;
  double noise = 0.03;        // relative s.d. of operator durations
  double hiccup_rate = 0.01;  // fraction of operators that take 1.2-1.5x longer anyway (background noise)
  int64_t op_ns = 2'000'000;  // mean compute operator duration
  int64_t transfer_ns = 1'500'000;
  int64_t max_clock_skew_ns = 20'000'000;
  bool markers = false;       // emit ProfilerStep markers
  uint64_t seed = 1;
  std::vector<SimFault> faults;
};

TimelineSet simulate_training(const SimOptions& options);

// Step times of `workers` x `steps` (ms), with persistent per-worker speed differences and noise; faults of
// kind slow_compute make a worker slower by `factor` in every step, intermittent_stall in a fraction of steps.
StepTimeTable simulate_step_times(int workers, int steps, const std::vector<SimFault>& faults, uint64_t seed);

}  // namespace stackscope::analyze

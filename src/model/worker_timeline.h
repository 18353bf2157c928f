// Per-worker timelines of a distributed job, the input of straggler localisation (KAIR §III-B). Pure data:
// readers (src/store: recordings, Kineto JSON, step-time tables) fill it, the engine (src/analyze) reads it.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace stackscope {

// What an operation is, as far as blame is concerned: a compute operator can be the culprit itself; a
// collective, point-to-point transfer or synchronisation is an edge between operations. `offcpu`: the host
// thread blocked outside any collective or synchronisation (a sleep, a data loader's queue, I/O).
enum class OpKind : uint8_t { compute = 0, collective, p2p, sync, memcpy, offcpu };

inline bool is_communication(OpKind k) { return k == OpKind::collective || k == OpKind::p2p || k == OpKind::sync; }
inline std::string_view op_kind_name(OpKind k) {
  constexpr std::string_view names[] = {"compute", "collective", "p2p", "sync", "memcpy", "offcpu"};
  return names[static_cast<int>(k)];
}

struct TimelineOp {
  uint32_t name = 0;           // index into TimelineSet::names
  OpKind kind = OpKind::compute;
  int64_t start_ns = 0;        // the worker's own clock; the engine estimates and removes offsets
  int64_t duration_ns = 0;
  int32_t step = -1;           // training step (from markers or detected); -1 unknown
  int32_t stream = 0;          // thread or GPU stream
  uint32_t comm = 0;           // communicator (index into names; 0 = none) for collectives and p2p
  int64_t collective_seq = -1; // n-th operation on that communicator: the same number on every participant
  int64_t bytes = 0;
  int64_t end_ns() const { return start_ns + duration_ns; }
};

struct StepMarker {
  int32_t step = 0;  // the number in "ProfilerStep#N"
  int64_t start_ns = 0, end_ns = 0;
};

struct WorkerTimeline {
  std::string worker;               // "rank3", "host-a:rank3"
  int rank = -1;
  int local_rank = -1;              // LOCAL_RANK of the process (-1 unknown)
  std::string host;                 // where it ran ("" unknown)
  std::string gpu;                  // its GPU as far as known ("" unknown)
  uint32_t pid = 0;                 // 0 unknown
  std::vector<TimelineOp> ops;      // ordered by start_ns
  std::vector<StepMarker> markers;  // ProfilerStep spans when the trace has them
  // Periodic on-CPU stack samples (name = the leaf function, duration = the sampling period): where the
  // worker's CPU time went. Not operations: a sample has no counterpart on another worker.
  std::vector<TimelineOp> cpu_samples;
  // Kernel launches seen on the host (times only): extra GPU work on one worker shows as more per step.
  std::vector<int64_t> gpu_launch_ns;
  // Where the training loop runs, from the stack samples: the deepest frame common to nearly all of them.
  std::string loop_function;
  // What NVML said about its GPU (times on the ops' clock): its own process's SM utilisation (0..1), the
  // summed SM utilisation of processes on the same GPU that are not ranks of the job, and 1 where the GPU
  // reported a thermal, power or hardware slowdown (0 where it reported none). Empty: not recorded.
  std::vector<std::pair<int64_t, double>> gpu_sm_util, gpu_others_sm_util, gpu_throttled;
  std::string gpu_others;  // names of those other processes ("python3 pid 850")
  // From the first to the last time NVML listed a process that is not a rank on its GPU (holding a context there),
  // for those NVML saw computing (their SM utilisation, over all its samples of them, at least 5 %), with that
  // utilisation: NVML gives a time-sliced GPU's per-process samples to one process at a time, so a co-tenant still
  // computing can drop out of gpu_others_sm_util while it stays listed.
  std::vector<std::pair<int64_t, int64_t>> gpu_others_spans;
  double gpu_others_util = 0;  // the highest such utilisation among them
  std::vector<std::pair<int64_t, double>> gpu_mem_used;  // NVML: its GPU's memory in use, share of the total
  // Its calls that went to the driver for device memory (cudaMalloc / cudaFree: the caching allocator growing,
  // or freeing its cache and retrying under memory pressure).
  std::vector<int64_t> gpu_alloc_ns;
  // Its host's TCP retransmissions (cumulative counter samples): NCCL over sockets, gloo.
  std::vector<std::pair<int64_t, double>> tcp_retransmits;
  // Its host's runnable threads (procfs procs_running) and CPU count (0 unknown): more runnable than CPUs is
  // CPU contention, which delays a rank without adding to its CPU time.
  std::vector<std::pair<int64_t, double>> host_runnable;
  int host_cpus = 0;
  // Its own process's threads, from the kernel layer's scheduler counters (cumulative ns samples): time runnable
  // but waiting for a CPU (run queue), and time on a CPU. Empty: not recorded.
  std::vector<std::pair<int64_t, double>> runq_wait_ns, oncpu_ns;
  // Processes on its host that are not ranks of the job, with their mean CPU use (CPUs) while the job ran,
  // busiest first ("python3 pid 850"): who it may have shared its CPUs with. Empty: not recorded.
  std::vector<std::pair<std::string, double>> host_others_busy;
};

// All workers of one job, with one table of operation names shared by them (ids compare across workers).
struct TimelineSet {
  std::vector<std::string> names{""};  // id 0 is the empty name
  std::vector<WorkerTimeline> workers;
  // Whether a collective's duration includes the time its caller waited for the others (a GPU kernel or
  // gloo's own thread in a profiler trace: yes; a recorded NCCL call is the host enqueue only: no).
  bool collectives_include_wait = true;
  // When kernel launches were watched (a cost budget attaches the launch probes for part of each period):
  // spans [from, to). Empty: whenever the recording ran.
  std::vector<std::pair<int64_t, int64_t>> launches_watched;

  uint32_t intern(std::string_view name) {
    auto it = ids_.find(std::string(name));
    if (it != ids_.end()) return it->second;
    if (ids_.empty())
      for (uint32_t i = 0; i < names.size(); ++i) ids_.emplace(names[i], i);
    auto [pos, inserted] = ids_.emplace(std::string(name), static_cast<uint32_t>(names.size()));
    if (inserted) names.emplace_back(name);
    return pos->second;
  }

 private:
  std::unordered_map<std::string, uint32_t> ids_;
};

// Per-worker step (iteration) times: the cheap signal that stage 1 alone can use.
struct StepTimeTable {
  std::vector<std::string> workers;
  std::vector<int64_t> steps;                 // step labels, ascending
  std::vector<std::vector<double>> time;      // [worker][step index]; NaN where a worker has no value
};

}  // namespace stackscope

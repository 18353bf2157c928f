// What this process has itself cost in CPU, by thread name. The recorder and the agent name their threads ss-*
// (ss-nvml, ss-drain, ...), so the cost of watching a job is reported by part: an operator sees which layer to
// turn off, and a benchmark run on another machine says where the time went without a profiler.
#pragma once
#include <string>
#include <vector>

namespace stackscope {

struct ThreadNameCpu {
  std::string name;  // the thread's comm (threads sharing a name are summed)
  double cpu_s = 0;  // user + system
  int threads = 0;
};

struct SelfCpu {
  double cpu_s = 0;                    // the whole process, threads that already exited included
  std::vector<ThreadNameCpu> threads;  // live threads by name, the costliest first
  // The threads that exited before the reading (their CPU is in cpu_s only).
  double exited_cpu_s() const;
};

// From /proc/self/stat and /proc/self/task/*/stat; an unreadable file leaves its part out (never throws).
SelfCpu read_self_cpu();

// "3.21 s (ss-drain 2.10, ss-nvml 0.61, stackscope 0.30, exited threads 0.20)": the `top` costliest names.
std::string describe_self_cpu(const SelfCpu& c, size_t top = 4);

}  // namespace stackscope

// The CPU time of traced processes, exact to the ns at the moment it is read: a task-clock perf event (software) on
// each of a process's threads, inherited by the threads they start. /proc/PID/stat counts 10 ms ticks, and a process
// CPU clock of another process (clock_getcpuclockid) leaves out what its running threads used since the last
// scheduler tick (4 ms at HZ=250): against the 5 ms windows of a duty-cycled probe family either is noise, and the
// latter is biased where one window edge preempts the job and the other does not. Reading a perf event of a
// running task brings its count up to date.
#pragma once
#include <cstdint>
#include <map>
#include <vector>

namespace stackscope::trace {

class TaskClocks {
 public:
  TaskClocks() = default;
  TaskClocks(const TaskClocks&) = delete;
  TaskClocks& operator=(const TaskClocks&) = delete;
  ~TaskClocks();
  // CPU ns used by `pid`'s threads since this first asked for it (its counters are opened then); -1 when they
  // could not be opened. After the process has gone, its last count.
  int64_t read(uint32_t pid);

 private:
  struct Process {
    std::vector<int> fds;
    int64_t last = 0;
    bool failed = false;
  };
  std::map<uint32_t, Process> processes_;
};

}  // namespace stackscope::trace

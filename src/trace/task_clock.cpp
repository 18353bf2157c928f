#include "trace/task_clock.h"

#include <dirent.h>
#include <linux/perf_event.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <string>

namespace stackscope::trace {

namespace {

int open_task_clock(uint32_t tid) {
  perf_event_attr attr{};
  attr.size = sizeof attr;
  attr.type = PERF_TYPE_SOFTWARE;
  attr.config = PERF_COUNT_SW_TASK_CLOCK;
  attr.inherit = 1;  // threads this one starts are counted too (read() sums them)
  return static_cast<int>(::syscall(__NR_perf_event_open, &attr, static_cast<pid_t>(tid), -1, -1,
                                    PERF_FLAG_FD_CLOEXEC));
}

}  // namespace

TaskClocks::~TaskClocks() {
  for (auto& [pid, p] : processes_)
    for (int fd : p.fds) ::close(fd);
}

int64_t TaskClocks::read(uint32_t pid) {
  auto [it, added] = processes_.try_emplace(pid);
  Process& p = it->second;
  if (added) {
    const std::string dir = "/proc/" + std::to_string(pid) + "/task";
    if (DIR* d = ::opendir(dir.c_str())) {
      while (dirent* e = ::readdir(d)) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
        const int fd = open_task_clock(static_cast<uint32_t>(std::strtoul(e->d_name, nullptr, 10)));
        if (fd >= 0) p.fds.push_back(fd);
      }
      ::closedir(d);
    }
    p.failed = p.fds.empty();
  }
  if (p.failed) return -1;
  int64_t total = 0;
  for (int fd : p.fds) {
    uint64_t v = 0;
    if (::read(fd, &v, sizeof v) != static_cast<ssize_t>(sizeof v)) return p.last;  // gone: its last count
    total += static_cast<int64_t>(v);
  }
  return p.last = std::max(p.last, total);
}

}  // namespace stackscope::trace

#include "sample/self_cpu.h"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include <fmt/format.h>

#include "sample/procfs_file.h"
#include "sample/procfs_parsers.h"

namespace stackscope {
namespace {

// CPU seconds and name from one stat file; nullopt when it cannot be read (the thread exited meanwhile).
bool read_stat(const std::string& path, procfs::PidStat& st, std::string& comm) {
  procfs::ProcFile f;
  if (!f.open(path, true)) return false;
  auto text = f.read(4096);
  if (!text || !procfs::parse_pid_stat(*text, st).ok()) return false;
  comm = std::string(st.comm);
  return true;
}

}  // namespace

double SelfCpu::exited_cpu_s() const {
  double live = 0;
  for (const auto& t : threads) live += t.cpu_s;
  return std::max(0.0, cpu_s - live);
}

// Exact clocks where the kernel has them (the process's CPU clock, each thread's schedstat), ticks of 10 ms
// otherwise: a recorder that ran 1.5 s on a few ms of CPU read as 0 s in ticks.
SelfCpu read_self_cpu() {
  const double hz = static_cast<double>(::sysconf(_SC_CLK_TCK));
  SelfCpu out;
  procfs::PidStat st;
  std::string comm;
  std::map<std::string, ThreadNameCpu> by_name;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator("/proc/self/task", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    if (!read_stat(it->path().string() + "/stat", st, comm)) continue;
    double cpu_s = static_cast<double>(st.utime + st.stime) / hz;
    procfs::ProcFile f;
    if (f.open(it->path().string() + "/schedstat", true))
      if (auto text = f.read(256))
        if (auto ns = procfs::parse_schedstat_on_cpu(*text)) cpu_s = static_cast<double>(*ns) / 1e9;
    auto& t = by_name[comm];
    t.name = comm;
    t.cpu_s += cpu_s;
    ++t.threads;
  }
  // Read after the threads: the total includes whatever they ran meanwhile, never less than their sum.
  timespec ts{};
  if (::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) == 0)
    out.cpu_s = static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
  else if (read_stat("/proc/self/stat", st, comm))
    out.cpu_s = static_cast<double>(st.utime + st.stime) / hz;
  for (auto& [name, t] : by_name) out.threads.push_back(std::move(t));
  std::sort(out.threads.begin(), out.threads.end(),
            [](const ThreadNameCpu& a, const ThreadNameCpu& b) { return a.cpu_s > b.cpu_s; });
  return out;
}

std::string describe_self_cpu(const SelfCpu& c, size_t top) {
  std::string parts;
  for (size_t i = 0; i < c.threads.size() && i < top; ++i) {
    if (c.threads[i].cpu_s < 0.005) break;
    parts += fmt::format("{}{} {:.2f}", parts.empty() ? "" : ", ", c.threads[i].name, c.threads[i].cpu_s);
  }
  if (c.exited_cpu_s() >= 0.005) parts += fmt::format("{}exited threads {:.2f}", parts.empty() ? "" : ", ", c.exited_cpu_s());
  return fmt::format("{:.2f} s{}", c.cpu_s, parts.empty() ? "" : " (" + parts + ")");
}

}  // namespace stackscope

// Who else ran (contract §2 of the incident engine): the CPU of the busiest processes, of the job against
// everything else, and how long the job's threads waited on a run queue. Reading every /proc/[pid]/stat costs a
// few microseconds per process, so this family runs every options.proc_cpu_period_ms (1 s), not at every host
// tick. The files stay open between scans (a pread costs 40 % of open+read+close here), up to a budget of file
// descriptors (an eighth of RLIMIT_NOFILE, at most 4096); beyond it they are opened at each scan. A kept
// descriptor never reads a newer process that reuses the pid: the kernel answers ESRCH once its process is gone.
//
// Series, all gauges averaged over the interval that ends at the sample's time:
//   proc.cpu.util         device "pid:<pid>:<comm>"  ratio (CPUs): the proc_cpu_top busiest processes of the
//                         interval plus any above proc_cpu_busy, traced or not, kernel threads included. A process
//                         not named in an interval used no more than the last one named.
//   proc.cpu.traced_util  device ""   ratio: the traced processes and their descendants (sticky: a worker whose
//                                     launcher exited stays the job's)
//   proc.cpu.others_util  device ""   ratio: every other process
//   proc.cpu.runq_wait    device ""   seconds_per_second: run-queue wait summed over the job's threads
// traced_util and runq_wait are written only when the sampler has traced pids.
// Bounded cardinality: the first max_process_series processes named get a series each; processes named after
// that are summed per name into "pid:0:<comm>" (at most max_process_series/4 names), then into "pid:0:(more)".
//
// What is not seen: the CPU a process used in the interval it exited (its /proc entry is gone by the scan), and
// the run-queue wait of a thread that exited within the interval.
#include <dirent.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <unordered_map>

#include "sample/sampler_family.h"

namespace stackscope::procfs {

namespace {

// A small procfs file under a directory fd; its length, or -1 with errno (the process is gone, hidepid...).
ssize_t read_at(int dirfd, const char* rel, char* buf, size_t size) {
  int fd = ::openat(dirfd, rel, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = ::read(fd, buf, size);
  int saved = errno;
  ::close(fd);
  errno = saved;
  return n;
}

// Descriptors this family may keep open between scans.
size_t fd_budget() {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return 4096;
  return std::min<size_t>(4096, static_cast<size_t>(rl.rlim_cur) / 8);
}

class ProcessCpuFamily final : public Family {
 public:
  using Family::Family;
  ~ProcessCpuFamily() override {
    for (auto& [pid, p] : procs_) forget(p);
    if (dir_) ::closedir(dir_);
  }
  std::string_view name() const override { return "proc_cpu"; }
  int min_period_ms() const override { return std::max(0, ctx_.options.proc_cpu_period_ms); }

  std::string open() override {
    long hz = ::sysconf(_SC_CLK_TCK);
    if (hz <= 0) return "sysconf(_SC_CLK_TCK) failed";
    ticks_per_s_ = static_cast<double>(hz);
    dir_ = ::opendir(ctx_.options.proc_root.c_str());
    if (!dir_) return ctx_.options.proc_root + ": " + std::strerror(errno);
    char buf[1024];
    ssize_t n = read_at(::dirfd(dir_), "self/stat", buf, sizeof buf);
    PidStat st;
    if (n <= 0 || !parse_pid_stat(std::string_view(buf, static_cast<size_t>(n)), st).ok())
      return "cannot read " + ctx_.proc("self/stat");
    fd_budget_ = fd_budget();
    return "";
  }

  void sample(std::vector<Sample>& out) override {
    const int64_t now = monotonic_ns();
    const uint64_t boot_ticks = boottime_ticks();
    ++scan_;
    roots_ = ctx_.traced_pids();
    if (const uint64_t g = ctx_.traced_generation(); g != traced_generation_) {
      // Another job's processes (or none): the sticky flags and run-delay baselines were the last set's.
      traced_generation_ = g;
      for (auto& [pid, p] : procs_) {
        p.traced = false;
        p.resolved = 0;
        for (auto& [tid, t] : p.threads) release(t.fd);
        p.threads.clear();
        p.threads_read = false;
      }
    }
    read_processes();
    for (auto it = procs_.begin(); it != procs_.end();) {
      if (it->second.seen != scan_) {  // exited
        forget(it->second);
        it = procs_.erase(it);
      } else {
        ++it;
      }
    }
    for (auto& [pid, p] : procs_) resolve_traced(pid);
    const double runq_ns = roots_.empty() ? 0.0 : read_run_delays();

    const bool first = prev_ns_ == 0;
    const double secs = static_cast<double>(now - prev_ns_) / 1e9;
    prev_ns_ = now;
    prev_boot_ticks_ = boot_ticks;
    if (first || secs <= 0) return;  // the first scan is the baseline of the deltas

    const double per_tick = 1.0 / (ticks_per_s_ * secs);
    double traced = 0, others = 0;
    busy_.clear();
    for (auto& [pid, p] : procs_) {
      if (p.delta < 0) continue;
      double u = static_cast<double>(p.delta) * per_tick;
      (p.traced ? traced : others) += u;
      if (p.delta > 0) busy_.push_back({u, pid});
    }
    std::sort(busy_.begin(), busy_.end(),  // busiest first; pid order among equals, so ties are stable
              [](auto& a, auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); });
    overflow_.clear();
    for (size_t i = 0; i < busy_.size(); ++i) {
      if (i >= ctx_.options.proc_cpu_top && busy_[i].first <= ctx_.options.proc_cpu_busy) break;
      emit_process(busy_[i].second, procs_[busy_[i].second].comm, busy_[i].first, now, out);
    }
    for (auto& [device, u] : overflow_) out.push_back({series_id(device), now, u});

    auto scalar = [&](SeriesId& id, const char* name, const char* unit, double v) {
      if (!id) id = ctx_.declare(series_info(name, "", Subsystem::cpu, unit, SeriesKind::gauge, SeriesCategory::dynamic));
      out.push_back({id, now, v});
    };
    if (!roots_.empty()) scalar(traced_id_, "proc.cpu.traced_util", "ratio", traced);
    scalar(others_id_, "proc.cpu.others_util", "ratio", others);
    if (!roots_.empty()) scalar(runq_id_, "proc.cpu.runq_wait", "seconds_per_second", runq_ns / 1e9 / secs);
  }

 private:
  struct Thread {
    uint64_t run_delay = 0;  // ns, at the last scan
    uint64_t seen = 0;
    int fd = -1;             // its schedstat, kept open (or -1)
  };
  struct Proc {
    uint64_t start = 0;      // start time in clock ticks after boot: tells a reused pid from the old process
    uint64_t cpu = 0;        // utime + stime at the last scan, clock ticks
    int64_t delta = -1;      // ticks used since the previous scan; -1: unknown (first seen, started before it)
    bool born = false;       // started since the previous scan
    uint32_t ppid = 0;
    uint64_t seen = 0;       // last scan that read it
    uint64_t resolved = 0;   // scan whose traced flag is settled
    bool traced = false;     // the job's (sticky once set)
    std::string comm;
    int fd = -1;             // its stat, kept open (or -1)
    bool threads_read = false;                     // `threads` is a baseline for run-delay deltas
    std::unordered_map<uint32_t, Thread> threads;  // by tid, traced processes only
  };
  // Reads through a kept descriptor, else opens `rel` under `dirfd` (and keeps it while the budget allows).
  // The length read, or -1 with errno.
  ssize_t read_kept(int& fd, int dirfd, const char* rel, char* buf, size_t size) {
    if (fd >= 0) {
      ssize_t n = ::pread(fd, buf, size, 0);
      if (n > 0) return n;
      release(fd);  // its process or thread is gone; a reused id is opened anew below
    }
    int f = ::openat(dirfd, rel, O_RDONLY | O_CLOEXEC);
    if (f < 0) return -1;
    ssize_t n = ::pread(f, buf, size, 0);
    int saved = errno;
    if (n > 0 && open_fds_ < fd_budget_) {
      fd = f;
      ++open_fds_;
    } else {
      ::close(f);
    }
    errno = saved;
    return n;
  }
  void release(int& fd) {
    if (fd < 0) return;
    ::close(fd);
    fd = -1;
    --open_fds_;
  }
  void forget(Proc& p) {
    release(p.fd);
    for (auto& [tid, t] : p.threads) release(t.fd);
    p.threads.clear();
  }

  // Now, in the unit and clock of a process's start time (clock ticks after boot, suspend included).
  uint64_t boottime_ticks() const {
    timespec ts{};
    ::clock_gettime(CLOCK_BOOTTIME, &ts);
    return static_cast<uint64_t>((static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9) * ticks_per_s_);
  }

  void read_processes() {
    ::rewinddir(dir_);
    const int dfd = ::dirfd(dir_);
    char path[64], buf[1024];
    size_t refused = 0;
    while (dirent* e = ::readdir(dir_)) {
      auto pid = parse_u64(e->d_name);
      if (!pid || *pid == 0 || *pid > UINT32_MAX) continue;
      std::snprintf(path, sizeof path, "%s/stat", e->d_name);
      auto [it, fresh] = procs_.try_emplace(static_cast<uint32_t>(*pid));
      Proc& p = it->second;
      ssize_t n = read_kept(p.fd, dfd, path, buf, sizeof buf);
      if (n <= 0) {  // not marked seen: dropped below
        if (errno != ENOENT && errno != ESRCH) ++refused;  // ENOENT/ESRCH: it exited since readdir
        continue;
      }
      PidStat st;
      ParseReport rep = parse_pid_stat(std::string_view(buf, static_cast<size_t>(n)), st);
      if (!rep.ok()) {
        report("[pid]/stat", rep);
        continue;
      }
      const uint64_t total = st.utime + st.stime;
      const bool same = !fresh && p.start == st.start_time;
      if (same) {
        p.delta = total >= p.cpu ? static_cast<int64_t>(total - p.cpu) : 0;
        p.born = false;
      } else {
        const int fd = p.fd;  // new, or a reused pid: what was known is the old process's
        p.fd = -1;
        forget(p);
        p = Proc{};
        p.fd = fd;
        p.start = st.start_time;
        // Started after the previous scan: all its CPU is this interval's. Otherwise it predates the baseline.
        p.born = prev_ns_ != 0 && st.start_time >= prev_boot_ticks_;
        p.delta = p.born ? static_cast<int64_t>(total) : -1;
      }
      p.cpu = total;
      p.ppid = st.ppid;
      p.seen = scan_;
      if (p.comm != st.comm) p.comm = printable_comm(st.comm);
    }
    if (refused)
      ctx_.note_once("proc_cpu:refused", "procfs.proc_cpu",
                     std::to_string(refused) + " processes' stat could not be read (hidepid, or not root): their CPU "
                     "is in neither proc.cpu.util nor the job/others totals");
  }

  // Traced: a root, or a descendant of one (through the ppid chain of this scan), or traced before.
  void resolve_traced(uint32_t pid) {
    chain_.clear();
    bool result = false;
    uint32_t cur = pid;
    for (int depth = 0; depth < 256; ++depth) {
      auto it = procs_.find(cur);
      if (it == procs_.end()) break;
      Proc& p = it->second;
      if (p.resolved == scan_) {
        result = p.traced;
        break;
      }
      if (p.traced || std::find(roots_.begin(), roots_.end(), cur) != roots_.end()) {
        p.traced = true;
        p.resolved = scan_;
        result = true;
        break;
      }
      chain_.push_back(&p);
      if (p.ppid == 0 || p.ppid == cur) break;
      cur = p.ppid;
    }
    for (Proc* p : chain_) {
      p->traced = result;
      p->resolved = scan_;
    }
  }

  // Sum over the job's threads of the run-queue wait since the previous scan, in nanoseconds.
  double read_run_delays() {
    char path[64], buf[256];
    double sum = 0;
    for (auto& [pid, p] : procs_) {
      if (!p.traced) continue;
      std::snprintf(path, sizeof path, "%u/task", pid);
      int tfd = ::openat(::dirfd(dir_), path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      if (tfd < 0) continue;
      DIR* td = ::fdopendir(tfd);
      if (!td) {
        ::close(tfd);
        continue;
      }
      // A thread not in the baseline was born in this interval, so all its wait is this interval's; unless
      // there is no baseline (the process is seen, or traced, for the first time and predates the last scan).
      const bool count_new = p.threads_read || p.born;
      while (dirent* e = ::readdir(td)) {
        auto tid = parse_u64(e->d_name);
        if (!tid || *tid > UINT32_MAX) continue;
        std::snprintf(path, sizeof path, "%s/schedstat", e->d_name);
        auto [it, fresh] = p.threads.try_emplace(static_cast<uint32_t>(*tid));
        Thread& t = it->second;
        ssize_t n = read_kept(t.fd, ::dirfd(td), path, buf, sizeof buf);
        auto delay = n > 0 ? parse_schedstat_run_delay(std::string_view(buf, static_cast<size_t>(n))) : std::nullopt;
        if (!delay) continue;  // gone: dropped below
        if (!fresh) sum += *delay >= t.run_delay ? static_cast<double>(*delay - t.run_delay) : 0.0;
        else if (count_new) sum += static_cast<double>(*delay);
        t.run_delay = *delay;
        t.seen = scan_;
      }
      ::closedir(td);
      for (auto it = p.threads.begin(); it != p.threads.end();) {
        if (it->second.seen != scan_) {
          release(it->second.fd);
          it = p.threads.erase(it);
        } else {
          ++it;
        }
      }
      p.threads_read = true;
    }
    return sum;
  }

  void emit_process(uint32_t pid, const std::string& comm, double util, int64_t t, std::vector<Sample>& out) {
    std::string device = "pid:" + std::to_string(pid) + ":" + comm;
    if (auto it = ids_.find(device); it != ids_.end()) {
      out.push_back({it->second, t, util});
      return;
    }
    const size_t cap = ctx_.options.max_process_series;
    if (pid_series_ < cap) {
      ++pid_series_;
      out.push_back({series_id(device), t, util});
      return;
    }
    ctx_.note_once("proc_cpu:cap", "procfs.proc_cpu",
                   "more than max_process_series=" + std::to_string(cap) +
                       " processes named: later ones are summed per name as proc.cpu.util{pid:0:<comm>}");
    std::string by_name = "pid:0:" + comm;
    if (!ids_.count(by_name)) {
      if (name_series_ < std::max<size_t>(1, cap / 4)) {
        ++name_series_;
        series_id(by_name);
      } else {
        by_name = "pid:0:(more)";
      }
    }
    overflow_[by_name] += util;
  }

  SeriesId series_id(const std::string& device) {
    auto it = ids_.find(device);
    if (it == ids_.end())
      it = ids_.emplace(device, ctx_.declare(series_info("proc.cpu.util", device, Subsystem::cpu, "ratio",
                                                         SeriesKind::gauge, SeriesCategory::dynamic)))
               .first;
    return it->second;
  }

  DIR* dir_ = nullptr;
  double ticks_per_s_ = 100;
  uint64_t scan_ = 0;
  uint64_t traced_generation_ = 0;
  int64_t prev_ns_ = 0;
  uint64_t prev_boot_ticks_ = 0;
  std::vector<uint32_t> roots_;
  std::unordered_map<uint32_t, Proc> procs_;
  std::vector<Proc*> chain_;
  size_t fd_budget_ = 0, open_fds_ = 0;
  std::vector<std::pair<double, uint32_t>> busy_;
  std::map<std::string, double> overflow_;
  std::unordered_map<std::string, SeriesId> ids_;
  size_t pid_series_ = 0, name_series_ = 0;
  SeriesId traced_id_ = 0, others_id_ = 0, runq_id_ = 0;
};

}  // namespace

std::unique_ptr<Family> make_process_cpu_family(SamplerContext& c) { return std::make_unique<ProcessCpuFamily>(c); }

}  // namespace stackscope::procfs

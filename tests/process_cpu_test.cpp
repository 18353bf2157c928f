// The proc_cpu sampler family (contract §2 of the incident engine): which processes used the CPU, the job's CPU
// against everyone else's, and the job's run-queue wait. Real child processes (spinners, sleepers, a launcher
// with a worker), checked against the kernel's own per-process CPU clock.
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <cmath>
#include <fstream>
#include <string>
#include <thread>

#include "memory_sink.h"
#include "model/clock.h"
#include "sample/procfs_parsers.h"
#include "sample/procfs_sampler.h"
#include "store/recording_reader.h"
#include "test_util.h"

using namespace stackscope;
using namespace stackscope::procfs;
using stackscope::testing::MemorySink;

namespace {

enum class Does { spin, sleep, launch_spinner };

// Spins for at most 20 s, so that a crashed test leaves no spinner behind for long.
[[noreturn]] void spin() {
  const int64_t end = monotonic_ns() + 20'000'000'000;
  volatile uint64_t x = 0;
  for (;;) {
    for (int i = 0; i < (1 << 20); ++i) x = x + 1;
    if (monotonic_ns() > end) ::_exit(0);
  }
}

// Real-time round-robin: a spinner's share no longer depends on what else this shared 2-core VM runs (ordinary
// tasks are grouped per session by autogroup, so nice does not help); the kernel still leaves 5 % to the rest.
bool make_realtime() {
  sched_param sp{};
  sp.sched_priority = 1;
  return ::sched_setscheduler(0, SCHED_RR, &sp) == 0;
}

// A child in a process group of its own, named `name` (its comm), killed with its group at the end.
// launch_spinner: the child sleeps in waitpid while its own child (named name + "_w") spins.
class Child {
 public:
  Child(const char* name, Does what, int cpu = -1, bool realtime = false) {
    int fds[2];
    if (::pipe(fds) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      ::setpgid(0, 0);
      ::prctl(PR_SET_NAME, name);
      if (cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(cpu, &set);
        ::sched_setaffinity(0, sizeof set, &set);
      }
      int report[2] = {0, realtime ? make_realtime() : 0};
      if (what == Does::launch_spinner) {
        report[0] = ::fork();  // inherits the policy
        if (report[0] == 0) {
          char wname[16];
          std::snprintf(wname, sizeof wname, "%.13s_w", name);
          ::prctl(PR_SET_NAME, wname);
          spin();
        }
      }
      [[maybe_unused]] auto n = ::write(fds[1], report, sizeof report);
      if (what == Does::spin) spin();
      if (what == Does::launch_spinner) ::waitpid(report[0], nullptr, 0);
      for (;;) ::pause();
    }
    ::close(fds[1]);
    int report[2] = {0, 0};
    if (::read(fds[0], report, sizeof report) == sizeof report) {  // the child is named and placed
      worker_ = report[0];
      realtime_ = report[1] != 0;
    }
    ::close(fds[0]);
  }
  ~Child() { stop(); }
  void stop() {
    if (pid_ <= 0) return;
    ::kill(-pid_, SIGKILL);
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  pid_t pid() const { return pid_; }
  pid_t worker() const { return worker_; }
  bool realtime() const { return realtime_; }

 private:
  pid_t pid_ = -1;
  pid_t worker_ = 0;
  bool realtime_ = false;
};

// CPU time of a process from the kernel's per-process CPU clock (a source apart from /proc/[pid]/stat); 0 for a
// process that does not exist (yet).
double cpu_seconds(pid_t pid) {
  clockid_t cid;
  timespec ts{};
  if (::clock_getcpuclockid(pid, &cid) != 0 || ::clock_gettime(cid, &ts) != 0) return 0;
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}
double now_s() { return static_cast<double>(monotonic_ns()) / 1e9; }

// One scan, bracketed: the time and the processes' CPU clocks just before and just after it. On a loaded VM a
// scan can take tens of milliseconds of wall time, so what the sampler saw is known only within these brackets.
struct Scan {
  double t_before = 0, t_after = 0;
  std::vector<double> cpu_before, cpu_after;
};
Scan scan(ProcfsSampler& sampler, const std::vector<pid_t>& pids) {
  Scan s;
  s.t_before = now_s();
  for (pid_t p : pids) s.cpu_before.push_back(cpu_seconds(p));
  sampler.tick();
  for (pid_t p : pids) s.cpu_after.push_back(cpu_seconds(p));
  s.t_after = now_s();
  return s;
}
// The CPUs that pids[i] (all of `which`, summed) can have been seen to use between scans a and b, with /proc's
// clock-tick resolution at each end.
struct Range {
  double lo, hi;
};
Range used_between(const Scan& a, const Scan& b, std::vector<size_t> which) {
  const double tick = 1.0 / static_cast<double>(::sysconf(_SC_CLK_TCK));
  double least = 0, most = 0;
  for (size_t i : which) {
    least += b.cpu_before[i] - a.cpu_after[i] - 2 * tick;
    most += b.cpu_after[i] - a.cpu_before[i] + 2 * tick;
  }
  return {std::max(0.0, least) / (b.t_after - a.t_before), most / (b.t_before - a.t_after)};
}
#define EXPECT_IN(value, range)                                                          \
  do {                                                                                    \
    const double v_ = (value);                                                            \
    const Range r_ = (range);                                                             \
    EXPECT_TRUE(v_ >= r_.lo && v_ <= r_.hi) << #value << " = " << v_ << ", not in [" << r_.lo << ", " << r_.hi << "]"; \
  } while (0)

std::string device_of(pid_t pid, const std::string& comm) { return "pid:" + std::to_string(pid) + ":" + comm; }

// Last sample of a series (NaN when it has none).
double last_value(const MemorySink& sink, const std::string& name, const std::string& device) {
  const SeriesInfo* s = sink.find(name, device);
  if (!s) return std::nan("");
  auto v = sink.samples_of(s->id);
  return v.empty() ? std::nan("") : v.back().value;
}

ProcfsSamplerOptions proc_cpu_only() {
  ProcfsSamplerOptions o;
  o.families = {"proc_cpu"};
  o.proc_cpu_period_ms = 0;  // every tick(): the test sets the interval
  return o;
}

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

}  // namespace

TEST(ProcessCpuParsers, PidStatFieldsAfterTheLastParenthesis) {
  PidStat st;
  // A name with spaces and parentheses: fields are counted from the last ')'.
  std::string line = "4242 (a) (b c) R 17 4242 4242 0 -1 4194304 100 0 0 0 250 30 0 0 20 0 3 0 98765 1000 10 "
                     "18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n";
  ParseReport r = parse_pid_stat(line, st);
  EXPECT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(st.pid, 4242u);
  EXPECT_EQ(st.comm, "a) (b c");
  EXPECT_EQ(st.state, 'R');
  EXPECT_EQ(st.ppid, 17u);
  EXPECT_EQ(st.utime, 250u);
  EXPECT_EQ(st.stime, 30u);
  EXPECT_EQ(st.num_threads, 3u);
  EXPECT_EQ(st.start_time, 98765u);
  // Broken copies are refused with a reason, never half-read.
  EXPECT_FALSE(parse_pid_stat("4242 R 1 2 3", st).ok());
  EXPECT_FALSE(parse_pid_stat("x (a) R 1", st).ok());
  EXPECT_FALSE(parse_pid_stat("42 (a) R 1 1 1 0 -1 4194304 100 0 0 0 250", st).ok());  // cut before starttime
  EXPECT_FALSE(parse_pid_stat("42 (a) R 1 1 1 0 -1 4194304 100 0 0 0 2x5 30 0 0 20 0 3 0 9", st).ok());
  // This machine's own files: the test process, and a kernel thread (kthreadd, pid 2).
  auto self = read_small_file("/proc/self/stat");
  ASSERT_TRUE(self);
  EXPECT_TRUE(parse_pid_stat(*self, st).ok());
  EXPECT_EQ(st.pid, static_cast<uint32_t>(::getpid()));
  EXPECT_GT(st.start_time, 0u);
  if (auto k = read_small_file("/proc/2/stat")) {
    EXPECT_TRUE(parse_pid_stat(*k, st).ok()) << *k;
    EXPECT_EQ(st.comm, "kthreadd");
  }
  EXPECT_EQ(parse_schedstat_run_delay("123 4567 89\n"), 4567u);
  EXPECT_EQ(parse_schedstat_run_delay("123\n"), std::nullopt);
  EXPECT_EQ(parse_schedstat_on_cpu("123 4567 89\n"), 123u);
  EXPECT_EQ(parse_schedstat_on_cpu(""), std::nullopt);
  EXPECT_EQ(printable_comm("a\nb"), "a?b");
  EXPECT_EQ(printable_comm(""), "?");
}

// A spinning child is named with its pid and comm at the CPU it used; a sleeping one is not named.
TEST(ProcessCpu, BusyProcessIsNamedAndSleepingOneIsNot) {
  Child spinner("ss_spinner", Does::spin, -1, true);
  Child sleeper("ss_sleeper", Does::sleep);
  ProcfsSampler sampler(proc_cpu_only());
  MemorySink sink;
  ASSERT_TRUE(sampler.open(sink, "h").running);
  Scan a = scan(sampler, {spinner.pid()});
  sleep_ms(1000);
  Scan b = scan(sampler, {spinner.pid()});

  const std::string dev = device_of(spinner.pid(), "ss_spinner");
  const SeriesInfo* s = sink.find("proc.cpu.util", dev);
  ASSERT_NE(s, nullptr) << "no proc.cpu.util{" << dev << "}";
  EXPECT_EQ(s->unit, "ratio");
  EXPECT_EQ(s->subsystem, Subsystem::cpu);
  EXPECT_EQ(s->kind, SeriesKind::gauge);
  const double got = last_value(sink, "proc.cpu.util", dev);
  EXPECT_IN(got, used_between(a, b, {0}));
  if (spinner.realtime()) {
    EXPECT_GT(got, 0.8);  // about one CPU (the kernel keeps 5 % from real-time tasks)
  }
  EXPECT_EQ(sink.find("proc.cpu.util", device_of(sleeper.pid(), "ss_sleeper")), nullptr);
  // No job here: the job's series are absent; everyone else's CPU includes the spinner.
  EXPECT_EQ(sink.find("proc.cpu.traced_util", ""), nullptr);
  EXPECT_EQ(sink.find("proc.cpu.runq_wait", ""), nullptr);
  EXPECT_GE(last_value(sink, "proc.cpu.others_util", ""), got);
  // Top 8 plus any above 0.5 CPU (at most 3 on 2 CPUs), and the totals.
  EXPECT_LE(sink.samples().size(), 8u + 3u + 1u);
}

// The job is a launcher whose worker spins: the worker's CPU is the job's; an unrelated spinner is someone else's.
TEST(ProcessCpu, TracedLauncherAndItsWorkerAgainstOthers) {
  Child job("ss_launcher", Does::launch_spinner, -1, true);
  Child other("ss_other", Does::spin);
  ASSERT_GT(job.worker(), 0);
  ProcfsSamplerOptions o = proc_cpu_only();
  o.traced_pids = {static_cast<uint32_t>(job.pid())};
  ProcfsSampler sampler(o);
  MemorySink sink;
  ASSERT_TRUE(sampler.open(sink, "h").running);
  const std::vector<pid_t> pids = {job.pid(), job.worker(), other.pid()};
  Scan a = scan(sampler, pids);
  sleep_ms(1000);
  Scan b = scan(sampler, pids);

  const double traced = last_value(sink, "proc.cpu.traced_util", "");
  const double others = last_value(sink, "proc.cpu.others_util", "");
  const double other_spinner = last_value(sink, "proc.cpu.util", device_of(other.pid(), "ss_other"));
  EXPECT_IN(traced, used_between(a, b, {0, 1}));  // the launcher and its worker, nothing else
  if (job.realtime()) {
    EXPECT_GT(traced, 0.8);  // "~1": the worker's whole CPU
  }
  EXPECT_IN(last_value(sink, "proc.cpu.util", device_of(job.worker(), "ss_launcher_w")), used_between(a, b, {1}));
  if (!std::isnan(other_spinner)) {  // named when among the 8 busiest
    EXPECT_IN(other_spinner, used_between(a, b, {2}));
  }
  EXPECT_GE(others, used_between(a, b, {2}).lo);  // the other spinner is someone else's
  EXPECT_EQ(sink.find("proc.cpu.traced_util", "")->unit, "ratio");

  // The launcher dies; its worker (an orphan now) stays the job's.
  ::kill(job.pid(), SIGKILL);
  ::waitpid(job.pid(), nullptr, 0);
  Scan c = scan(sampler, {job.worker()});
  sleep_ms(700);
  Scan d = scan(sampler, {job.worker()});
  EXPECT_IN(last_value(sink, "proc.cpu.traced_util", ""), used_between(c, d, {0}));
  if (job.realtime()) {
    EXPECT_GT(last_value(sink, "proc.cpu.traced_util", ""), 0.8);
  }
}

// Run-queue wait of the job's threads: about 0 alone on a CPU, most of the time when 3 spinners share it.
TEST(ProcessCpu, RunQueueWaitOfTheJob) {
  STACKSCOPE_REQUIRE(read_small_file("/proc/self/schedstat"), "no /proc/PID/schedstat (CONFIG_SCHED_INFO off)");
  auto measure = [](int rivals_on_its_cpu) {
    Child job("ss_job", Does::spin, 0, true);
    if (!job.realtime()) return std::nan("");
    std::vector<std::unique_ptr<Child>> rivals;
    for (int i = 0; i < rivals_on_its_cpu; ++i) rivals.push_back(std::make_unique<Child>("ss_rival", Does::spin, 0, true));
    ProcfsSamplerOptions o = proc_cpu_only();
    o.traced_pids = {static_cast<uint32_t>(job.pid())};
    ProcfsSampler sampler(o);
    MemorySink sink;
    EXPECT_TRUE(sampler.open(sink, "h").running);
    sampler.tick();
    sleep_ms(1000);
    sampler.tick();
    const SeriesInfo* s = sink.find("proc.cpu.runq_wait", "");
    EXPECT_NE(s, nullptr);
    if (s) {
      EXPECT_EQ(s->unit, "seconds_per_second");
    }
    return last_value(sink, "proc.cpu.runq_wait", "");
  };
  const double alone = measure(0);
  STACKSCOPE_REQUIRE(!std::isnan(alone), "needs SCHED_RR (root) to own a CPU on this shared VM");
  const double shared = measure(3);
  // Four round-robin spinners on one CPU: the job runs about a quarter of the time and waits the rest (measured
  // 0.55-0.93 over 1 s of 100 ms time slices; alone 0.02-0.05, the 5 % the kernel keeps for ordinary tasks).
  EXPECT_LT(alone, 0.15);
  EXPECT_GT(shared, 0.4);
  EXPECT_LT(shared, 1.05);
}

// Processes that exit or start between scans: sampling goes on; one born mid-interval is counted from its start.
TEST(ProcessCpu, ProcessesComingAndGoingMidInterval) {
  ProcfsSamplerOptions o = proc_cpu_only();
  o.traced_pids = {static_cast<uint32_t>(::getpid())};  // the test process: its children are the job's
  ProcfsSampler sampler(o);
  MemorySink sink;
  ASSERT_TRUE(sampler.open(sink, "h").running);
  auto brief = std::make_unique<Child>("ss_brief", Does::spin);
  Scan a = scan(sampler, {});
  sleep_ms(300);
  brief.reset();  // exits mid-interval
  Child late("ss_late", Does::spin, -1, true);  // starts mid-interval
  sleep_ms(600);
  Scan b = scan(sampler, {late.pid()});
  sleep_ms(300);
  scan(sampler, {late.pid()});

  const SeriesInfo* late_series = sink.find("proc.cpu.util", device_of(late.pid(), "ss_late"));
  ASSERT_NE(late_series, nullptr);
  auto late_samples = sink.samples_of(late_series->id);
  ASSERT_EQ(late_samples.size(), 2u);
  // Born in the interval: all its CPU since birth is this interval's.
  a.cpu_before = a.cpu_after = {0.0};
  EXPECT_IN(late_samples[0].value, used_between(a, b, {0}));
  if (late.realtime()) {
    EXPECT_GT(late_samples[0].value, 0.4);  // ran about 0.6 s of the 0.9 s interval
  }
  const SeriesInfo* traced = sink.find("proc.cpu.traced_util", "");
  ASSERT_NE(traced, nullptr);
  auto traced_samples = sink.samples_of(traced->id);
  ASSERT_EQ(traced_samples.size(), 2u);
  EXPECT_GE(traced_samples[0].value, late_samples[0].value);
  EXPECT_TRUE(sink.find("proc.cpu.others_util", ""));
}

// The agent's node sampler is handed from one traced job to the next (set_traced_pids): the next job's processes
// are then the traced ones and the last job's no longer (a traced flag is otherwise sticky), and with none the job's
// series stop.
TEST(ProcessCpu, TracedProcessesReplacedForTheNextJob) {
  Child first("ss_first", Does::spin);
  Child second("ss_second", Does::spin);
  ProcfsSamplerOptions o = proc_cpu_only();
  o.traced_pids = {static_cast<uint32_t>(first.pid())};
  ProcfsSampler sampler(o);
  MemorySink sink;
  ASSERT_TRUE(sampler.open(sink, "h").running);
  const std::vector<pid_t> pids = {first.pid(), second.pid()};
  Scan a = scan(sampler, pids);
  sleep_ms(600);
  Scan b = scan(sampler, pids);
  EXPECT_IN(last_value(sink, "proc.cpu.traced_util", ""), used_between(a, b, {0}));

  sampler.set_traced_pids({static_cast<uint32_t>(second.pid())});
  scan(sampler, pids);  // the first scan with the next job's processes
  Scan c = scan(sampler, pids);
  sleep_ms(600);
  Scan d = scan(sampler, pids);
  EXPECT_IN(last_value(sink, "proc.cpu.traced_util", ""), used_between(c, d, {1}));  // the first spinner is no more

  const size_t traced_samples = sink.samples_of(sink.find("proc.cpu.traced_util", "")->id).size();
  sampler.set_traced_pids({});
  sleep_ms(200);
  scan(sampler, pids);
  EXPECT_EQ(sink.samples_of(sink.find("proc.cpu.traced_util", "")->id).size(), traced_samples) << "no job: none";
}

// The number of per-process series is capped; processes named beyond the cap are summed per name.
TEST(ProcessCpu, SeriesCapSumsLaterProcessesPerName) {
  std::vector<std::unique_ptr<Child>> spinners;
  for (int i = 0; i < 3; ++i) spinners.push_back(std::make_unique<Child>("ss_capped", Does::spin));
  ProcfsSamplerOptions o = proc_cpu_only();
  o.max_process_series = 2;
  ProcfsSampler sampler(o);
  MemorySink sink;
  ASSERT_TRUE(sampler.open(sink, "h").running);
  sampler.tick();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  sampler.tick();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  sampler.tick();
  size_t with_pid = 0, by_name = 0;
  for (const SeriesInfo& s : sink.series()) {
    if (s.name != "proc.cpu.util") continue;
    if (s.device.rfind("pid:0:", 0) == 0) ++by_name;
    else ++with_pid;
  }
  EXPECT_EQ(with_pid, 2u);
  EXPECT_GE(by_name, 1u);
  bool noted = false;
  for (auto& n : sink.notes()) noted |= n.text.find("max_process_series=2") != std::string::npos;
  EXPECT_TRUE(noted);
}

// `stackscope record --layers host -- CMD` holds the series, the job being CMD.
TEST(ProcessCpu, RecordingOfAJobHoldsTheSeries) {
  TempDir dir;
  std::string rec = dir.file("r.sdb");
  std::string out;
  ASSERT_EQ(run_command(std::string(STACKSCOPE_BIN) + " record -q --layers host -o " + rec +
                            " -- python3 -c 'import time\nt=time.time()+3.2\nwhile time.time()<t: pass'",
                        &out),
            0)
      << out;
  RecordingReader r(rec);
  std::string job_pid = r.meta_or("pid");
  ASSERT_FALSE(job_pid.empty());
  std::map<std::string, SeriesId> ids;
  for (const SeriesInfo& s : r.series())
    if (s.name.rfind("proc.cpu.", 0) == 0) ids[s.name + "{" + s.device + "}"] = s.id;
  ASSERT_TRUE(ids.count("proc.cpu.traced_util{}")) << "series: " << ids.size();
  ASSERT_TRUE(ids.count("proc.cpu.others_util{}"));
  ASSERT_TRUE(ids.count("proc.cpu.runq_wait{}"));
  ASSERT_TRUE(ids.count("proc.cpu.util{pid:" + job_pid + ":python3}"));
  auto samples = r.load_samples();
  auto& traced = samples[ids["proc.cpu.traced_util{}"]].second;
  ASSERT_GE(traced.size(), 2u);
  EXPECT_GT(*std::max_element(traced.begin(), traced.end()), 0.3);
}

// Kernel layer (src/trace/kernel_tracer.cpp, bpf/kernel.bpf.c): known work in forked children and in this
// process (sleep, spin, write+fsync, loopback TCP) must move the in-kernel counters by what was done.
#include <arpa/inet.h>
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "memory_sink.h"
#include "test_util.h"
#include "trace/kernel_tracer.h"

using namespace stackscope;
using namespace std::chrono_literals;

namespace {

int64_t clock_ns(clockid_t c) {
  timespec ts{};
  clock_gettime(c, &ts);
  return ts.tv_sec * 1'000'000'000LL + ts.tv_nsec;
}

// A forked child that waits for a byte on a pipe, runs `work`, writes back one int64 it measured, and exits.
struct Child {
  pid_t pid = -1;
  int go = -1, result = -1;
  template <class Work>
  explicit Child(Work work) {
    int a[2], b[2];
    if (pipe(a) || pipe(b)) return;
    pid = fork();
    if (pid == 0) {
      char c;
      if (read(a[0], &c, 1) != 1) _exit(1);
      int64_t v = work();
      _exit(write(b[1], &v, sizeof v) == sizeof v ? 0 : 1);
    }
    close(a[0]);
    close(b[1]);
    go = a[1];
    result = b[0];
  }
  void start() { [[maybe_unused]] auto n = write(go, "g", 1); }
  int64_t finish() {
    int64_t v = -1;
    [[maybe_unused]] auto n = read(result, &v, sizeof v);
    waitpid(pid, nullptr, 0);
    close(go);
    close(result);
    return v;
  }
};

double last_value(const stackscope::testing::MemorySink& sink, const std::string& name, const std::string& device = "") {
  const SeriesInfo* s = sink.find(name, device);
  if (!s) return -1;
  auto samples = sink.samples_of(s->id);
  return samples.empty() ? -1 : samples.back().value;
}

// Sends `bytes` over a loopback TCP connection and reads them back on the other end.
void loopback_tcp(size_t bytes) {
  int srv = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  ASSERT_EQ(bind(srv, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(listen(srv, 1), 0);
  ASSERT_EQ(getsockname(srv, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  std::thread sender([&] {
    int c = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(c, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) return;
    std::vector<char> buf(64 << 10, 'x');
    for (size_t sent = 0; sent < bytes;) {
      ssize_t n = send(c, buf.data(), std::min(buf.size(), bytes - sent), 0);
      if (n <= 0) break;
      sent += static_cast<size_t>(n);
    }
    close(c);
  });
  int conn = accept(srv, nullptr, nullptr);
  size_t got = 0;
  std::vector<char> buf(64 << 10);
  for (ssize_t n; (n = read(conn, buf.data(), buf.size())) > 0;) got += static_cast<size_t>(n);
  sender.join();
  close(conn);
  close(srv);
  EXPECT_EQ(got, bytes);
}

// Whether `dir` lives on a real block device (not tmpfs/overlay), so fsync must issue block requests.
bool on_block_device(const std::string& dir) {
  struct stat st{};
  if (stat(dir.c_str(), &st) != 0 || major(st.st_dev) == 0) return false;
  return std::filesystem::exists("/sys/dev/block/" + std::to_string(major(st.st_dev)) + ":" +
                                 std::to_string(minor(st.st_dev)));
}

}  // namespace

TEST(KernelTrace, SchedIrqNetAndBlockCountersFollowKnownWork) {
  STACKSCOPE_REQUIRE(geteuid() == 0, "needs root to load eBPF programs");
  constexpr int kSleeps = 10;
  constexpr int64_t kSleepNs = 40'000'000;
  Child sleeper([] {
    int64_t t0 = clock_ns(CLOCK_MONOTONIC);
    for (int i = 0; i < kSleeps; ++i) {
      timespec ts{0, kSleepNs};
      nanosleep(&ts, nullptr);
    }
    return clock_ns(CLOCK_MONOTONIC) - t0;  // wall time asleep (and running, a little)
  });
  Child spinner([] {
    int64_t t0 = clock_ns(CLOCK_MONOTONIC);
    volatile uint64_t x = 0;
    while (clock_ns(CLOCK_MONOTONIC) - t0 < 300'000'000) x = x + 1;
    return clock_ns(CLOCK_PROCESS_CPUTIME_ID);  // what the kernel charged it
  });
  ASSERT_GT(sleeper.pid, 0);
  ASSERT_GT(spinner.pid, 0);

  trace::KernelTracer tracer;
  stackscope::testing::MemorySink sink;
  CollectorOptions opts;
  opts.interval_ms = 10;
  opts.pids = {static_cast<uint32_t>(sleeper.pid), static_cast<uint32_t>(spinner.pid)};
  auto st = tracer.start(sink, opts);
  ASSERT_TRUE(st.running) << st.message;
  std::this_thread::sleep_for(50ms);
  tracer.tick();
  double issued0 = last_value(sink, "kernel.block.issued"), tx0 = last_value(sink, "kernel.net.tx.packets");
  double rx0 = last_value(sink, "kernel.net.rx.packets"), txb0 = last_value(sink, "kernel.net.tx.bytes");
  double irq0 = last_value(sink, "kernel.hardirq.count");
  ASSERT_GE(issued0, 0) << "system series declared on the first tick";

  int64_t t_start = clock_ns(CLOCK_MONOTONIC);
  sleeper.start();
  spinner.start();
  // Block I/O: 4 MiB written and fsynced where the file system sits on a block device.
  std::string dir = on_block_device("/var/tmp") ? "/var/tmp" : "";
  if (!dir.empty()) {
    std::string path = dir + "/stackscope-kernel-test-" + std::to_string(getpid());
    int fd = open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0600);
    ASSERT_GE(fd, 0);
    std::string block(1 << 20, 'k');
    for (int i = 0; i < 4; ++i) ASSERT_EQ(write(fd, block.data(), block.size()), static_cast<ssize_t>(block.size()));
    ASSERT_EQ(fsync(fd), 0);
    close(fd);
    unlink(path.c_str());
  }
  loopback_tcp(4 << 20);
  int64_t slept_ns = sleeper.finish();
  int64_t spin_cpu_ns = spinner.finish();
  int64_t elapsed_ns = clock_ns(CLOCK_MONOTONIC) - t_start;
  std::this_thread::sleep_for(30ms);
  tracer.tick();
  auto stats = tracer.stats();
  tracer.stop();

  std::string sp = "pid" + std::to_string(sleeper.pid), bp = "pid" + std::to_string(spinner.pid);
  double blocked = last_value(sink, "kernel.sched.blocked_time", sp);
  double sleeper_on = last_value(sink, "kernel.sched.oncpu_time", sp);
  // Each sleep is blocked time, charged when the thread runs again; a little of it can be wakeup latency.
  EXPECT_GE(blocked, 0.9 * kSleeps * kSleepNs) << "sleeper blocked " << blocked / 1e6 << " ms";
  EXPECT_LE(blocked, 1.05 * static_cast<double>(slept_ns)) << "at most the wall time it spent sleeping";
  EXPECT_LT(sleeper_on, 0.1 * kSleeps * kSleepNs);
  EXPECT_GE(last_value(sink, "kernel.sched.voluntary_switches", sp), kSleeps);

  double spin_on = last_value(sink, "kernel.sched.oncpu_time", bp);
  double spin_wait = last_value(sink, "kernel.sched.runq_wait_time", bp);
  std::printf("sleeper: blocked %.1f ms of %.1f ms asleep, on-CPU %.2f ms; spinner: on-CPU %.1f ms (kernel says %.1f), "
              "runq wait %.1f ms; block issued %.0f; tx +%.0f packets\n",
              blocked / 1e6, slept_ns / 1e6, sleeper_on / 1e6, spin_on / 1e6, spin_cpu_ns / 1e6, spin_wait / 1e6,
              last_value(sink, "kernel.block.issued") - issued0, last_value(sink, "kernel.net.tx.packets") - tx0);
  EXPECT_NEAR(spin_on, static_cast<double>(spin_cpu_ns), 0.1 * static_cast<double>(spin_cpu_ns))
      << "on-CPU time matches the CPU time the kernel charged";
  EXPECT_LE(spin_on + spin_wait, 1.1 * static_cast<double>(elapsed_ns));
  EXPECT_LT(last_value(sink, "kernel.sched.blocked_time", bp), 0.05 * static_cast<double>(spin_cpu_ns));

  EXPECT_GT(last_value(sink, "kernel.net.tx.packets") - tx0, 0);
  EXPECT_GT(last_value(sink, "kernel.net.rx.packets") - rx0, 0);
  EXPECT_GE(last_value(sink, "kernel.net.tx.bytes") - txb0, 4 << 20) << "loopback carried the 4 MiB";
  EXPECT_GT(last_value(sink, "kernel.softirq.count", "NET_RX"), 0) << "loopback delivery runs in NET_RX";
  if (!dir.empty()) {
    EXPECT_GT(last_value(sink, "kernel.block.issued") - issued0, 0);
    EXPECT_GE(last_value(sink, "kernel.block.issued_bytes"), 4 << 20);
    EXPECT_GT(last_value(sink, "kernel.block.completed"), 0);
    EXPECT_GT(last_value(sink, "kernel.block.latency_time"), 0);
    EXPECT_GT(last_value(sink, "kernel.hardirq.count") - irq0, 0) << "block completions raise device IRQs";
    const SeriesInfo* mx = sink.find("kernel.block.latency_max", "");
    ASSERT_TRUE(mx);
    double longest = 0;
    for (auto& s : sink.samples_of(mx->id)) longest = std::max(longest, s.value);
    EXPECT_GT(longest, 0);
    EXPECT_LT(longest, 10e9);
  } else {
    GTEST_LOG_(INFO) << "/var/tmp is not on a block device: block counters not checked";
  }
  // Series are declared with the subsystems Reveal groups by.
  EXPECT_EQ(sink.find("kernel.net.rx.bytes", "")->subsystem, Subsystem::network);
  EXPECT_EQ(sink.find("kernel.block.issued", "")->subsystem, Subsystem::storage);
  EXPECT_EQ(sink.find("kernel.sched.oncpu_time", sp)->subsystem, Subsystem::cpu);
  EXPECT_EQ(sink.find("kernel.sched.oncpu_time", sp)->kind, SeriesKind::counter);
  // The reading thread ran at ~100 Hz beside the explicit ticks.
  EXPECT_GE(stats.ticks, static_cast<uint64_t>(0.5 * static_cast<double>(elapsed_ns) / 10e6));
}

TEST(KernelTrace, NeedsRootAndSaysSo) {
  // As root (CI) the check runs in a child that first becomes nobody: it ran only for non-root users before.
  auto check = [] {
    trace::KernelTracer tracer;
    stackscope::testing::MemorySink sink;
    auto st = tracer.start(sink, {});
    return !st.running && st.message.find("root") != std::string::npos;
  };
  if (geteuid() != 0) {
    EXPECT_TRUE(check());
    return;
  }
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const bool dropped = ::setgroups(0, nullptr) == 0 && ::setresgid(65534, 65534, 65534) == 0 &&
                         ::setresuid(65534, 65534, 65534) == 0;
    ::_exit(!dropped ? 2 : check() ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "2: could not become nobody; 1: the tracer started or did not name root";
}

TEST(KernelTrace, RecordCliWritesKernelSeriesAndRejectsBadDuty) {
  STACKSCOPE_REQUIRE(geteuid() == 0, "needs root to load eBPF programs");
  TempDir dir;
  std::string rec = dir.file("k.sdb"), out;
  ASSERT_EQ(run_command(std::string(STACKSCOPE_BIN) + " record -q --layers kernel -i 10 -o " + rec +
                            " -- sh -c 'sleep 0.2; sleep 0.2'",
                        &out),
            0)
      << out;
  ASSERT_EQ(run_command(std::string(STACKSCOPE_BIN) + " export " + rec + " --format csv --what samples -q -o " +
                            dir.file("s.csv"),
                        &out),
            0)
      << out;
  std::string csv = read_file(dir.file("s.csv"));
  EXPECT_NE(csv.find("kernel.sched.blocked_time{pid"), std::string::npos) << "per-process series of the command";
  EXPECT_NE(csv.find("kernel.block.latency_max"), std::string::npos);
  EXPECT_NE(csv.find("kernel.net.rx.packets,"), std::string::npos);
  EXPECT_NE(run_command(std::string(STACKSCOPE_BIN) + " record -q --layers python --python-mode capi --python-duty 10s/1s"
                            " -o " + dir.file("bad.sdb") + " -- true",
                        &out),
            0);
  EXPECT_NE(out.find("shorter than the period"), std::string::npos) << out;
}

// kill -9 of a writer mid-recording: the file must open and hold everything committed before the kill.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "store/recording_reader.h"
#include "test_util.h"

using namespace stackscope;

TEST(CrashSafety, KillNineKeepsEverythingCommitted) {
  TempDir dir;
  std::string path = dir.file("crash.sdb");
  std::string prog = std::string(STACKSCOPE_BUILD_DIR) + "/tests/progs/prog_store_writer";
  FILE* p = ::popen((prog + " " + path + " & echo pid $!").c_str(), "r");
  ASSERT_NE(p, nullptr);
  long pid = 0, committed = 0;
  char line[256];
  while (std::fgets(line, sizeof line, p)) {
    long v;
    if (std::sscanf(line, "pid %ld", &v) == 1) pid = v;
    if (std::sscanf(line, "committed %ld", &v) == 1) committed = v;
    if (committed >= 20000) break;
  }
  ASSERT_GT(pid, 0);
  ::kill(static_cast<pid_t>(pid), SIGKILL);
  ::pclose(p);
  ASSERT_GE(committed, 20000);

  RecordingReader r(path);
  auto s = r.summary();
  EXPECT_FALSE(s.closed_cleanly);
  long n = 0, last_seq = -1;
  bool in_order = true;
  r.for_each_event({}, [&](const Event& e) {
    long seq = e.arg_int("seq", -1);
    in_order &= seq == last_seq + 1;
    last_seq = seq;
    ++n;
  });
  EXPECT_TRUE(in_order);
  EXPECT_GE(n, committed);
  auto samples = r.load_samples();
  ASSERT_EQ(samples.size(), 1u);
  EXPECT_GE(static_cast<long>(samples.begin()->second.first.size()), committed);
}

TEST(CrashSafety, KillNineLosesAtMostOneSecond) {
  TempDir dir;
  std::string path = dir.file("crash2.sdb");
  std::string prog = std::string(STACKSCOPE_BUILD_DIR) + "/tests/progs/prog_store_writer";
  FILE* p = ::popen((prog + " " + path + " --no-explicit-flush & echo pid $!").c_str(), "r");
  ASSERT_NE(p, nullptr);
  long pid = 0;
  char line[256];
  while (std::fgets(line, sizeof line, p)) {
    long v;
    if (std::sscanf(line, "pid %ld", &v) == 1) pid = v;
    if (std::string(line).rfind("started", 0) == 0) break;
  }
  ASSERT_GT(pid, 0);
  ::usleep(2'300'000);
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  int64_t kill_ns = ts.tv_sec * 1'000'000'000LL + ts.tv_nsec;
  ::kill(static_cast<pid_t>(pid), SIGKILL);
  ::pclose(p);

  RecordingReader r(path);
  int64_t last = 0;
  long n = 0;
  r.for_each_event({}, [&](const Event& e) {
    last = std::max(last, e.start_ns);
    ++n;
  });
  EXPECT_GT(n, 1000);
  EXPECT_GE(last, kill_ns - 1'000'000'000LL) << "lost more than 1 s of events";
}

// A fatal signal in the recorder (a bug) says where, in which thread, and where the recording is; the recording
// still opens.
TEST(CrashSafety, FatalSignalReportsThreadBacktraceAndRecording) {
  TempDir dir;
  const std::string rec = dir.file("fatal.sdb"), err = dir.file("fatal.err");
  const std::string bin = STACKSCOPE_BIN;
  FILE* p = ::popen((bin + " record -q --layers host -o " + rec + " -- sleep 30 2> " + err + " & echo pid $!").c_str(),
                    "r");
  ASSERT_NE(p, nullptr);
  long pid = 0;
  ASSERT_EQ(std::fscanf(p, "pid %ld", &pid), 1);
  ::pclose(p);
  ::usleep(2'500'000);
  std::string job;  // the recorder's child, left running by its death
  run_command("pgrep -P " + std::to_string(pid), &job);
  ASSERT_EQ(::kill(static_cast<pid_t>(pid), SIGSEGV), 0);
  for (int i = 0; i < 100 && ::kill(static_cast<pid_t>(pid), 0) == 0; ++i) ::usleep(50'000);
  if (long child = std::atol(job.c_str()); child > 0) ::kill(static_cast<pid_t>(child), SIGKILL);
  const std::string text = read_file(err);
  EXPECT_NE(text.find("fatal signal SEGV in thread stackscope"), std::string::npos) << text;
  EXPECT_NE(text.find("stackscope(+0x"), std::string::npos) << "no backtrace frame of the binary:\n" << text;
  EXPECT_NE(text.find("the recording so far is in " + rec), std::string::npos) << text;
  RecordingReader r(rec);
  EXPECT_GT(r.summary().samples, 0u);
}

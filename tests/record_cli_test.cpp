// `stackscope record` and `info` end to end: exit status pass-through, signals, kill -9, non-root, bad input,
// disk full, 10 ms sampling.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/mount.h>
#include <unistd.h>

#include "store/recording_reader.h"
#include "test_util.h"

using namespace stackscope;

namespace {
const std::string kBin = STACKSCOPE_BIN;

nlohmann::json info_json(const std::string& path) {
  std::string out;
  EXPECT_EQ(run_command(kBin + " info --json " + path + " 2>/dev/null", &out), 0) << out;
  return nlohmann::json::parse(out, nullptr, false);
}
}  // namespace

TEST(RecordCli, PassesTheJobsExitStatusThrough) {
  TempDir dir;
  std::string rec = dir.file("a.sdb"), out;
  EXPECT_EQ(run_command(kBin + " record -q --layers host -o " + rec + " -- sh -c 'sleep 1; exit 7'", &out), 7) << out;
  auto j = info_json(rec);
  EXPECT_TRUE(j["closed_cleanly"].get<bool>());
  EXPECT_GT(j["samples"].get<int>(), 100);
  EXPECT_GT(j["series_by_subsystem"]["cpu"].get<int>(), 0);
  // The same path again: --force (without it an existing recording is refused, safe_outputs_test.cpp).
  EXPECT_EQ(run_command(kBin + " record -q --force --layers host -o " + rec + " -- sh -c 'kill -TERM $$'", &out), 128 + 15);
  EXPECT_EQ(run_command(kBin + " record -q --force --layers host -o " + rec + " -- /nonexistent/prog", &out), 127);
  EXPECT_NE(out.find("cannot run '/nonexistent/prog'"), std::string::npos) << out;
}

TEST(RecordCli, SigintFlushesAndCloses) {
  TempDir dir;
  std::string rec = dir.file("b.sdb"), out;
  int rc = run_command("(" + kBin + " record -q --layers host -o " + rec + " & p=$!; sleep 1.5; kill -INT $p; wait $p)", &out);
  EXPECT_EQ(rc, 0) << out;
  auto j = info_json(rec);
  EXPECT_TRUE(j["closed_cleanly"].get<bool>());
  EXPECT_GT(j["duration_s"].get<double>(), 1.0);
  // The recorder's own cost is stored, by thread: the host sampler's thread ran for the whole recording.
  auto cost = nlohmann::json::parse(j["meta"].value("recorder_cpu", "{}"));
  EXPECT_GT(cost.value("wall_s", 0.0), 1.0) << cost;
  EXPECT_GT(cost.value("cpu_s", 0.0), 0.0) << cost;
  ASSERT_TRUE(cost.contains("threads")) << cost;
  EXPECT_TRUE(cost["threads"].contains("ss-procfs")) << cost;
  double threads_s = 0;
  for (auto& [name, s] : cost["threads"].items()) threads_s += s.get<double>();
  EXPECT_LE(threads_s, cost["cpu_s"].get<double>() + 0.02) << "live threads cannot cost more than the process";
  EXPECT_EQ(run_command(kBin + " info " + rec, &out), 0);
  EXPECT_NE(out.find("recorder  "), std::string::npos) << out;
}

TEST(RecordCli, KillNineKeepsTheRecording) {
  TempDir dir;
  std::string rec = dir.file("c.sdb"), out;
  int rc = run_command("(" + kBin + " record -q --layers host -o " + rec + " & p=$!; sleep 2.5; kill -KILL $p; wait $p)", &out);
  EXPECT_EQ(rc, 128 + 9) << out;
  auto j = info_json(rec);
  EXPECT_FALSE(j["closed_cleanly"].get<bool>());
  // Samples up to the last flush (at most 250 ms before the kill) survive.
  EXPECT_GT(j["duration_s"].get<double>(), 1.2);
  EXPECT_GT(j["samples"].get<int>(), 1000);
}

TEST(RecordCli, TenMillisecondIntervalWorks) {
  TempDir dir;
  std::string rec = dir.file("d.sdb"), out;
  ASSERT_EQ(run_command(kBin + " record -q --layers host --interval 10 --duration 1.5 -o " + rec, &out), 0) << out;
  RecordingReader r(rec);
  size_t max_n = 0;
  for (auto& [id, tv] : r.load_samples()) max_n = std::max(max_n, tv.first.size());
  EXPECT_GT(max_n, 90u);  // ~150 ticks at 10 ms; a loaded CI machine may miss some
}

TEST(RecordCli, BadInputGetsAClearErrorAndNonZeroExit) {
  TempDir dir;
  std::string out;
  EXPECT_NE(run_command(kBin + " record --interval 0 -o " + dir.file("x.sdb"), &out), 0);
  EXPECT_NE(out.find("--interval"), std::string::npos) << out;
  EXPECT_NE(run_command(kBin + " record --layers host,bogus -o " + dir.file("x.sdb"), &out), 0);
  EXPECT_NE(out.find("unknown layer 'bogus'"), std::string::npos) << out;
  EXPECT_NE(run_command(kBin + " record --pid 999999999 -o " + dir.file("x.sdb"), &out), 0);
  write_file(dir.file("junk.sdb"), "SQLite format 3" + std::string(4000, '\x07'));
  EXPECT_NE(run_command(kBin + " info " + dir.file("junk.sdb"), &out), 0);
  EXPECT_NE(out.find("junk.sdb"), std::string::npos) << out;
  EXPECT_EQ(out.find("terminate"), std::string::npos) << out;
  EXPECT_NE(run_command(kBin + " info " + dir.file("missing.sdb"), &out), 0);
  EXPECT_NE(out.find("no such file"), std::string::npos) << out;
  // A truncated copy of a real recording.
  std::string rec = dir.file("real.sdb");
  ASSERT_EQ(run_command(kBin + " record -q --layers host --duration 0.5 -o " + rec, &out), 0) << out;
  std::string bytes = read_file(rec);
  write_file(dir.file("trunc.sdb"), bytes.substr(0, bytes.size() / 3));
  int rc = run_command(kBin + " info " + dir.file("trunc.sdb"), &out);
  EXPECT_TRUE(rc == 0 || out.find("trunc.sdb") != std::string::npos) << out;
  EXPECT_LT(rc, 128) << "crashed: " << out;
}

TEST(RecordCli, NonRootRecordsWhatItCanAndNamesTheRest) {
  STACKSCOPE_REQUIRE(::geteuid() == 0, "needs root to drop to another user");
  STACKSCOPE_REQUIRE(run_command("command -v setpriv") == 0, "setpriv (util-linux) missing");
  TempDir dir;
  ::chmod(dir.path().c_str(), 0777);
  std::string rec = dir.file("nr.sdb"), out;
  int rc = run_command("setpriv --reuid=65534 --regid=65534 --clear-groups " + kBin +
                           " record -q --layers host,cuda,torch --duration 1 -o " + rec, &out);
  EXPECT_EQ(rc, 0) << out;
#ifdef STACKSCOPE_HAVE_BPF
  EXPECT_NE(out.find("cuda,torch need root"), std::string::npos) << out;
#else
  EXPECT_NE(out.find("layers cuda,torch are not available in this build"), std::string::npos) << out;
#endif
  auto j = info_json(rec);
  EXPECT_GT(j["samples"].get<int>(), 0);
}

TEST(RecordCli, DiskFullStopsCleanlyAndKeepsWhatWasWritten) {
  STACKSCOPE_REQUIRE(::geteuid() == 0, "needs root to mount a tmpfs");
  TempDir dir;
  ASSERT_EQ(::mount("tmpfs", dir.path().c_str(), "tmpfs", 0, "size=400k"), 0);
  std::string rec = dir.file("full.sdb"), out;
  int rc = run_command(kBin + " record -q --layers host --interval 5 --duration 60 -o " + rec, &out);
  EXPECT_EQ(rc, 3) << out;
  EXPECT_NE(out.find("keeps everything written before the failure"), std::string::npos) << out;
  RecordingReader r(rec);
  EXPECT_GT(r.summary().samples, 0u);
  ::umount2(dir.path().c_str(), MNT_DETACH);
}

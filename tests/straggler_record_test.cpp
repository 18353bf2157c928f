// Stragglers from `stackscope record` of real multi-rank jobs (what users run, no profiler): Debian's torch 1.13,
// DistributedDataParallel over gloo on CPU, ranks started as torchrun starts them (RANK, LOCAL_RANK, WORLD_SIZE in
// their environment; eval/stragglers/ddp_job.py). The recording holds Python stack samples (on-CPU and
// off-CPU), no collective calls: steps come from the cadence of the ranks' waits, the verdict from who waited.
// Needs root (eBPF) and python3-torch; each test records one ~20-40 s job.
#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "test_util.h"

namespace {

const std::string kBin = STACKSCOPE_BIN;
const std::string kJob = std::string(STACKSCOPE_SOURCE_DIR) + "/eval/stragglers/ddp_job.py";

bool have_gloo() {
  return run_command("/usr/bin/python3 -c 'import torch.distributed as d; assert d.is_gloo_available()'") == 0;
}

// Records the job and returns `stragglers --json` on the recording.
nlohmann::json record_and_analyse(const TempDir& dir, const std::string& job_args, int port) {
  const std::string rec = dir.file("job.sdb");
  std::string out;
  const std::string cmd = kBin + " record -q --layers python,host -o " + rec + " -- /usr/bin/python3 " + kJob + " " +
                          job_args + " --port " + std::to_string(port) + "\n";
  EXPECT_EQ(run_prioritised(dir, cmd, &out), 0) << out;
  EXPECT_EQ(run_command(kBin + " stragglers --json " + rec + " 2>&1", &out), 0) << out;
  auto j = nlohmann::json::parse(out, nullptr, false);
  EXPECT_TRUE(j.is_object()) << out;
  std::string text;
  run_command(kBin + " stragglers " + rec, &text);
  std::printf("%s", text.c_str());
  return j;
}

void expect_steps(const nlohmann::json& j, int steps) {
  EXPECT_EQ(j["steps"]["source"], "sync-cadence") << j["steps"].dump();
  const int found = j["steps"]["found"].get<int>();
  // The target is 1 % (met in eval/stragglers, docs/benchmarks/stragglers.md); on a loaded 2-core CI machine the 40 ms
  // steps of two gloo ranks sharing the cores sometimes merge, so the test allows 3 %.
  EXPECT_LE(std::abs(found - steps), std::max(1, steps * 3 / 100)) << "found " << found << " of " << steps;
}

}  // namespace

TEST(StragglerRecord, SlowComputeRankIsNamedByRankWithComputeCause) {
  STACKSCOPE_REQUIRE(::geteuid() == 0, "needs root (eBPF layers)");
  STACKSCOPE_REQUIRE(have_gloo(), "no torch with gloo at /usr/bin/python3");
  TempDir dir;
  const auto j = record_and_analyse(dir, "--ranks 2 --steps 120 --slow-rank 1 --fault compute --delay-ms 15", 29641);
  ASSERT_TRUE(j.is_object());
  expect_steps(j, 120);
  const auto& v = j["verdict"];
  EXPECT_EQ(v["kind"], "one-straggler") << v.dump(2);
  ASSERT_EQ(v["workers"].size(), 1u) << v.dump(2);
  EXPECT_NE(v["workers"][0].get<std::string>().find(":rank1"), std::string::npos) << v.dump(2);
  EXPECT_EQ(v["cause"], "compute") << v.dump(2);
  EXPECT_GT(v["confidence"].get<double>(), 0.5);
  EXPECT_LE(v["excess_ms"].get<double>(), v["recorded_ms"].get<double>());
  EXPECT_EQ(j["stragglers"][0], v["workers"][0]);
  // Named by rank from the recorder's process notes, not by pid.
  for (auto& w : j["workers"]) EXPECT_TRUE(w.contains("rank")) << w.dump();
}

TEST(StragglerRecord, LateHostRankIsNamedWithHostCause) {
  STACKSCOPE_REQUIRE(::geteuid() == 0, "needs root (eBPF layers)");
  STACKSCOPE_REQUIRE(have_gloo(), "no torch with gloo at /usr/bin/python3");
  TempDir dir;
  const auto j = record_and_analyse(dir, "--ranks 2 --steps 120 --slow-rank 0 --fault host --delay-ms 15", 29643);
  ASSERT_TRUE(j.is_object());
  expect_steps(j, 120);
  const auto& v = j["verdict"];
  EXPECT_EQ(v["kind"], "one-straggler") << v.dump(2);
  ASSERT_EQ(v["workers"].size(), 1u) << v.dump(2);
  EXPECT_NE(v["workers"][0].get<std::string>().find(":rank0"), std::string::npos) << v.dump(2);
  EXPECT_EQ(v["cause"], "host") << v.dump(2);
  EXPECT_NE(v["cause_detail"].get<std::string>().find("train_step"), std::string::npos) << v.dump(2);
}

// A job with no fault is not always a healthy one: on a shared VM one vCPU can run slower than the other, and the
// rank on it then needs more CPU time for the same step (seen here unrecorded: 22 against 34 ms per step, in
// forward and backward alike; and in CI, where this test once named rank 0 with 8.5 ms per step more CPU). The
// ranks' own clocks (ddp_job.py --clock-log: process CPU and run-queue time over the steps) are the ground truth:
// where they agree the verdict must be "none"; where the machine made one rank slower, a verdict that names a rank
// must name that one.
TEST(StragglerRecord, HealthyRunIsNone) {
  STACKSCOPE_REQUIRE(::geteuid() == 0, "needs root (eBPF layers)");
  STACKSCOPE_REQUIRE(have_gloo(), "no torch with gloo at /usr/bin/python3");
  TempDir dir;
  const auto j = record_and_analyse(dir, "--ranks 2 --steps 120 --fault none --clock-log " + dir.file("clock"), 29645);
  ASSERT_TRUE(j.is_object());
  expect_steps(j, 120);
  double own[2] = {0, 0}, step_s = 0;
  for (int r = 0; r < 2; ++r) {
    const auto c = nlohmann::json::parse(read_file(dir.file("clock.rank" + std::to_string(r))), nullptr, false);
    ASSERT_TRUE(c.is_object()) << "rank " << r << " wrote no clocks";
    const double steps = c["steps"].get<double>();
    own[r] = (c["cpu_s"].get<double>() + c["run_delay_s"].get<double>()) / steps;
    step_s = std::max(step_s, c["wall_s"].get<double>() / steps);
  }
  const double gap = std::abs(own[0] - own[1]);
  const int slower = own[0] > own[1] ? 0 : 1;
  std::printf("ranks' own CPU + run-queue time per step: %.2f and %.2f ms, step %.2f ms\n", own[0] * 1e3, own[1] * 1e3,
              step_s * 1e3);
  const auto& v = j["verdict"];
  if (gap < 0.05 * step_s) {  // half the verdict's 10 % bar: the machine treated the ranks alike
    EXPECT_EQ(v["kind"], "none") << v.dump(2);
    EXPECT_EQ(v["excess_ms"].get<double>(), 0.0);
  } else if (v["kind"] != "none") {
    std::printf("the machine made rank %d slower by %.2f ms per step: not a healthy run\n", slower, gap * 1e3);
    ASSERT_EQ(v["workers"].size(), 1u) << v.dump(2);
    EXPECT_NE(v["workers"][0].get<std::string>().find(":rank" + std::to_string(slower)), std::string::npos) << v.dump(2);
  }
}

TEST(StragglerRecord, ParquetAndUnknownInputsGetAClearError) {
  TempDir dir;
  write_file(dir.file("t.parquet"), std::string("PAR1\x15\x04\x15\x10", 8) + "junk");
  write_file(dir.file("t.bin"), "\x01\x02\x03 not a trace");
  std::string out;
  EXPECT_NE(run_command(kBin + " stragglers " + dir.file("t.parquet") + " 2>&1", &out), 0);
  EXPECT_NE(out.find("Parquet"), std::string::npos) << out;
  EXPECT_NE(out.find("supported"), std::string::npos) << out;
  EXPECT_EQ(out.find("SQL"), std::string::npos) << out;
  EXPECT_NE(run_command(kBin + " stragglers " + dir.file("t.bin") + " 2>&1", &out), 0);
  EXPECT_NE(out.find("supported"), std::string::npos) << out;
}

// A whole-job Chrome trace: one pid per rank, categories of its own. Rank 2 runs "compute" 30 ms instead of
// 10 ms; the others wait for it in "allreduce".
TEST(StragglerRecord, WholeJobChromeTraceWithOnePidPerRank) {
  TempDir dir;
  nlohmann::json ev = nlohmann::json::array();
  for (int r = 0; r < 4; ++r) {
    ev.push_back({{"ph", "M"}, {"pid", 100 + r}, {"name", "process_name"}, {"args", {{"name", "Rank " + std::to_string(r)}}}});
    double t = 0;
    for (int s = 0; s < 40; ++s) {
      const double slow = 30000, fast = 10000;
      const double mine = r == 2 ? slow : fast;
      ev.push_back({{"ph", "X"}, {"pid", 100 + r}, {"tid", 1}, {"cat", "train"}, {"name", "compute"}, {"ts", t}, {"dur", mine}});
      ev.push_back({{"ph", "X"}, {"pid", 100 + r}, {"tid", 1}, {"cat", "comm"}, {"name", "allreduce"}, {"ts", t + mine},
                    {"dur", slow - mine + 1000 + (s % 3) * 10}});
      t += slow + 1500;
    }
  }
  write_file(dir.file("job.json"), nlohmann::json{{"traceEvents", ev}}.dump());
  std::string out;
  ASSERT_EQ(run_command(kBin + " stragglers --json " + dir.file("job.json") + " 2>&1", &out), 0) << out;
  const auto j = nlohmann::json::parse(out);
  ASSERT_EQ(j["workers"].size(), 4u) << out.substr(0, 2000);
  EXPECT_EQ(j["verdict"]["kind"], "one-straggler") << j["verdict"].dump(2);
  EXPECT_EQ(j["verdict"]["workers"][0], "rank2") << j["verdict"].dump(2);
  EXPECT_EQ(j["stragglers"][0], "rank2");
}

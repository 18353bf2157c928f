// `stackscope analyze` (default detector: incidents) end to end on real recordings of the bundled CPU training
// workload: a healthy run says "no incidents", and the same run with CPU hogs started in its middle has exactly
// one cpu_interference incident overlapping the hogs. Needs root (the python and kernel layers are eBPF) and
// Debian's python3-torch. Both runs are niced up (-10, the hogs too) so that other work on a shared machine
// does not slow the job more than the planted hogs do: each run is its own session (setsid) whose autogroup
// nice is raised (with autogroup scheduling, plain nice only orders processes within one session).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <algorithm>
#include <sstream>

#include "store/recording_reader.h"
#include "test_util.h"

namespace {

const std::string kBin = STACKSCOPE_BIN;
const std::string kWorkload = std::string(STACKSCOPE_SOURCE_DIR) + "/workloads/cpu_train.py";

bool have_torch() { return run_command("/usr/bin/python3 -c 'import torch'") == 0; }

nlohmann::json analyze_json(const std::string& rec) {
  std::string out;
  EXPECT_EQ(run_command(kBin + " analyze " + rec + " --json", &out), 0) << out;
  return nlohmann::json::parse(out.substr(out.find('{')));
}

std::string record_cmd(const std::string& rec, int seconds) {
  return kBin + " record -q --layers host,python,kernel -o " + rec + " -- /usr/bin/python3 " + kWorkload +
         " --seconds " + std::to_string(seconds);
}


}  // namespace

TEST(IncidentCli, HealthyCpuTrainingHasNoIncidents) {
  STACKSCOPE_REQUIRE(::geteuid() == 0, "needs root (eBPF layers)");
  STACKSCOPE_REQUIRE(have_torch(), "python3-torch missing");
  TempDir dir;
  const std::string rec = dir.file("healthy.sdb");
  std::string out;
  ASSERT_EQ(run_prioritised(dir, record_cmd(rec, 16) + "\n", &out), 0) << out;
  ASSERT_EQ(run_command(kBin + " analyze " + rec, &out), 0) << out;
  EXPECT_NE(out.find("no incidents"), std::string::npos) << out;
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;  // one line
  const auto j = analyze_json(rec);
  EXPECT_EQ(j["schema"], "stackscope.incidents/1");
  ASSERT_EQ(j["recordings"].size(), 1u);
  const auto& r = j["recordings"][0];
  EXPECT_TRUE(r["healthy"].get<bool>()) << r.dump(2);
  EXPECT_TRUE(r["incidents"].empty());
  EXPECT_FALSE(r["job"]["progress_metric"].is_null()) << r["job"].dump();
  EXPECT_GT(r["seconds"].get<double>(), 15);
}

TEST(IncidentCli, CpuHogsInTheMiddleAreOneCpuInterferenceIncident) {
  STACKSCOPE_REQUIRE(::geteuid() == 0, "needs root (eBPF layers)");
  STACKSCOPE_REQUIRE(have_torch(), "python3-torch missing");
  TempDir dir;
  const std::string rec = dir.file("hogged.sdb"), times = dir.file("hog_times");
  // Three busy loops named "cpuhog" (prctl PR_SET_NAME), started 8 s into the run for 10 s, outside the
  // recorded command (so they are not the job), at the job's priority; each writes its CLOCK_MONOTONIC span.
  write_file(dir.file("hog.py"),
             "import ctypes, time\n"
             "ctypes.CDLL(None).prctl(15, b'cpuhog', 0, 0, 0)\n"
             "t0 = time.monotonic_ns()\n"
             "while time.monotonic_ns() - t0 < 10_000_000_000: pass\n"
             "open('" + times + "', 'a').write(f'{t0} {time.monotonic_ns()}\\n')\n");
  std::string out;
  ASSERT_EQ(run_prioritised(dir,
                            "(sleep 8; for i in 1 2 3; do /usr/bin/python3 " + dir.file("hog.py") +
                                " & done; wait) &\n" + record_cmd(rec, 24) + "\nrc=$?\nwait\nexit $rc\n",
                            &out),
            0)
      << out;
  int64_t hog_from = INT64_MAX, hog_to = 0;
  {
    std::istringstream in(read_file(times));
    int64_t a, b;
    while (in >> a >> b) {
      hog_from = std::min(hog_from, a);
      hog_to = std::max(hog_to, b);
    }
  }
  ASSERT_LT(hog_from, hog_to) << "the hogs did not run";
  const auto j = analyze_json(rec);
  const auto& r = j["recordings"][0];
  EXPECT_FALSE(r["healthy"].get<bool>()) << r.dump(2);
  ASSERT_EQ(r["incidents"].size(), 1u) << r.dump(2);
  const auto& inc = r["incidents"][0];
  EXPECT_EQ(inc["cause"]["class"], "cpu_interference") << inc.dump(2);
  EXPECT_LT(inc["start_ns"].get<int64_t>(), hog_to) << inc.dump(2);
  EXPECT_GT(inc["end_ns"].get<int64_t>(), hog_from) << inc.dump(2);
  EXPECT_LE(inc["impact_s"].get<double>(), inc["end_s"].get<double>() - inc["start_s"].get<double>() + 1e-9);
  // Where the recorder writes the per-process CPU series (contract section 2, branch culprits), the culprit is
  // named: one of the hogs.
  const stackscope::RecordingReader reader(rec);
  const bool per_process = std::any_of(reader.series().begin(), reader.series().end(),
                                       [](const auto& s) { return s.name == "proc.cpu.util"; });
  if (per_process) {
    ASSERT_FALSE(inc["cause"]["culprits"].empty()) << inc.dump(2);
    EXPECT_EQ(inc["cause"]["culprits"][0]["name"], "cpuhog") << inc.dump(2);
  }
  // Stored back as a finding of detector "incident".
  const auto findings = reader.findings();
  EXPECT_TRUE(std::any_of(findings.begin(), findings.end(), [](const auto& f) { return f.detector == "incident"; }));
}

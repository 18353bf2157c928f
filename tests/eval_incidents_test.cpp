// Incident benchmark v2 (eval/incidents): the scorer's unit tests on hand-written JSON, and the CPU smoke run of
// the whole harness (a real CNN on Debian's torch, two injected episodes, `stackscope record` and `analyze --json`
// with their defaults, then the scorer). The smoke run needs root (the recorder's eBPF layers) and torch.
#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <vector>

#include "test_util.h"

namespace {

const std::string kSource = STACKSCOPE_SOURCE_DIR;


}  // namespace

TEST(EvalIncidents, ScorerAndScheduleUnitTests) {
  std::string out;
  const int rc = run_command("cd " + kSource + " && /usr/bin/python3 -m unittest discover -s eval/incidents -p 'test_*.py'",
                             &out);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("OK"), std::string::npos) << out;
}

TEST(EvalIncidents, CpuSmokeRunInjectsTwoEpisodesAndScoresOrSaysWhyNot) {
  STACKSCOPE_REQUIRE(::geteuid() == 0, "the recorder's eBPF layers need root");
  STACKSCOPE_REQUIRE(run_command("/usr/bin/python3 -c 'import torch'") == 0, "no torch at /usr/bin/python3");
  TempDir dir;
  std::string out;
  const int rc = run_command("cd " + kSource + " && PYTHON=/usr/bin/python3 DATA_DIR=/var/tmp/stackscope-v2-test " +
                                 "timeout 170 eval/incidents/run_v2.sh " + STACKSCOPE_BIN + " " + dir.path() +
                                 " --cpu-smoke",
                             &out);
  // 0: scored. 2: recorded and analysed, but this stackscope's analyze has no incidents yet (and says so).
  ASSERT_TRUE(rc == 0 || rc == 2) << out;
  if (rc == 2) {
    EXPECT_NE(out.find("no \"incidents\""), std::string::npos) << out;
  }

  const auto log = json_lines(dir.file("cnn_s7.faults.jsonl"));
  ASSERT_GE(log.size(), 4u) << read_file(dir.file("cnn_s7.faults.jsonl"));
  EXPECT_EQ(log.front()["kind"], "meta");
  EXPECT_EQ(log.back()["kind"], "end");
  std::set<std::string> classes;
  for (const auto& line : log) {
    if (!line.contains("class")) continue;
    classes.insert(line["class"].get<std::string>());
    EXPECT_GT(line["end_ns"].get<int64_t>() - line["start_ns"].get<int64_t>(), 9'000'000'000LL) << line;
    // The injection hurt the job: its steps were slower during the episode than in the stretch before.
    EXPECT_GT(line["params"]["slowdown"].get<double>(), 1.2) << line;
  }
  EXPECT_EQ(classes, (std::set<std::string>{"cpu_interference", "host_stall"}));
  for (const auto& line : log) {
    if (line.value("class", "") == "cpu_interference") {
      EXPECT_EQ(line["culprits"][0]["name"], "ss_cpuhog") << line;
    }
  }
  // The analysis is whatever `analyze --json` printed, as JSON.
  EXPECT_TRUE(nlohmann::json::accept(read_file(dir.file("cnn_s7.analysis.json"))));
  if (rc == 0) {
    const auto score = nlohmann::json::parse(read_file(dir.file("score.json")));
    EXPECT_EQ(score["overall"]["episodes"], 2);
  }
}

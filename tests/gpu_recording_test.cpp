// A real recording from the GPU machines (2 H200s, a 2-rank DDP CNN under `record --detect`, two injected
// faults: another process computing on GPU 0, then packet loss on NCCL's sockets; tests/data/gpu/README.md):
// what the CPU CI can still check of the GPU path. The engine must find both episodes, name the GPU culprit
// process, report nothing else, and the report and Perfetto export must carry them.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "test_util.h"

namespace {

const std::string kBin = STACKSCOPE_BIN;
const std::string kData = std::string(STACKSCOPE_SOURCE_DIR) + "/tests/data/gpu/h200x2_cnn_ddp_s24";

struct Fault {
  std::string cls;
  int64_t start_ns = 0, end_ns = 0;
  int64_t culprit_pid = 0;
};

std::vector<Fault> faults() {
  std::vector<Fault> out;
  std::ifstream in(kData + ".faults.jsonl");
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (!j.contains("fault")) continue;
    Fault f{j["class"], j["start_ns"], j["end_ns"]};
    for (const auto& c : j["culprits"])
      if (c.contains("pid")) f.culprit_pid = c["pid"];
    out.push_back(f);
  }
  return out;
}

std::string unpacked(const TempDir& dir) {
  const std::string rec = dir.file("gpu.sdb");
  EXPECT_EQ(run_command("xz -dc " + kData + ".sdb.xz > " + rec), 0);
  return rec;
}

}  // namespace

TEST(GpuRecording, BothEpisodesFoundWithTheGpuCulpritAndNothingElse) {
  TempDir dir;
  const std::string rec = unpacked(dir);
  std::string out;
  ASSERT_EQ(run_command(kBin + " analyze --no-store --json " + rec + " 2>/dev/null", &out), 0) << out;
  const auto j = nlohmann::json::parse(out.substr(out.find('{')));
  const auto& incidents = j["recordings"][0]["incidents"];
  const auto fs = faults();
  ASSERT_EQ(fs.size(), 2u);
  std::vector<int> found(fs.size(), 0);
  for (const auto& inc : incidents) {
    const int64_t s = inc["start_ns"], e = inc["end_ns"];
    bool inside = false;
    for (size_t i = 0; i < fs.size(); ++i) {
      if (s >= fs[i].end_ns || e <= fs[i].start_ns) continue;
      inside = true;
      ++found[i];
      if (fs[i].cls == "gpu_contention") {
        EXPECT_EQ(inc["cause"]["class"], "gpu_contention") << inc.dump();
        ASSERT_FALSE(inc["cause"]["culprits"].empty()) << inc.dump();
        EXPECT_EQ(inc["cause"]["culprits"][0]["pid"], fs[i].culprit_pid) << inc.dump();
      } else {
        // Packet loss on NCCL's sockets: the network (its retransmissions are the evidence; the fault log's class,
        // relabelled from collective_slowdown, see eval/incidents/schedule.py CLASS_OF_KIND).
        EXPECT_EQ(fs[i].cls, "network");
        EXPECT_EQ(inc["cause"]["class"], "network") << inc.dump();
        for (const auto& c : inc["cause"]["culprits"]) EXPECT_NE(c["name"], "kernel") << "not a link: " << inc.dump();
      }
    }
    EXPECT_TRUE(inside) << "an incident outside every injected episode: " << inc.dump();
  }
  for (size_t i = 0; i < fs.size(); ++i) EXPECT_EQ(found[i], 1) << fs[i].cls << ": one incident per episode";
}

// `record --detect`'s engine replayed on the recording (analyze --online-log: its passes window by window, as live):
// the operator is told of both episodes within 5 s of their onsets, and of nothing else. Before, the job's start-up
// (imports, process group, cuDNN autotuning: 7-24 s, no training step yet) was judged on its Python samples online
// and told as two host stalls; offline those windows were already the start-up.
TEST(GpuRecording, OnlineTellsBothEpisodesWithinFiveSecondsAndNothingElse) {
  TempDir dir;
  const std::string rec = unpacked(dir), log = dir.file("online.jsonl");
  std::string out;
  ASSERT_EQ(run_command(kBin + " analyze --no-store --online-log " + log + " " + rec + " 2>&1", &out), 0) << out;
  const auto fs = faults();
  ASSERT_EQ(fs.size(), 2u);
  const auto lines = json_lines(log);
  std::set<int> withdrawn;  // the job's end, seen as a drop while it happened (allowed: not an incident)
  for (const auto& l : lines)
    if (l.value("online", "") == "withdrawn") withdrawn.insert(l.value("id", 0));
  std::vector<double> detection_s(fs.size(), 1e9);
  constexpr int64_t kSlack = 2'000'000'000;
  for (const auto& l : lines) {
    if (withdrawn.count(l.value("id", 0))) continue;
    const int64_t s = l["start_ns"], e = l["end_ns"];
    const double origin_ns = static_cast<double>(s) - l["start_s"].get<double>() * 1e9;
    bool inside = false;
    for (size_t i = 0; i < fs.size(); ++i) {
      if (s - kSlack >= fs[i].end_ns || e + kSlack <= fs[i].start_ns) continue;
      inside = true;
      const double onset_s = (static_cast<double>(fs[i].start_ns) - origin_ns) * 1e-9;
      detection_s[i] = std::min(detection_s[i], l["detected_at_s"].get<double>() - onset_s);
    }
    EXPECT_TRUE(inside) << "told online outside every injected episode: " << l.dump();
  }
  for (size_t i = 0; i < fs.size(); ++i) EXPECT_LE(detection_s[i], 5.0) << fs[i].cls << " detected online";
}

TEST(GpuRecording, ReportShowsTheIncidentsWithPlots) {
  TempDir dir;
  const std::string rec = unpacked(dir), html = dir.file("report.html");
  std::string log;
  ASSERT_EQ(run_command(kBin + " report " + rec + " -o " + html, &log), 0) << log;
  const std::string page = read_file(html);
  EXPECT_NE(page.find("2 incidents"), std::string::npos);
  EXPECT_NE(page.find("gpu_contention"), std::string::npos);
  EXPECT_NE(page.find("python3 (pid 850)"), std::string::npos) << "the culprit, named";
  EXPECT_NE(page.find("2x NVIDIA H200"), std::string::npos);
  size_t plots = 0;
  for (size_t at = 0; (at = page.find("<svg", at)) != std::string::npos; ++at) ++plots;
  EXPECT_GE(plots, 10u);
  EXPECT_EQ(page.find("<script src="), std::string::npos) << "self-contained";
}

// Its DataLoader workers inherit their rank's RANK: stragglers still sees the 2 ranks, not 8 processes.
TEST(GpuRecording, StragglersSeeOneWorkerPerRank) {
  TempDir dir;
  const std::string rec = unpacked(dir);
  std::string out;
  ASSERT_EQ(run_command(kBin + " stragglers --json " + rec + " 2>/dev/null", &out), 0) << out;
  const auto j = nlohmann::json::parse(out.substr(out.find('{')));
  ASSERT_TRUE(j.contains("workers")) << out.substr(0, 400);
  EXPECT_EQ(j["workers"].size(), 2u) << j["workers"].dump();
}

// Straggler localisation on real data: Kineto traces (HolisticTraceAnalysis samples), the Alibaba PAI
// mini-batch times (job 1's worker 6 turns slow mid-run), and the `stragglers` command end to end.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "analyze/stragglers/straggler.h"
#include "store/kineto_trace_reader.h"
#include <cstdlib>

#include "store/step_table_reader.h"
#include "test_util.h"

using namespace stackscope;

namespace {
// The few public files these tests read are carried in tests/data (with their licences); STACKSCOPE_DATA
// points elsewhere (shared/data holds the whole set).
const std::string kData = std::getenv("STACKSCOPE_DATA") ? std::getenv("STACKSCOPE_DATA")
                                                          : std::string(STACKSCOPE_SOURCE_DIR) + "/tests/data";
bool have(const std::string& p) { return std::filesystem::exists(p); }
}  // namespace

TEST(StragglerKineto, ReadsTheHtaSamplesWithStepsAndCollectives) {
  const std::string r0 = kData + "/hta/sampled_rank-0.json.gz", r1 = kData + "/hta/sampled_rank-1.json.gz";
  STACKSCOPE_REQUIRE(have(r0), "no " << r0);
  TimelineSet set;
  read_kineto_trace(r0, set);
  read_kineto_trace(r1, set);
  ASSERT_EQ(set.workers.size(), 2u);
  EXPECT_EQ(set.workers[0].worker, "rank0");
  EXPECT_EQ(set.workers[1].worker, "rank1");
  for (auto& w : set.workers) {
    EXPECT_EQ(w.markers.size(), 2u);  // ProfilerStep#551, #552
    size_t collectives = 0, in_steps = 0;
    for (auto& op : w.ops) {
      collectives += op.kind == OpKind::collective || op.kind == OpKind::p2p;
      in_steps += op.step >= 0;
      EXPECT_GE(op.duration_ns, 0);
    }
    EXPECT_GT(w.ops.size(), 500u);  // GPU kernels
    EXPECT_GT(collectives, 0u);
    EXPECT_GT(in_steps, w.ops.size() / 2);  // kernels assigned to the step that launched them
  }
  const auto r = analyze::analyze_stragglers(set);
  EXPECT_EQ(r.steps.source, analyze::StepSource::markers);
  for (double s : r.stage1.score) EXPECT_TRUE(std::isfinite(s));
}

TEST(StragglerKineto, ThreeStepNcclTraceAndBadFiles) {
  const std::string p = kData + "/hta/nccl_data_2rank_rank0.json.gz";
  STACKSCOPE_REQUIRE(have(p), "no " << p);
  TimelineSet set;
  read_kineto_trace(p, set);
  ASSERT_EQ(set.workers.size(), 1u);
  EXPECT_EQ(set.workers[0].markers.size(), 3u);
  size_t allreduce = 0;
  for (auto& op : set.workers[0].ops)
    if (op.kind == OpKind::collective && set.names[op.comm] == "pg:0") ++allreduce;
  EXPECT_GT(allreduce, 10u);
  TempDir dir;
  write_file(dir.file("bad.json"), "{\"traceEvents\": [ {\"ph\": \"X\", \"name\": 1");
  EXPECT_THROW(read_kineto_trace(dir.file("bad.json"), set), std::runtime_error);
  write_file(dir.file("gz.json.gz"), std::string("\x1f\x8b\x08\x00garbage", 12));
  EXPECT_THROW(read_kineto_trace(dir.file("gz.json.gz"), set), std::runtime_error);
}

TEST(StragglerAlibaba, Job1FindsWorker6MidRun) {
  const std::string p = kData + "/alibaba_pai/job_1_norm.csv";
  STACKSCOPE_REQUIRE(have(p), "no " << p);
  const auto table = read_step_table(p);
  ASSERT_EQ(table.workers.size(), 10u);
  const auto r = analyze::analyze_step_times(table);
  ASSERT_FALSE(r.stragglers.empty());
  EXPECT_EQ(r.workers[r.stragglers.front()], "6");
  const int w6 = r.stragglers.front();
  ASSERT_GE(r.stage1.episode_window[w6], 0);
  const auto& win = r.stage1.windows[r.stage1.episode_window[w6]];
  // The README: it appears mid-run (steps 1801-1941 of 1-2988).
  EXPECT_GE(win.last_step, 1000);
  EXPECT_LE(win.first_step, 2200);
  EXPECT_GT(r.stage1.episodic[w6], r.stage1.persistent[w6]);
}

TEST(StragglerAlibaba, StepTableErrorsNameRowAndColumn) {
  TempDir dir;
  write_file(dir.file("t.csv"), "worker,step,time\n0,1,10\n1,1,11\n1,2,abc\n");
  try {
    read_step_table(dir.file("t.csv"));
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("row 4"), std::string::npos) << e.what();
  }
  write_file(dir.file("h.csv"), "a,b\n1,2\n");
  EXPECT_THROW(read_step_table(dir.file("h.csv")), std::runtime_error);
}

TEST(StragglerCli, JsonAndHtmlForAStepTableAndAClearErrorForBadInput) {
  const std::string p = kData + "/alibaba_pai/job_1_norm.csv";
  STACKSCOPE_REQUIRE(have(p), "no " << p);
  TempDir dir;
  std::string out;
  ASSERT_EQ(run_command(std::string(STACKSCOPE_BIN) + " stragglers --json --html " + dir.file("r.html") + " " + p, &out), 0)
      << out;
  const auto j = nlohmann::json::parse(out);
  EXPECT_EQ(j["stragglers"][0], "6");
  EXPECT_EQ(j["workers"].size(), 10u);
  const std::string html = read_file(dir.file("r.html"));
  EXPECT_NE(html.find("<svg"), std::string::npos);
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("http://") == std::string::npos || html.find("xmlns=\"http://www.w3.org/2000/svg\"") != std::string::npos, true);
  write_file(dir.file("bad.csv"), "worker,step,time\n0,1,5\n1,x,5\n");
  EXPECT_NE(run_command(std::string(STACKSCOPE_BIN) + " stragglers " + dir.file("bad.csv"), &out), 0);
  EXPECT_NE(out.find("row 3"), std::string::npos) << out;
  EXPECT_EQ(out.find("nan"), std::string::npos);
}

// A skip counts as a pass, so a fresh clone's test command must not skip these tests for want of data: the data
// lives in tests/data, and a missing prerequisite fails under CI (CI=true).
TEST(TestPrerequisites, DataIsCarriedAndAMissingPrerequisiteFailsUnderCi) {
  EXPECT_TRUE(have(std::string(STACKSCOPE_SOURCE_DIR) + "/tests/data/alibaba_pai/job_1_norm.csv"));
  EXPECT_TRUE(have(std::string(STACKSCOPE_SOURCE_DIR) + "/tests/data/hta/sampled_rank-0.json.gz"));
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const std::string one = self + " --gtest_filter=StragglerAlibaba.Job1FindsWorker6MidRun";
  std::string out;
  // Without its data: skipped on a developer's machine, failed under CI.
  EXPECT_EQ(run_command("env -u CI STACKSCOPE_DATA=/nonexistent " + one, &out), 0) << out;
  EXPECT_NE(out.find("SKIPPED"), std::string::npos) << out;
  EXPECT_NE(run_command("CI=true STACKSCOPE_DATA=/nonexistent " + one, &out), 0) << out;
  EXPECT_NE(out.find("prerequisite missing under CI"), std::string::npos) << out;
  // With it (the default: tests/data), it runs.
  EXPECT_EQ(run_command("CI=true " + one, &out), 0) << out;
  EXPECT_EQ(out.find("SKIPPED ]"), std::string::npos) << out;
}

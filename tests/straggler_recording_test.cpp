// Worker timelines read from a stackscope recording: NCCL events with ranks become workers, torch operators
// their compute, and the CLI names the rank whose operator is slow.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "store/recording_timeline_reader.h"
#include "store/recording_writer.h"
#include "test_util.h"

using namespace stackscope;

namespace {
// Two ranks (two pids) of 30 steps: linear (10 ms) then ncclAllReduce; rank 1's linear takes 25 ms from step 10.
void write_two_rank_recording(const std::string& path) {
  RecordingWriter w(path);
  for (int rank = 0; rank < 2; ++rank) {
    const uint32_t pid = 1000 + rank;
    int64_t t = 1'000'000'000;
    for (int step = 0; step < 30; ++step) {
      const int64_t linear = (rank == 1 && step >= 10) ? 25'000'000 : 10'000'000 + rank * 10'000;
      Event op;
      op.layer = Layer::torch;
      op.pid = op.tid = pid;
      op.name = "aten::linear";
      op.start_ns = t;
      op.duration_ns = linear;
      w.append_event(std::move(op));
      // The all-reduce ends when the slower rank arrives.
      const int64_t slow_arrival = 1'000'000'000 + step * 40'000'000LL + (step >= 10 ? 25'000'000 : 10'010'000);
      Event ar;
      ar.layer = Layer::nccl;
      ar.pid = ar.tid = pid;
      ar.name = "ncclAllReduce";
      ar.start_ns = t + linear + 10'000;
      ar.duration_ns = slow_arrival + 2'000'000 - ar.start_ns;
      ar.args = {{"rank", int64_t{rank}}, {"nranks", int64_t{2}}, {"comm", int64_t{0x1000 + rank}},
                 {"count", int64_t{1 << 20}}, {"bytes", int64_t{4 << 20}}};
      w.append_event(std::move(ar));
      t = 1'000'000'000 + (step + 1) * 40'000'000LL;
    }
  }
  w.close();
}
}  // namespace

TEST(StragglerRecording, ReadsOneWorkerPerNcclRank) {
  TempDir dir;
  std::string rec = dir.file("two_ranks.sdb");
  write_two_rank_recording(rec);
  TimelineSet set;
  read_recording_timelines(rec, set);
  ASSERT_EQ(set.workers.size(), 2u);
  for (auto& w : set.workers) EXPECT_EQ(w.ops.size(), 60u) << w.worker;
}

TEST(StragglerRecording, CliNamesTheSlowRank) {
  TempDir dir;
  std::string rec = dir.file("two_ranks.sdb"), out;
  write_two_rank_recording(rec);
  ASSERT_EQ(run_command(std::string(STACKSCOPE_BIN) + " stragglers --json " + rec + " 2>/dev/null", &out), 0) << out;
  auto j = nlohmann::json::parse(out, nullptr, false);
  ASSERT_TRUE(j.is_object()) << out;
  ASSERT_FALSE(j["stragglers"].empty()) << out;
  const std::string top = j["stragglers"][0].get<std::string>();
  EXPECT_NE(top.find("rank1"), std::string::npos) << top;
}

// One process sampled on the CPU (record's default Python mode, no rank, no operator events): there is nothing to
// compare, and the error says so instead of "no events" (the recording has a thousand samples).
TEST(StragglerRecording, AOneProcessJobIsNoRankToCompareNotNoEvents) {
  TempDir dir;
  const std::string rec = dir.file("one_process.sdb");
  {
    RecordingWriter w(rec);
    for (int i = 0; i < 200; ++i) {
      Event s;
      s.layer = Layer::python;
      s.pid = s.tid = 4242;
      s.name = i % 2 ? "train_step (off-cpu)" : "train_step";
      s.start_ns = 1'000'000'000 + i * 10'000'000LL;
      s.duration_ns = i % 2 ? 5'000'000 : 0;
      s.args = {{"sample", std::string(i % 2 ? "off-cpu" : "on-cpu")}, {"stack", std::string("main;train_step")}};
      w.append_event(std::move(s));
    }
    w.close();
  }
  std::string out;
  EXPECT_NE(run_command(std::string(STACKSCOPE_BIN) + " stragglers " + rec + " 2>&1", &out), 0);
  EXPECT_NE(out.find("no rank to compare: the 1 process(es)"), std::string::npos) << out;
  EXPECT_EQ(out.find("no nccl, torch"), std::string::npos) << out;
}

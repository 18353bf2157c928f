// One NVML sampler a node: a traced job gets its GPU series from the agent's node sampler (through SampleFanOut) at
// its own period, instead of a second sampler with a second XID event set (two cost 1.5 cores on a 4-GPU H200 host,
// one XID thread spinning). With the fake libnvidia-ml.so.1 (tests/progs/fake_nvml), which counts its
// calls; no GPU needed.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <mutex>
#include <thread>

#include "agent/agent.h"
#include "agent/agent_config.h"
#include "agent/agent_metrics.h"
#include "agent/job_discovery.h"
#include "agent/job_trace.h"
#include "agent/sample_fan_out.h"
#include "model/clock.h"
#include "online/collectors.h"
#include "store/recording_reader.h"
#include "agent/agent_test_util.h"
#include "test_util.h"

namespace {

using namespace stackscope;
using namespace stackscope::agent;
using namespace stackscope::agent::testing;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

const std::string kFakeNvml = STACKSCOPE_FAKE_NVML;

}  // namespace

// The fake library loaded first by its path (the samplers' dlopen("libnvidia-ml.so.1") then finds this one by its
// soname) with its call counter, and a job's configuration: the nvml layer alone, every 100 ms, into a directory of
// its own.
class AgentNvml : public ::testing::Test {
 protected:
  void SetUp() override {
    lib_ = ::dlopen(kFakeNvml.c_str(), RTLD_NOW | RTLD_GLOBAL);
    ASSERT_NE(lib_, nullptr) << ::dlerror();
    calls = reinterpret_cast<int (*)(const char*, int)>(::dlsym(lib_, "fake_nvml_calls"));
    ASSERT_NE(calls, nullptr);
    config.data_dir = dir.path();
    config.layers = "nvml";
    config.interval_ms = 100;
    config.detect = false;
  }
  void TearDown() override {
    if (lib_) ::dlclose(lib_);
  }

  int (*calls)(const char*, int) = nullptr;
  TempDir dir;
  AgentConfig config;
  AgentMetrics metrics{"h", "test"};
  const std::map<std::string, std::string> host_meta{{"host", "h"}};

 private:
  void* lib_ = nullptr;
};

TEST_F(AgentNvml, ATracedJobSharesTheNodeSamplerInsteadOfStartingASecond) {

  // The node: its sampler at 1 s into the fan-out, the node's sink subscribed at 1 s.
  SampleFanOut fan(1000);
  CountingSink node;
  auto node_share = fan.subscribe(node, 1000, SampleFanOut::Consumer::node);
  NvmlSamplerOptions o;
  o.live_interval_ms = fan.live_interval_ms();
  auto sampler = online::make_collectors({Layer::nvml}, {}, {}, o);
  ASSERT_EQ(sampler.size(), 1u);
  CollectorOptions copt;
  copt.interval_ms = 1000;
  copt.host = "h";
  ASSERT_TRUE(sampler[0]->start(fan, copt).running);
  fan.set_feeding(true);
  std::this_thread::sleep_for(1200ms);  // the node alone: 1 s rounds

  const int inits = calls("init", 0), event_sets = calls("event_set", 0);
  const size_t node_util_before = node.count("gpu.util{gpu0}");
  std::string job_dir;
  int rounds = 0;
  const int64_t job_began_ns = monotonic_ns();
  {
    JobTrace job(this_process_as_job(1), config, host_meta, metrics, &fan);
    EXPECT_NE(job.status().find("nvml: the node's sampler"), std::string::npos) << job.status();
    EXPECT_EQ(fan.live_interval_ms()->load(), 100) << "the sampler follows the job's period";
    job_dir = job.dir();
    std::this_thread::sleep_for(1000ms);  // the node's round asleep when the job came (1 s at most)
    const int util0 = calls("util", 0);
    std::this_thread::sleep_for(1500ms);
    rounds = calls("util", 0) - util0;
    job.stop();
  }
  // One sampler, one XID event set: no second nvmlInit, no second event set; one round per 100 ms (two samplers
  // would make about 30 in 1.5 s).
  EXPECT_EQ(calls("init", 0), inits);
  EXPECT_EQ(calls("event_set", 0), event_sets);
  EXPECT_GE(rounds, 8);
  EXPECT_LE(rounds, 18);
  EXPECT_EQ(fan.live_interval_ms()->load(), 1000) << "the job gone: back to the node's period";
  // The job's recording holds the series the analyses read, at the job's period; gpu.mem.total (written once, before
  // the job began) too.
  std::vector<Note> notes;
  EXPECT_GE(samples_in(job_dir, "gpu.util{gpu0}", &notes), 15u);
  EXPECT_GE(samples_in(job_dir, "gpu.throttle.power{gpu0}"), 15u);
  EXPECT_GE(samples_in(job_dir, "gpu.proc.sm_util{gpu0/pid4242}"), 3u);
  EXPECT_EQ(samples_in(job_dir, "gpu.mem.total{gpu0}"), 1u);
  // ... stamped when the job joined, so the job's recording begins with the job, not with the node's first round
  // (an agent segment that began 66 s before its job was analysed as a job absent for most of its grid).
  for (auto& e : fs::recursive_directory_iterator(job_dir))
    if (e.path().extension() == ".sdb") {
      const auto span = RecordingReader(e.path().string()).data_span();
      ASSERT_TRUE(span.has_value());
      EXPECT_GE(span->first, job_began_ns) << e.path();
    }
  EXPECT_TRUE(std::any_of(notes.begin(), notes.end(),
                          [](const Note& n) { return n.text.find("node NVML sampler") != std::string::npos; }));
  // The node's own share stayed at 1 s while the sampler ran at 100 ms: about 3 in the 2.5 s the job ran.
  const size_t node_util = node.count("gpu.util{gpu0}") - node_util_before;
  EXPECT_GE(node_util, 2u);
  EXPECT_LE(node_util, 5u);

  // Without the node's sampler the job starts its own: the count above would have seen it.
  fan.set_feeding(false);
  {
    JobTrace job(this_process_as_job(2), config, host_meta, metrics, &fan);
    EXPECT_EQ(job.status().find("the node's sampler"), std::string::npos) << job.status();
    job.stop();
  }
  EXPECT_EQ(calls("init", 0), inits + 1);
  EXPECT_EQ(calls("event_set", 0), event_sets + 1);

  sampler[0]->stop();
  node_share.reset();
}

// An idle node (no job traced) reads the slow GPU groups (energy, memory clock, ECC, field values) every
// host.idle_gpu_slow_interval (default 30 s) instead of every second; a traced job brings them back at once, at its
// own schedule, and its end takes them back to the idle one. The node's sampler here is wired as the agent's
// NodeTelemetry wires it (the next test runs the agent itself).
TEST_F(AgentNvml, AnIdleNodeReadsTheSlowGpuGroupsRarelyAndATracedJobBringsThemBack) {

  SampleFanOut fan(1000);
  CountingSink node;
  auto node_share = fan.subscribe(node, 1000, SampleFanOut::Consumer::node);
  EXPECT_TRUE(fan.live_idle()->load()) << "the node alone is idle";
  NvmlSamplerOptions o;
  o.live_interval_ms = fan.live_interval_ms();
  o.live_idle = fan.live_idle();
  o.idle_slow_interval_ms = 60'000;
  auto sampler = online::make_collectors({Layer::nvml}, {}, {}, o);
  CollectorOptions copt;
  copt.interval_ms = 1000;
  copt.host = "h";
  const int fields0 = calls("fields", 0);
  ASSERT_TRUE(sampler[0]->start(fan, copt).running);
  fan.set_feeding(true);
  std::this_thread::sleep_for(2500ms);  // three rounds of the node alone
  EXPECT_EQ(calls("fields", 0) - fields0, 1) << "idle: the first round's read only";
  EXPECT_GE(node.count("gpu.util{gpu0}"), 2u) << "the fast readings every second";

  std::string job_dir;
  int job_fields = 0, after_job = 0;
  {
    JobTrace job(this_process_as_job(3), config, host_meta, metrics, &fan);
    EXPECT_FALSE(fan.live_idle()->load()) << "a job is traced";
    job_dir = job.dir();
    const int fields1 = calls("fields", 0);
    // The node's round asleep when the job came (1 s at most): then the slow groups at once, and every second.
    for (int i = 0; i < 150 && calls("fields", 0) == fields1; ++i) std::this_thread::sleep_for(10ms);
    EXPECT_GT(calls("fields", 0), fields1) << "read within the node's round period of the job's start";
    std::this_thread::sleep_for(2200ms);
    job_fields = calls("fields", 0) - fields1;
    job.stop();
  }
  EXPECT_TRUE(fan.live_idle()->load()) << "the job gone: idle again";
  std::this_thread::sleep_for(1100ms);  // a round in flight may still be the job's
  const int fields2 = calls("fields", 0);
  std::this_thread::sleep_for(2200ms);
  after_job = calls("fields", 0) - fields2;
  sampler[0]->stop();
  EXPECT_GE(job_fields, 2) << "1 s slow period with the job";
  EXPECT_LE(job_fields, 5);
  EXPECT_EQ(after_job, 0) << "idle again: none in 2 s";
  EXPECT_GE(samples_in(job_dir, "gpu.nvlink.tx{gpu1}"), 2u) << "the job's recording holds the slow series";
  node_share.reset();
}

// The agent itself: with no job traced its node sampler reads the slow GPU groups once in 2.5 s (at 100 ms rounds),
// and host.idle_gpu_slow_interval sets how often; the cost note in the node's segment names the idle schedule.
TEST_F(AgentNvml, TheAgentsIdleGpuScheduleFollowsItsConfiguration) {
  auto run_agent = [&](const std::string& idle_period, std::vector<Note>& notes) {
    TempDir agent_dir;
    std::map<std::string, std::string> overrides{{"data_dir", agent_dir.path()},
                                                 {"listen", "127.0.0.1:0"},
                                                 {"host.layers", "nvml"},
                                                 {"host.interval", "100ms"},
                                                 {"discovery.command_filter", "^no job matches this$"}};
    if (!idle_period.empty()) overrides["host.idle_gpu_slow_interval"] = idle_period;
    Agent agent("", overrides, "test");
    std::atomic<bool> stop{false}, reload{false};
    const int fields0 = calls("fields", 0), rounds0 = calls("util", 0);
    std::thread t([&] { agent.run(stop, reload); });
    std::this_thread::sleep_for(2500ms);
    const int fields = calls("fields", 0) - fields0, rounds = calls("util", 0) - rounds0;
    stop.store(true);
    t.join();
    samples_in(agent_dir.path() + "/node", "", &notes);
    return std::make_pair(fields, rounds);
  };
  std::vector<Note> notes;
  const auto [fields, rounds] = run_agent("", notes);  // the default, 30 s
  EXPECT_GE(rounds, 12) << "100 ms rounds";
  EXPECT_EQ(fields, 1) << "the first round's read only, in " << rounds << " rounds";
  const bool named = std::any_of(notes.begin(), notes.end(), [](const Note& n) {
    return n.text.find("sampling round of 2 GPU(s), idle schedule (no job traced)") != std::string::npos &&
           n.text.find("slow readings and field values at most every 30000 ms") != std::string::npos;
  });
  EXPECT_TRUE(named) << "the node's cost note names the idle schedule";
  std::vector<Note> notes_500;
  const auto [fields_500, rounds_500] = run_agent("500ms", notes_500);
  EXPECT_GE(fields_500, 4) << "every 500 ms, in " << rounds_500 << " rounds";
  EXPECT_LE(fields_500, 7);
}

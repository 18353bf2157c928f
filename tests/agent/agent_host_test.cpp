// One host sampler a node: a traced job gets its host series (procfs, cgroup, perf, per-process CPU) from the agent's
// node host sampler through a SampleFanOut, at its own period, with its processes as the sampler's traced ones,
// instead of a second sampler reading every family again beside the node's (on an H200 host: 0.78 % of a core
// beyond `record`). A second job traced at the same time samples on its own (its proc.cpu.* series are of its own
// processes). Real /proc; no root needed (the host layer alone).
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "agent/agent_config.h"
#include "agent/agent_metrics.h"
#include "agent/host_sampler_share.h"
#include "agent/job_discovery.h"
#include "agent/job_trace.h"
#include "sample/procfs_sampler.h"
#include "store/recording_reader.h"
#include "agent/agent_test_util.h"
#include "test_util.h"

namespace {

using namespace stackscope;
using namespace stackscope::agent;
using namespace stackscope::agent::testing;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

// Threads of this process named `name` (the samplers name theirs: "ss-procfs").
int threads_named(const std::string& name) {
  int n = 0;
  for (auto& t : fs::directory_iterator("/proc/self/task")) {
    std::ifstream in(t.path() / "comm");
    std::string comm;
    std::getline(in, comm);
    n += comm == name;
  }
  return n;
}

}  // namespace

TEST(AgentHost, ATracedJobSharesTheNodeHostSamplerAndASecondJobSamplesOnItsOwn) {
  TempDir dir;
  AgentConfig config;
  config.data_dir = dir.path();
  config.layers = "host";
  config.interval_ms = 100;
  config.detect = false;
  AgentMetrics metrics{"h", "test"};
  const std::map<std::string, std::string> host_meta{{"host", "h"}};

  // The node, wired as the agent's NodeTelemetry wires it: its sampler at 1 s into the share's fan-out.
  HostSamplerShare share(1000);
  CountingSink node;
  auto node_sub = share.fan().subscribe(node, 1000, SampleFanOut::Consumer::node);
  ProcfsSamplerOptions o;
  o.families = {"stat", "loadavg", "proc_cpu"};
  o.live_interval_ms = share.fan().live_interval_ms();
  o.live_idle = share.fan().live_idle();
  ProcfsSampler sampler(o);
  CollectorOptions copt;
  copt.interval_ms = 1000;
  copt.host = "h";
  const int threads_before = threads_named("ss-procfs");
  ASSERT_TRUE(sampler.start(share.fan(), copt).running);
  share.fan().set_feeding(true);
  share.attach(&sampler);
  std::this_thread::sleep_for(1200ms);  // the node alone: 1 s ticks
  EXPECT_EQ(threads_named("ss-procfs"), threads_before + 1);

  std::string job_dir;
  uint64_t job_ticks = 0;
  const size_t node_loadavg_before = node.count("cpu.load.1m");
  {
    JobTrace job(this_process_as_job(1), config, host_meta, metrics, nullptr, &share);
    EXPECT_NE(job.status().find("host: the node's sampler"), std::string::npos) << job.status();
    EXPECT_TRUE(share.claimed());
    EXPECT_EQ(share.fan().live_interval_ms()->load(), 100) << "the sampler follows the job's period";
    EXPECT_FALSE(share.fan().live_idle()->load()) << "a job is traced: the node's usual schedule";
    job_dir = job.dir();
    std::this_thread::sleep_for(1000ms);  // the node's tick asleep when the job came (1 s at most)
    EXPECT_EQ(threads_named("ss-procfs"), threads_before + 1) << "no second sampler for the job";
    const uint64_t t0 = sampler.stats().ticks;
    {
      // A second job at the same time: the node's sampler traces the first one's processes, so this one runs its own.
      JobTrace second(this_process_as_job(2), config, host_meta, metrics, nullptr, &share);
      EXPECT_EQ(second.status().find("the node's sampler"), std::string::npos) << second.status();
      std::this_thread::sleep_for(1500ms);
      EXPECT_EQ(threads_named("ss-procfs"), threads_before + 2);  // named by the thread itself once it runs
      second.stop();
    }
    EXPECT_EQ(threads_named("ss-procfs"), threads_before + 1);
    job_ticks = sampler.stats().ticks - t0;
    job.stop();
  }
  EXPECT_FALSE(share.claimed()) << "the job's end frees the sampler for the next";
  EXPECT_EQ(share.fan().live_interval_ms()->load(), 1000) << "back to the node's period";
  EXPECT_TRUE(share.fan().live_idle()->load());
  // The shared sampler ran at the job's 100 ms (about 15 ticks in 1.5 s, not 2), once for both consumers.
  EXPECT_GE(job_ticks, 10u);
  EXPECT_LE(job_ticks, 25u);
  // The job's recording holds the host series at its period, and its own processes' CPU (this process traced).
  EXPECT_GE(samples_in(job_dir, "cpu.load.1m"), 15u);
  EXPECT_GE(samples_in(job_dir, "proc.cpu.traced_util"), 1u);
  // The node's share stayed at about 1 s while the sampler ran at 100 ms: 2-5 in the 2.5 s the job ran.
  const size_t node_loadavg = node.count("cpu.load.1m") - node_loadavg_before;
  EXPECT_GE(node_loadavg, 2u);
  EXPECT_LE(node_loadavg, 5u);

  // Without the node's sampler feeding, the job samples on its own.
  share.attach(nullptr);
  share.fan().set_feeding(false);
  {
    JobTrace job(this_process_as_job(3), config, host_meta, metrics, nullptr, &share);
    EXPECT_EQ(job.status().find("the node's sampler"), std::string::npos) << job.status();
    job.stop();
  }
  sampler.stop();
  node_sub.reset();
}

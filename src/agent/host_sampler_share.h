// One host sampler a node: the agent's node host sampler (procfs, sysfs, cgroup, perf, per-process CPU) writes into
// a SampleFanOut read by the node's segments and /metrics every host_interval_ms and by the traced job at its own
// interval, instead of the job running a second sampler that reads every family again (on an H200 host the
// second reading of proc_cpu (3.0 ms) and perf_sw (2.3 ms) every second costs 0.78 % of a core beyond
// `record`). The sampler runs at the fastest consumer's period.
// The job-relative series of family proc_cpu (proc.cpu.traced_util, proc.cpu.runq_wait, and others_util as
// "everything but the job") need the job's processes: one job at a time claims the sampler's traced processes.
// A second job traced at the same time gets no claim and runs a sampler of its own, as before, so that its series
// are of its own processes; while a job holds the claim the node's proc.cpu.others_util excludes that job.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "agent/sample_fan_out.h"

namespace stackscope {
class ProcfsSampler;
}

namespace stackscope::agent {

class HostSamplerShare {
 public:
  explicit HostSamplerShare(int idle_interval_ms) : fan_(idle_interval_ms) {}

  SampleFanOut& fan() { return fan_; }

  // The node's sampler while it runs (nullptr when it stops): the claimed processes are handed to it.
  void attach(ProcfsSampler* sampler);

  // A job's hold on the sampler's traced processes, until destroyed.
  class Claim {
   public:
    ~Claim();
    Claim(const Claim&) = delete;
    Claim& operator=(const Claim&) = delete;
    void add_pid(uint32_t pid);  // a new process of the job (the collectors' add_pid)

   private:
    friend class HostSamplerShare;
    explicit Claim(HostSamplerShare& share) : share_(share) {}
    HostSamplerShare& share_;
  };
  // nullptr when another job holds it, or no sampler writes into the fan-out (the job then samples on its own).
  std::unique_ptr<Claim> claim(const std::vector<uint32_t>& pids);
  bool claimed() const { return claimed_; }

 private:
  void apply();

  SampleFanOut fan_;
  ProcfsSampler* sampler_ = nullptr;
  bool claimed_ = false;
  std::vector<uint32_t> pids_;  // the claiming job's processes
};

}  // namespace stackscope::agent

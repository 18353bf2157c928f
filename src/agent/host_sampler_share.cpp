#include "agent/host_sampler_share.h"

#include <algorithm>

#include "sample/procfs_sampler.h"

namespace stackscope::agent {

// Called from the agent's main loop only (the node's start and stop, jobs' start, update and end): no lock. The
// sampler takes the set under its own lock.
void HostSamplerShare::attach(ProcfsSampler* sampler) {
  sampler_ = sampler;
  apply();
}

void HostSamplerShare::apply() {
  if (sampler_) sampler_->set_traced_pids(pids_);
}

std::unique_ptr<HostSamplerShare::Claim> HostSamplerShare::claim(const std::vector<uint32_t>& pids) {
  if (claimed_ || !sampler_ || !fan_.feeding()) return nullptr;
  claimed_ = true;
  pids_ = pids;
  apply();
  return std::unique_ptr<Claim>(new Claim(*this));
}

HostSamplerShare::Claim::~Claim() {
  share_.claimed_ = false;
  share_.pids_.clear();
  share_.apply();
}

void HostSamplerShare::Claim::add_pid(uint32_t pid) {
  auto& pids = share_.pids_;
  if (std::find(pids.begin(), pids.end(), pid) != pids.end()) return;
  pids.push_back(pid);
  if (share_.sampler_) share_.sampler_->add_pid(pid);
}

}  // namespace stackscope::agent

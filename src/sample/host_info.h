// Facts about the machine stamped into a recording's metadata (host, kernel, CPU and GPU models).
#pragma once
#include <map>
#include <string>

namespace stackscope {

struct HostInfo {
  std::string hostname;
  std::string kernel;      // uname -r
  std::string cpu_model;
  int cpu_count = 0;
  uint64_t mem_total_bytes = 0;
  std::string gpu_models;  // from /proc/driver/nvidia/gpus/*/information, "" when none
};

HostInfo read_host_info();
// The recording metadata keys and values of `h` (host, kernel, cpu_model, cpu_count, mem_total_bytes, gpu_models),
// as `record` and the agent's segments stamp them.
std::map<std::string, std::string> host_meta(const HostInfo& h);

}  // namespace stackscope

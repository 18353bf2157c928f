#include "sample/host_info.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <set>

namespace stackscope {

namespace {
std::string trim(std::string s) {
  size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t\r\n");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}
// The value after "key:" on the first line that starts with key, from a "key: value" file.
std::string field(const std::string& path, const std::string& key) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(key, 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) return trim(line.substr(colon + 1));
    }
  return "";
}
}  // namespace

HostInfo read_host_info() {
  HostInfo h;
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) == 0) h.hostname = name;
  struct utsname u{};
  if (::uname(&u) == 0) h.kernel = u.release;
  h.cpu_model = field("/proc/cpuinfo", "model name");
  h.cpu_count = static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN));
  std::string mem = field("/proc/meminfo", "MemTotal");
  if (!mem.empty()) h.mem_total_bytes = std::stoull(mem) * 1024;
  std::error_code ec;
  std::multiset<std::string> gpus;
  for (auto& d : std::filesystem::directory_iterator("/proc/driver/nvidia/gpus", ec)) {
    std::string m = field(d.path().string() + "/information", "Model");
    if (!m.empty()) gpus.insert(m);
  }
  for (auto it = gpus.begin(); it != gpus.end(); it = gpus.upper_bound(*it)) {
    if (!h.gpu_models.empty()) h.gpu_models += ", ";
    h.gpu_models += std::to_string(gpus.count(*it)) + "x " + *it;
  }
  return h;
}

std::map<std::string, std::string> host_meta(const HostInfo& h) {
  return {{"host", h.hostname},
          {"kernel", h.kernel},
          {"cpu_model", h.cpu_model},
          {"cpu_count", std::to_string(h.cpu_count)},
          {"mem_total_bytes", std::to_string(h.mem_total_bytes)},
          {"gpu_models", h.gpu_models}};
}

}  // namespace stackscope

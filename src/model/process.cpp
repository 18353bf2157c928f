#include "model/process.h"

#include <pthread.h>
#include <signal.h>

#include <cerrno>
#include <fstream>
#include <iterator>
#include <map>

namespace stackscope {

bool process_exists(uint32_t pid) { return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH; }

std::string process_rank_environment(uint32_t pid) {
  static constexpr const char* kKeys[] = {"RANK", "LOCAL_RANK", "WORLD_SIZE", "GROUP_RANK", "CUDA_VISIBLE_DEVICES"};
  std::ifstream in("/proc/" + std::to_string(pid) + "/environ", std::ios::binary);
  if (!in) return "";
  const std::string env((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::map<std::string, std::string> found;
  for (size_t b = 0; b < env.size();) {
    size_t e = env.find('\0', b);
    if (e == std::string::npos) e = env.size();
    const std::string_view var(env.data() + b, e - b);
    const size_t eq = var.find('=');
    if (eq != std::string_view::npos)
      for (const char* k : kKeys)
        if (var.substr(0, eq) == k) found[k] = std::string(var.substr(eq + 1));
    b = e + 1;
  }
  std::string out;
  for (const char* k : kKeys)
    if (auto it = found.find(k); it != found.end() && it->second.find(' ') == std::string::npos)
      out += (out.empty() ? "" : " ") + std::string(k) + "=" + it->second;
  return out;
}

void name_this_thread(const char* name) {
  char shortened[16] = {};
  for (size_t i = 0; i < sizeof shortened - 1 && name[i]; ++i) shortened[i] = name[i];
  ::pthread_setname_np(::pthread_self(), shortened);
}

}  // namespace stackscope

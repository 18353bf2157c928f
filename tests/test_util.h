// Small helpers shared by tests: a temporary directory, whole-file I/O, commands, waiting, a free port.
#pragma once
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <thread>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

struct TempDir {
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "stackscope-test-XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline void write_file(const std::string& path, const std::string& data) {
  std::ofstream(path, std::ios::binary) << data;
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs a shell command, returns its exit status and captures stdout+stderr.
inline int run_command(const std::string& cmd, std::string* output = nullptr) {
  std::string full = cmd + " 2>&1";
  FILE* p = ::popen(full.c_str(), "r");
  if (!p) return -1;
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int status = ::pclose(p);
  if (output) *output = out;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Runs `body` as a script in a session of its own with a raised autogroup priority: on a shared VM other
// sessions' builds otherwise slow a "healthy" job for real (autogroup scheduling makes plain nice useless).
inline int run_prioritised(const TempDir& dir, const std::string& body, std::string* out) {
  write_file(dir.file("run.sh"), "echo -10 > /proc/self/autogroup 2>/dev/null\n" + body);
  return run_command("setsid sh " + dir.file("run.sh"), out);
}

// One JSON value per non-empty line of a file (JSON-lines output such as record --detect-log).
inline std::vector<nlohmann::json> json_lines(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::istringstream in(read_file(path));
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  return out;
}

// True under CI (CI=true, as .ci/run is started): there a missing prerequisite is a failure, not a skip.
inline bool running_under_ci() {
  const char* ci = std::getenv("CI");
  return ci && (std::string(ci) == "true" || std::string(ci) == "1");
}

// A prerequisite a test cannot run without (root, python3-torch, chromium, a data file). Missing, the test is
// skipped with the reason on a developer's machine, but fails under CI, where scripts/install-deps.sh provides
// every one of them and a silent skip would count as a pass.
// Use in a test body (it returns from it).
#define STACKSCOPE_REQUIRE(condition, reason)                                                          \
  do {                                                                                                 \
    if (!(condition)) {                                                                                \
      if (running_under_ci()) GTEST_FAIL() << "prerequisite missing under CI: " << reason;             \
      GTEST_SKIP() << reason;                                                                          \
    }                                                                                                  \
  } while (0)

// Polls `cond` every 200 ms until it holds or `timeout` passes; its last answer.
inline bool wait_for(const std::function<bool()>& cond, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return cond();
}

// A TCP port on loopback that was free a moment ago (for a server a test starts).
inline int free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

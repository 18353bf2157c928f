// Shared by the agent's tests: a node's sink that counts samples by series key, this test process as a traced job,
// the samples of a series in a job's segments, and processes of another user that map libraries (jobs, or not).
#pragma once
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "agent/job_discovery.h"
#include "model/sink.h"
#include "store/recording_reader.h"

namespace stackscope::agent::testing {

// Counts samples by series key; the node's segments stand-in.
class CountingSink : public TelemetrySink {
 public:
  SeriesId add_series(const SeriesInfo& info) override {
    std::lock_guard lk(mu_);
    keys_.push_back(info.key());
    return static_cast<SeriesId>(keys_.size());
  }
  void append_event(Event&&) override {}
  void append_samples(std::span<const Sample> s) override {
    std::lock_guard lk(mu_);
    for (auto& x : s) ++counts_[keys_.at(x.series - 1)];
  }
  void add_drops(std::string_view, uint64_t) override {}
  void add_note(std::string_view, std::string_view) override {}
  size_t count(const std::string& key) {
    std::lock_guard lk(mu_);
    return counts_[key];
  }

 private:
  std::mutex mu_;
  std::vector<std::string> keys_;
  std::map<std::string, size_t> counts_;
};

inline Job this_process_as_job(uint64_t start_ticks) {  // start_ticks: a directory of its own
  Job j;
  j.leader = static_cast<uint32_t>(::getpid());
  j.id = std::to_string(j.leader) + "-" + std::to_string(start_ticks);
  j.name = "test-" + std::to_string(j.leader);
  j.command = "stackscope_agent_tests";
  JobProcess p;
  p.pid = j.leader;
  p.start_ticks = start_ticks;
  p.comm = "agent_tests";
  j.processes[j.leader] = p;
  return j;
}

// Samples of `key` in the job's segments.
inline size_t samples_in(const std::string& dir, const std::string& key, std::vector<Note>* notes = nullptr) {
  size_t n = 0;
  for (auto& e : std::filesystem::recursive_directory_iterator(dir))
    if (e.path().extension() == ".sdb") {
      RecordingReader r(e.path().string());
      for (auto& [id, tv] : r.load_samples())
        if (auto* s = r.series_by_id(id); s && s->key() == key) n += tv.first.size();
      if (notes)
        for (auto& note : r.notes()) notes->push_back(note);
    }
  return n;
}

// The fake CUDA runtime and driver (tests/progs/trace_fake: real SONAMEs and entry points), copied into `dir`,
// which every user may read: libcudart.so.13 and the libcuda.so.1 it needs, in the order to load them. `dir` is
// made readable by all (a user such as nobody maps them from there, whatever the build folder's permissions).
inline std::vector<std::string> fake_cuda_in(const std::string& dir) {
  ::chmod(dir.c_str(), 0755);
  std::filesystem::copy_file(STACKSCOPE_FAKE_CUDA, dir + "/libcuda.so.1");
  std::filesystem::copy_file(STACKSCOPE_FAKE_CUDART, dir + "/libcudart.so.13");
  return {dir + "/libcuda.so.1", dir + "/libcudart.so.13"};
}

// A python3 process of user `uid` (0, or another through setpriv: 65534 is nobody) that loads `libraries` in order
// (dlopen), names itself `comm` when given (PR_SET_NAME: any bytes but NUL), and sleeps; `padding`: more arguments
// it ignores (a long command line). Killed when this goes.
struct MappingProcess {
  pid_t pid = -1;
  MappingProcess(uint32_t uid, const std::vector<std::string>& libraries, const std::string& comm = "",
                 const std::vector<std::string>& padding = {}) {
    // One line: a command line such as a user's, with no newline to stop a pattern's `.*`.
    static const std::string script =
        "import ctypes, sys, time; a = sys.argv[1:]; "
        "a[0] and ctypes.CDLL(None).prctl(15, bytes.fromhex(a[0]), 0, 0, 0); "
        "[ctypes.CDLL(p, mode=ctypes.RTLD_GLOBAL) for p in a[1:] if p.startswith('/')]; time.sleep(120)";
    std::string hex;
    for (unsigned char c : comm) hex += "0123456789abcdef"[c >> 4], hex += "0123456789abcdef"[c & 15];
    std::vector<std::string> argv;
    if (uid != 0)
      argv = {"/usr/bin/setpriv", "--reuid=" + std::to_string(uid), "--regid=" + std::to_string(uid), "--clear-groups"};
    argv.insert(argv.end(), {"/usr/bin/python3", "-c", script, hex});
    argv.insert(argv.end(), libraries.begin(), libraries.end());
    argv.insert(argv.end(), padding.begin(), padding.end());
    pid = ::fork();
    if (pid == 0) {
      std::vector<char*> args;
      for (auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      ::execv(args[0], args.data());
      ::_exit(127);
    }
  }
  MappingProcess(const MappingProcess&) = delete;
  MappingProcess& operator=(const MappingProcess&) = delete;
  ~MappingProcess() {
    if (pid <= 0) return;
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
};

// A child process whose stdout and stderr go to a file.
struct Child {
  pid_t pid = -1;
  Child() = default;
  Child(const std::vector<std::string>& argv, const std::string& log) {
    pid = fork();
    if (pid == 0) {
      int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      dup2(fd, 1);
      dup2(fd, 2);
      setpgid(0, 0);
      std::vector<char*> args;
      for (auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      execv(args[0], args.data());
      _exit(127);
    }
  }
  Child(Child&& o) noexcept : pid(o.pid) { o.pid = -1; }
  Child& operator=(Child&& o) noexcept {
    std::swap(pid, o.pid);
    return *this;
  }
  Child(const Child&) = delete;
  // Exit status after `sig`, or -1 when it did not exit within `timeout` (then killed).
  int stop(int sig, std::chrono::seconds timeout) {
    if (pid <= 0) return -1;
    kill(pid, sig);
    int status = 0;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      if (waitpid(pid, &status, WNOHANG) == pid) {
        pid = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    pid = -1;
    return -1;
  }
  bool exited() {
    int status;
    if (pid > 0 && waitpid(pid, &status, WNOHANG) == pid) pid = -1;
    return pid <= 0;
  }
  int exit_status(std::chrono::seconds timeout) {  // waits for it to exit on its own
    int status = 0;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (pid > 0 && std::chrono::steady_clock::now() < deadline) {
      if (waitpid(pid, &status, WNOHANG) == pid) {
        pid = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return -1;
  }
  ~Child() {
    if (pid > 0) stop(SIGKILL, std::chrono::seconds(5));
  }
};

// A sink that keeps nothing and numbers the series it is given.
struct NullSink final : TelemetrySink {
  SeriesId add_series(const SeriesInfo&) override { return ++n; }
  void append_event(Event&&) override {}
  void append_samples(std::span<const Sample>) override {}
  void add_drops(std::string_view, uint64_t) override {}
  void add_note(std::string_view, std::string_view) override {}
  SeriesId n = 0;
};

}  // namespace stackscope::agent::testing

// The agent's parts on their own: configuration (TOML and overrides), cgroup labels, job discovery of a real torch
// process tree and of processes of any user, text from /proc made printable, rolling segments read back as
// recordings, retention, Prometheus names and the exposition.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "agent/agent_config.h"
#include "agent/agent_metrics.h"
#include "agent/agent_test_util.h"
#include "agent/job_discovery.h"
#include "agent/segment_store.h"
#include "model/clock.h"
#include "model/text.h"
#include "store/recording_reader.h"
#include "test_util.h"

using namespace stackscope;
using namespace stackscope::agent;
namespace agent_testing = stackscope::agent::testing;

TEST(AgentConfig, TomlFileThenFlagsWin) {
  TempDir dir;
  write_file(dir.file("agent.toml"),
             "data_dir = \"/tmp/x\"\nlisten = \"127.0.0.1:9999\"\n"
             "[discovery]\nscan_interval = \"5s\"\nlibraries = [\"cuda\", \"nccl\"]\nmax_jobs = 3\n"
             "[trace]\nbudget_pct = 0.5\ndetect = false\n"
             "[store]\nsegment_size = \"64MiB\"\nretention_size = \"1GiB\"\nretention_age = \"2d\"\n");
  AgentConfig c = load_agent_config(dir.file("agent.toml"), {{"discovery.max_jobs", "5"}});
  EXPECT_EQ(c.data_dir, "/tmp/x");
  EXPECT_EQ(c.listen, "127.0.0.1:9999");
  EXPECT_EQ(c.scan_interval_ns, 5'000'000'000);
  EXPECT_EQ(c.job_libraries, (std::vector<std::string>{"cuda", "nccl"}));
  EXPECT_EQ(c.max_jobs, 5);  // the flag wins
  EXPECT_DOUBLE_EQ(c.budget_pct, 0.5);
  EXPECT_FALSE(c.detect);
  EXPECT_EQ(c.segment_size_bytes, 64ull << 20);
  EXPECT_EQ(c.retention_size_bytes, 1ull << 30);
  EXPECT_EQ(c.retention_age_ns, 2 * 86'400'000'000'000);
  // Defaults without a file: loopback only.
  EXPECT_EQ(load_agent_config("", {}).listen.rfind("127.0.0.1:", 0), 0u);
}

TEST(AgentConfig, BadInputNamesTheKeyAndLine) {
  TempDir dir;
  write_file(dir.file("bad.toml"), "[discovery]\nscan_interval = \"soon\"\n");
  try {
    load_agent_config(dir.file("bad.toml"), {});
    FAIL() << "accepted a bad duration";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("discovery.scan_interval"), std::string::npos) << e.what();
  }
  write_file(dir.file("unknown.toml"), "[store]\nretention = \"1d\"\n");
  EXPECT_THROW(load_agent_config(dir.file("unknown.toml"), {}), std::invalid_argument);
  write_file(dir.file("syntax.toml"), "data_dir = \n");
  try {
    load_agent_config(dir.file("syntax.toml"), {});
    FAIL() << "accepted a syntax error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("syntax.toml:1"), std::string::npos) << e.what();
  }
  EXPECT_THROW(load_agent_config("", {{"listen", "nowhere"}}), std::invalid_argument);
  EXPECT_THROW(load_agent_config("", {{"trace.layers", "cuda,bogus"}}), std::invalid_argument);
  EXPECT_THROW(load_agent_config("", {{"discovery.command_filter", "train(.py"}}), std::invalid_argument);
  EXPECT_THROW(load_agent_config("", {{"trace.ring_buffer", "3MiB"}}), std::invalid_argument);  // not a power of two
  EXPECT_THROW(load_agent_config("", {{"store.segment_size", "20GiB"}}), std::invalid_argument);  // > retention
  EXPECT_THROW(load_agent_config(dir.file("missing.toml"), {}), std::invalid_argument);
}

TEST(AgentConfig, ShippedExampleParses) {
  const std::string path = std::string(STACKSCOPE_SOURCE_DIR) + "/deploy/agent.toml";
  AgentConfig c = load_agent_config(path, {});
  EXPECT_EQ(c.listen, "127.0.0.1:9477");
  // Every setting is documented in the example (commented or not).
  const std::string text = read_file(path);
  for (const auto& [key, help] : agent_config_keys()) {
    const std::string leaf = key.substr(key.rfind('.') == std::string::npos ? 0 : key.rfind('.') + 1);
    EXPECT_NE(text.find(leaf + " ="), std::string::npos) << key << " is not in deploy/agent.toml";
  }
}

TEST(CgroupLabels, ContainersAndPods) {
  const std::string id = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
  // Kubernetes with the systemd cgroup driver and containerd.
  auto k = parse_cgroup_labels("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1a2b3c4d_0000_1111_2222_333344445555.slice/cri-containerd-" + id + ".scope\n");
  EXPECT_EQ(k.container_id, id);
  EXPECT_EQ(k.pod_uid, "1a2b3c4d-0000-1111-2222-333344445555");
  // Kubernetes with cgroupfs.
  auto f = parse_cgroup_labels("0::/kubepods/besteffort/pod1a2b3c4d-0000-1111-2222-333344445555/" + id + "\n");
  EXPECT_EQ(f.container_id, id);
  EXPECT_EQ(f.pod_uid, "1a2b3c4d-0000-1111-2222-333344445555");
  // Docker alone; cgroup v1 lines.
  auto d = parse_cgroup_labels("12:cpu,cpuacct:/docker/" + id + "\n11:memory:/docker/" + id + "\n");
  EXPECT_EQ(d.container_id, id);
  EXPECT_EQ(d.pod_uid, "");
  // A user session: neither.
  auto u = parse_cgroup_labels("0::/user.slice/user-0.slice/session-3.scope\n");
  EXPECT_EQ(u.cgroup, "/user.slice/user-0.slice/session-3.scope");
  EXPECT_EQ(u.container_id, "");
  EXPECT_EQ(u.pod_uid, "");
  EXPECT_EQ(parse_cgroup_labels("garbage").container_id, "");
}

TEST(JobDiscovery, FindsARealTorchProcessTreeAsOneJob) {
  if (run_command("/usr/bin/python3 -c 'import torch'") != 0) GTEST_SKIP() << "python3-torch missing";
  JobScanner scanner(job_library_mask({"cuda", "nccl", "torch"}));
  const auto before = scanner.scan();
  TempDir dir;
  // A launcher that imports torch and starts a child that imports it too, with RANK set (as torchrun does).
  write_file(dir.file("job.py"),
             "import os, subprocess, sys, time\nimport torch\n"
             "if len(sys.argv) == 1:\n"
             "    c = subprocess.Popen([sys.executable, __file__, 'child'], env=dict(os.environ, RANK='1'))\n"
             "    flag = os.path.join(os.path.dirname(__file__), 'rename')\n"
             "    while not os.path.exists(flag): time.sleep(0.05)\n"
             "    import ctypes; ctypes.CDLL(None).prctl(15, b'pt_elastic', 0, 0, 0)\n"
             "    time.sleep(30); c.kill()\n"
             "else:\n    time.sleep(30)\n");
  const pid_t pid = fork();
  if (pid == 0) {
    // argv[0] absolute: python finds its prefix (and torch) from it, not from a pyenv shim on PATH.
    execl("/usr/bin/python3", "/usr/bin/python3", dir.file("job.py").c_str(), (char*)nullptr);
    _exit(127);
  }
  std::map<std::string, Job> jobs;
  const Job* found = nullptr;
  for (int i = 0; i < 100 && !found; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    jobs = scanner.scan();
    for (auto& [id, j] : jobs)
      if (j.leader == static_cast<uint32_t>(pid) && j.processes.size() == 2) found = &j;
  }
  ASSERT_NE(found, nullptr) << "the launcher and its child were not found as one job";
  EXPECT_EQ(found->name, "python3-" + std::to_string(pid));
  EXPECT_TRUE(found->libraries & kJobTorch);
  int ranked = 0;
  for (auto& [p, proc] : found->processes) ranked += proc.rank == "1";
  EXPECT_EQ(ranked, 1);
  EXPECT_FALSE(found->labels.cgroup.empty());
  // The launcher renames itself (torchrun's agent becomes "pt_elastic"): still the same job, not a new one.
  const std::string id = found->id;
  write_file(dir.file("rename"), "");
  bool renamed = false;
  for (int i = 0; i < 50 && !renamed; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    jobs = scanner.scan();
    size_t mine = 0;
    for (auto& [jid, j] : jobs) mine += j.leader == static_cast<uint32_t>(pid);
    EXPECT_LE(mine, 1u);
    if (auto it = jobs.find(id); it != jobs.end() && it->second.processes.at(pid).comm == "pt_elastic") renamed = true;
  }
  EXPECT_TRUE(renamed) << "the renamed launcher is no longer job " << id;
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  for (int i = 0; i < 50; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    bool gone = true;
    for (auto& [id, j] : scanner.scan()) gone = gone && j.leader != static_cast<uint32_t>(pid);
    if (gone) return;
  }
  FAIL() << "the job was still reported after its leader died";
}

TEST(JobDiscovery, RanksOfALauncherWithoutTorchAreOneJobWithIt) {
  if (run_command("/usr/bin/python3 -c 'import torch'") != 0) GTEST_SKIP() << "python3-torch missing";
  JobScanner scanner(job_library_mask({"cuda", "nccl", "torch"}));
  TempDir dir;
  // As eval/stragglers/ddp_job.py on a CPU: a launcher that never imports torch starts one process per rank with
  // RANK and WORLD_SIZE set (as torchrun would), and one more torch process that is no rank (a helper).
  write_file(dir.file("job.py"),
             "import os, subprocess, sys, time\n"
             "if len(sys.argv) == 1:\n"
             "    cs = [subprocess.Popen([sys.executable, __file__, 'rank'], env=dict(os.environ, RANK=str(r),"
             " WORLD_SIZE='2')) for r in range(2)]\n"
             "    cs.append(subprocess.Popen([sys.executable, __file__, 'helper']))\n"
             "    time.sleep(30)\n"
             "    for c in cs: c.kill()\n"
             "else:\n    import torch\n    time.sleep(30)\n");
  const pid_t pid = fork();
  if (pid == 0) {
    execl("/usr/bin/python3", "/usr/bin/python3", dir.file("job.py").c_str(), (char*)nullptr);
    _exit(127);
  }
  const auto launcher = static_cast<uint32_t>(pid);
  const Job* found = nullptr;
  std::map<std::string, Job> jobs;
  size_t helpers = 0;
  for (int i = 0; i < 150 && !(found && helpers == 1); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    jobs = scanner.scan();
    found = nullptr;
    helpers = 0;
    for (auto& [id, j] : jobs) {
      if (j.leader == launcher && j.processes.size() == 3) found = &j;
      // The helper (no RANK) stays a job of its own under the launcher, as before.
      const JobProcess& first = j.processes.begin()->second;
      if (j.processes.size() == 1 && first.ppid == launcher && first.rank.empty()) ++helpers;
    }
  }
  // The launcher's children first (by pid: a killed launcher would leave them to sleep on).
  for (auto& [id, j] : jobs)
    for (auto& [p, proc] : j.processes)
      if (proc.ppid == launcher) kill(static_cast<pid_t>(p), SIGKILL);
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  ASSERT_NE(found, nullptr) << "the launcher and its two ranks were not found as one job";
  EXPECT_EQ(found->name, "python3-" + std::to_string(pid));
  EXPECT_EQ(found->processes.at(launcher).libraries, 0u);  // led, though it maps none of the libraries
  std::set<std::string> ranks;
  for (auto& [p, proc] : found->processes)
    if (p != launcher) ranks.insert(proc.rank);
  EXPECT_EQ(ranks, (std::set<std::string>{"0", "1"}));
  EXPECT_EQ(helpers, 1u);
  // No rank is a job of its own beside it: one tracer for the job.
  for (auto& [id, j] : jobs)
    for (auto& [p, proc] : j.processes) {
      if (proc.ppid == launcher && !proc.rank.empty()) {  // (other tests' processes may be about)
        EXPECT_EQ(j.leader, launcher) << "rank pid " << p << " leads job " << id;
      }
    }
}

TEST(JobDiscovery, RanksThatOutliveTheirLauncherAreStillItsJob) {
  auto proc = [](uint32_t pid, uint32_t ppid, uint64_t start, std::string rank, unsigned libraries = kJobTorch) {
    JobProcess p;
    p.pid = pid;
    p.ppid = ppid;
    p.start_ticks = start;
    p.rank = std::move(rank);
    p.libraries = libraries;
    return p;
  };
  Job traced;
  traced.id = "100-5";
  traced.leader = 100;
  traced.processes = {{100, proc(100, 1, 5, "", 0)}, {101, proc(101, 100, 7, "0")}, {102, proc(102, 100, 7, "1")}};
  // The launcher has exited: its ranks, reparented, are found as jobs of their own.
  std::map<std::string, Job> found;
  found["101-7"].id = "101-7";
  found["101-7"].processes = {{101, proc(101, 1, 7, "0")}};
  found["102-7"].id = "102-7";
  found["102-7"].processes = {{102, proc(102, 1, 7, "1")}};
  found["103-7"].id = "103-7";  // a new job
  found["103-7"].processes = {{103, proc(103, 1, 7, "")}};
  found["104-9"].id = "104-9";  // a reused pid of the traced job is another process
  found["104-9"].processes = {{101, proc(101, 1, 9, "")}};
  EXPECT_EQ(remnants_of(traced, found), (std::set<std::string>{"101-7", "102-7"}));
  // Adopted by a subreaper in their cgroup (a container's init), which then leads them: still the traced job's.
  std::map<std::string, Job> adopted;
  adopted["50-3"].id = "50-3";
  adopted["50-3"].processes = {{50, proc(50, 1, 3, "", 0)}, {101, proc(101, 50, 7, "0")}, {102, proc(102, 50, 7, "1")}};
  EXPECT_EQ(remnants_of(traced, adopted), (std::set<std::string>{"50-3"}));
  adopted["50-3"].processes[106] = proc(106, 50, 9, "");  // with a new torch process of its own: a new job
  EXPECT_TRUE(remnants_of(traced, adopted).empty());
  // A found job with one of the traced processes and a new one is not a remnant.
  found["101-7"].processes[105] = proc(105, 101, 8, "");
  EXPECT_EQ(remnants_of(traced, found), (std::set<std::string>{"102-7"}));
  // The traced job itself, still found, is not its own remnant.
  found[traced.id] = traced;
  EXPECT_EQ(remnants_of(traced, found), (std::set<std::string>{"102-7"}));
}

TEST(AgentText, ForeignBytesBecomeValidUtf8WithControlsEscaped) {
  EXPECT_EQ(printable_text("train.py --lr 0.1 é"), "train.py --lr 0.1 é");  // valid text is kept
  EXPECT_EQ(printable_text("\xff\xfejob"), "\xEF\xBF\xBD\xEF\xBF\xBDjob");      // each invalid byte: U+FFFD
  EXPECT_EQ(printable_text("a\xe2\x82"), "a\xEF\xBF\xBD");                       // a sequence cut short
  EXPECT_EQ(printable_text("\xed\xa0\x80x"), "\xEF\xBF\xBDx");                   // a surrogate is no character
  EXPECT_EQ(printable_text("\x1b[31mred\n"), "\\x1b[31mred\\x0a");              // no terminal escapes in a log
  EXPECT_EQ(printable_text("\xc2\x9b" "2J\x7f"), "\\u009b2J\\x7f");             // C1 controls and DEL too
  EXPECT_EQ(printable_text("a\nb\xff", '?'), "a?b\xEF\xBF\xBD");
  // What JSON dumps and Prometheus labels then take without a throw.
  EXPECT_NO_THROW(nlohmann::json(printable_text("\xff\xc3(\xf0\x28\x8c\xbc")).dump());
}

TEST(AgentConfig, CommandFilterIsRe2CompiledOnce) {
  AgentConfig c = load_agent_config("", {{"discovery.command_filter", "python.*train"}});
  ASSERT_TRUE(c.command_matcher);
  // 15 arguments of 100 KB (1.5 MB, under ARG_MAX: any user's process may have it): a backtracking engine
  // recurses per character of `.*` and overflows the stack; RE2 matches in linear time.
  std::string command = "/usr/bin/python3";
  for (int i = 0; i < 15; ++i) command += " " + std::string(100'000, 'x');
  EXPECT_FALSE(c.command_matcher->matches(command));
  EXPECT_TRUE(c.command_matcher->matches(command + " train"));
  EXPECT_FALSE(load_agent_config("", {}).command_matcher);  // none: every job
  // A bad pattern is refused at load with RE2's reason; RE2 has no lookaround, so the help says RE2.
  for (const std::string bad : {"train(.py", "(?=train)", "x{2,1001}"}) {
    try {
      load_agent_config("", {{"discovery.command_filter", bad}});
      FAIL() << "accepted " << bad;
    } catch (const std::invalid_argument& e) {
      const std::string said = e.what();
      EXPECT_NE(said.find("discovery.command_filter: '" + bad + "' is not an RE2 regular expression: "),
                std::string::npos) << said;
    }
  }
  EXPECT_NE(agent_config_keys().at("discovery.command_filter").find("RE2"), std::string::npos);
}

TEST(AgentConfig, UsersAndPerUserLimit) {
  const AgentConfig d = load_agent_config("", {});
  EXPECT_TRUE(d.users.empty());  // every user's jobs
  EXPECT_EQ(d.max_jobs_per_user, 4);
  EXPECT_LT(d.max_jobs_per_user, d.max_jobs);  // one user cannot take every slot
  const AgentConfig c = load_agent_config("", {{"discovery.users", "root,1000"}, {"discovery.max_jobs_per_user", "2"}});
  EXPECT_EQ(c.users, (std::set<uint32_t>{0, 1000}));
  EXPECT_EQ(c.max_jobs_per_user, 2);
  try {
    load_agent_config("", {{"discovery.users", "no-such-user-here"}});
    FAIL() << "accepted an unknown user";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("no user 'no-such-user-here'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(load_agent_config("", {{"discovery.max_jobs_per_user", "0"}}), std::invalid_argument);
}

TEST(JobDiscovery, AJobLibraryIsWhatItsElfSaysNotItsName) {
  TempDir dir;
  const auto cuda = agent_testing::fake_cuda_in(dir.path());
  auto is = [](const std::string& path, trace::LibraryKind kind) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    EXPECT_GE(fd, 0) << path;
    const bool yes = is_job_library(fd, kind);
    ::close(fd);
    return yes;
  };
  EXPECT_TRUE(is(cuda[1], trace::LibraryKind::cudart));  // SONAME libcudart.so.13, exports cudaLaunchKernel
  EXPECT_TRUE(is(cuda[0], trace::LibraryKind::cuda_driver));
  EXPECT_FALSE(is(cuda[1], trace::LibraryKind::nccl));  // renamed libnccl.so.2, it would still be the runtime
  // Another library under a job library's name: its SONAME and exports say otherwise.
  std::filesystem::copy_file(STACKSCOPE_FAKE_NVML, dir.file("libcudart.so.12"));
  EXPECT_FALSE(is(dir.file("libcudart.so.12"), trace::LibraryKind::cudart));
  // Not an ELF file, or one cut short: no, and no crash.
  write_file(dir.file("libnccl.so.2"), "#!/bin/sh\n");
  EXPECT_FALSE(is(dir.file("libnccl.so.2"), trace::LibraryKind::nccl));
  write_file(dir.file("libcuda.so.1"), read_file(cuda[1]).substr(0, 200));
  EXPECT_FALSE(is(dir.file("libcuda.so.1"), trace::LibraryKind::cuda_driver));
}

// Any user can start processes that map a file named like a job library: nine of nobody's that map another library
// renamed libcudart.so.12 are no jobs (they would fill every tracing slot); nobody's that maps the real one is, and
// one whose name is invalid UTF-8 and holds '/' is found under a name fit for labels, logs and JSON.
TEST(JobDiscovery, ProcessesOfAnyUserAreJobsOnlyForARealJobLibrary) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (processes of another user; map_files)";
  STACKSCOPE_REQUIRE(run_command("command -v setpriv") == 0, "setpriv (util-linux) missing");
  TempDir dir;
  const auto cuda = agent_testing::fake_cuda_in(dir.path());
  std::filesystem::copy_file(STACKSCOPE_FAKE_NVML, dir.file("libcudart.so.12"));
  std::vector<std::unique_ptr<agent_testing::MappingProcess>> renamed;
  for (int i = 0; i < 9; ++i)
    renamed.push_back(
        std::make_unique<agent_testing::MappingProcess>(65534, std::vector<std::string>{dir.file("libcudart.so.12")}));
  agent_testing::MappingProcess real(65534, cuda, "\xff\xfe../x");
  ASSERT_TRUE(wait_for([&] {
    for (auto& p : renamed)
      if (read_file("/proc/" + std::to_string(p->pid) + "/maps").find(dir.file("libcudart.so.12")) == std::string::npos)
        return false;
    return true;
  }, std::chrono::seconds(30))) << "the renamed library was not mapped";
  JobScanner scanner(job_library_mask({"cuda", "nccl", "torch"}));
  std::map<std::string, Job> jobs;
  const Job* found = nullptr;
  for (int i = 0; i < 100 && !found; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    jobs = scanner.scan();
    for (auto& [id, j] : jobs)
      if (j.leader == static_cast<uint32_t>(real.pid)) found = &j;
  }
  ASSERT_NE(found, nullptr) << "nobody's process mapping the fake CUDA runtime is no job";
  EXPECT_EQ(found->uid, 65534u);
  EXPECT_TRUE(found->libraries & kJobCuda);
  EXPECT_EQ(found->name, "\xEF\xBF\xBD\xEF\xBF\xBD../x-" + std::to_string(real.pid));
  for (auto& p : renamed)
    for (auto& [id, j] : jobs) EXPECT_FALSE(j.processes.count(static_cast<uint32_t>(p->pid))) << "pid " << p->pid;
}

TEST(SegmentStore, RotatesBySizeAndKeepsSeriesAcrossSegments) {
  TempDir dir;
  SegmentOptions so;
  so.dir = dir.file("job");
  so.prefix = "segment";
  so.max_duration_ns = 3'600'000'000'000;
  so.max_bytes = 200'000;
  so.meta = {{"host", "testhost"}};
  std::vector<std::string> paths;
  uint64_t written = 0;
  {
    SegmentedRecording rec(so);
    const SeriesId a = rec.add_series(series_info("test.value", "", Subsystem::cpu, "count", SeriesKind::gauge,
                                                  SeriesCategory::dynamic));
    EXPECT_EQ(rec.add_series(series_info("test.value", "", Subsystem::cpu, "count", SeriesKind::gauge,
                                         SeriesCategory::dynamic)),
              a);
    int64_t t = monotonic_ns();
    for (int round = 0; round < 40 && rec.paths().size() < 3; ++round) {
      for (int i = 0; i < 500; ++i) {
        Event e;
        e.layer = Layer::torch;
        e.pid = 42;
        e.start_ns = t + i;
        e.name = "op_" + std::to_string((round * 500 + i) % 977);  // poorly compressible names
        rec.append_event(std::move(e));
        Sample s{a, t + i, static_cast<double>(round * 500 + i)};
        rec.append_samples(std::span(&s, 1));
        ++written;
      }
      t += 1'000'000;
      std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the writer commits
      rec.maybe_rotate(monotonic_ns());
    }
    paths = rec.paths();
    EXPECT_EQ(rec.events(), written);
  }
  ASSERT_GE(paths.size(), 2u) << "never rotated";
  uint64_t events = 0, samples = 0;
  for (const auto& p : paths) {
    EXPECT_EQ(std::filesystem::status(p).permissions() & std::filesystem::perms::others_read,
              std::filesystem::perms::none);
    RecordingReader r(p);
    EXPECT_EQ(r.meta_or("host"), "testhost");
    ASSERT_EQ(r.series().size(), 1u) << p;
    EXPECT_EQ(r.series()[0].name, "test.value");
    r.for_each_event({}, [&](const Event&) { ++events; });
    for (auto& [id, tv] : r.load_samples()) samples += tv.first.size();
  }
  EXPECT_EQ(events, written);   // nothing lost or doubled across rotations
  EXPECT_EQ(samples, written);
}

TEST(SegmentStore, RetentionDeletesOldestBeyondSizeAndAgeButNeverOpenOnes) {
  TempDir dir;
  namespace fs = std::filesystem;
  StoreManifest manifest(dir.path());  // the agent's files: all of these
  manifest.create_dirs(dir.file("jobs/a"));
  manifest.create_dirs(dir.file("jobs/b"));
  const int64_t now_s = realtime_ns() / 1'000'000'000;
  auto make = [&](const std::string& rel, size_t bytes, int64_t age_s) {
    const std::string p = dir.file(rel);
    write_file(p, std::string(bytes, 'x'));
    timespec times[2] = {{now_s - age_s, 0}, {now_s - age_s, 0}};
    utimensat(AT_FDCWD, p.c_str(), times, 0);
    if (!rel.ends_with("-wal")) manifest.add_file(p);
    return p;
  };
  make("jobs/a/s-0.sdb", 1000, 500);
  make("jobs/a/s-0.sdb-wal", 500, 500);
  const std::string a1 = make("jobs/a/s-1.sdb", 1000, 400);
  make("jobs/a/incidents.jsonl", 10, 400);
  const std::string b0 = make("jobs/b/s-0.sdb", 1000, 300);
  const std::string b1 = make("jobs/b/s-1.sdb", 1000, 10);
  const std::string old_open = make("jobs/b/s-2.sdb", 1000, 100000);
  // By size: 5500 bytes, keep 3000 -> the two oldest of a go, and job a's directory with them.
  auto r = apply_retention(manifest, 3000, 86'400'000'000'000, 0, {old_open}, {dir.file("jobs/b")});
  EXPECT_EQ(r.deleted, 2u);
  EXPECT_EQ(r.deleted_bytes, 2500u);
  EXPECT_FALSE(fs::exists(a1));
  EXPECT_FALSE(fs::exists(dir.file("jobs/a")));
  EXPECT_TRUE(fs::exists(old_open));  // open: kept although the oldest
  EXPECT_TRUE(fs::exists(b0) && fs::exists(b1));
  // By age: b0 (300 s) goes at a 60 s limit, b1 (10 s) stays.
  r = apply_retention(manifest, 1 << 30, 60'000'000'000, 0, {old_open}, {dir.file("jobs/b")});
  EXPECT_EQ(r.deleted, 1u);
  EXPECT_FALSE(fs::exists(b0));
  EXPECT_TRUE(fs::exists(b1));
  EXPECT_EQ(r.segments, 2u);
  EXPECT_TRUE(fs::exists(dir.file("jobs/b")));  // a traced job's directory stays
}

TEST(AgentMetrics, PrometheusNamesFollowTheConventions) {
  auto n = [](const char* name, const char* unit, SeriesKind kind, Subsystem sub = Subsystem::gpu) {
    return prometheus_name(series_info(name, "gpu0", sub, unit, kind, SeriesCategory::dynamic));
  };
  EXPECT_EQ(n("gpu.mem.used", "bytes", SeriesKind::gauge).name, "stackscope_gpu_mem_used_bytes");
  EXPECT_EQ(n("gpu.util", "ratio", SeriesKind::gauge).name, "stackscope_gpu_util_ratio");
  EXPECT_EQ(n("gpu.energy", "joules", SeriesKind::counter).name, "stackscope_gpu_energy_joules_total");
  EXPECT_EQ(n("gpu.ecc.corrected", "count", SeriesKind::counter).name, "stackscope_gpu_ecc_corrected_total");
  EXPECT_EQ(n("gpu.temp", "celsius", SeriesKind::gauge).name, "stackscope_gpu_temp_celsius");
  const auto cpu = n("cpu.time.user", "jiffies", SeriesKind::counter, Subsystem::cpu);
  EXPECT_EQ(cpu.name, "stackscope_cpu_time_user_seconds_total");
  EXPECT_NEAR(cpu.scale, 1.0 / static_cast<double>(sysconf(_SC_CLK_TCK)), 1e-12);
}

TEST(AgentMetrics, ExpositionHasJobIncidentAndHostSeries) {
  AgentMetrics m("node1", "0.1.0");
  JobLabels job{"python3-42", "pod-uid", "cid"};
  m.job_started(job, 1e9, kJobTorch);
  m.add_job_events(job, "0", Layer::torch, 7);
  m.incident_opened(job, "cpu_interference");
  // A host series through the exporter.
  stackscope::agent::testing::NullSink null;
  auto exporter = m.host_exporter(null, 100);
  const SeriesId id = exporter->add_series(
      series_info("gpu.mem.used", "gpu0", Subsystem::gpu, "bytes", SeriesKind::gauge, SeriesCategory::dynamic, "nvml"));
  Sample s{id, 1, 1234.0};
  exporter->append_samples(std::span(&s, 1));
  const std::string text = m.scrape();
  EXPECT_NE(text.find("stackscope_agent_info{host=\"node1\",version=\"0.1.0\"} 1"), std::string::npos) << text;
  EXPECT_NE(text.find("stackscope_job_events_total{container=\"cid\",job_name=\"python3-42\",layer=\"torch\",pod=\"pod-uid\",rank=\"0\"} 7"),
            std::string::npos) << text;
  EXPECT_NE(text.find("stackscope_incidents_total{class=\"cpu_interference\",container=\"cid\",job_name=\"python3-42\",pod=\"pod-uid\"} 1"),
            std::string::npos) << text;
  EXPECT_NE(text.find("stackscope_incident_active{class=\"cpu_interference\",container=\"cid\",job_name=\"python3-42\",pod=\"pod-uid\"} 1"),
            std::string::npos) << text;
  EXPECT_NE(text.find("stackscope_gpu_mem_used_bytes{gpu=\"gpu0\"} 1234"), std::string::npos) << text;
  m.incident_cause_changed(job, "cpu_interference", "memory_pressure");
  m.incident_closed(job, "memory_pressure");
  const std::string after = m.scrape();
  EXPECT_NE(after.find("stackscope_incident_active{class=\"memory_pressure\",container=\"cid\",job_name=\"python3-42\",pod=\"pod-uid\"} 0"),
            std::string::npos) << after;
  EXPECT_NE(after.find("stackscope_incident_active{class=\"cpu_interference\",container=\"cid\",job_name=\"python3-42\",pod=\"pod-uid\"} 0"),
            std::string::npos) << after;
  // An ended job's series go after the grace period.
  m.job_ended(job);
  m.expire(std::chrono::seconds(0));
  EXPECT_EQ(m.scrape().find("python3-42"), std::string::npos);
}

TEST(AgentDeploy, AlertRulesPassPromtool) {
  if (run_command("command -v promtool") != 0) GTEST_SKIP() << "promtool missing (Debian package prometheus)";
  const std::string dir = std::string(STACKSCOPE_SOURCE_DIR) + "/deploy/prometheus";
  std::string out;
  EXPECT_EQ(run_command("promtool check rules " + dir + "/stackscope-alerts.yml", &out), 0) << out;
  // The alerts fire on the series the agent exposes (label names as AgentMetrics writes them).
  EXPECT_EQ(run_command("cd " + dir + " && promtool test rules stackscope-alerts.test.yml", &out), 0) << out;
}

TEST(AgentDeploy, DaemonSetIsPrivilegedInTheHostPidNamespaceWithTracefsAndBtf) {
  if (run_command("/usr/bin/python3 -c 'import yaml'") != 0) GTEST_SKIP() << "python3-yaml missing";
  const std::string path = std::string(STACKSCOPE_SOURCE_DIR) + "/deploy/kubernetes/stackscope-agent.yaml";
  std::string out;
  ASSERT_EQ(run_command("/usr/bin/python3 -c \"import json, sys, yaml; "
                        "print(json.dumps([d for d in yaml.safe_load_all(open('" + path + "')) if d['kind'] == 'DaemonSet'][0]))\"",
                        &out),
            0)
      << out;
  const auto ds = nlohmann::json::parse(out);
  const auto& spec = ds["spec"]["template"]["spec"];
  EXPECT_EQ(spec["hostPID"], true);
  EXPECT_EQ(spec["containers"][0]["securityContext"]["privileged"], true);
  std::set<std::string> mounts;
  for (const auto& m : spec["containers"][0]["volumeMounts"]) mounts.insert(m["mountPath"].get<std::string>());
  EXPECT_TRUE(mounts.count("/sys/kernel/tracing") && mounts.count("/sys/kernel/btf")) << out;
  EXPECT_EQ(spec["containers"][0]["readinessProbe"]["httpGet"]["path"], "/healthz");
  // The unit parses too, where systemd's checker exists.
  if (run_command("command -v systemd-analyze") == 0) {
    const std::string unit = std::string(STACKSCOPE_SOURCE_DIR) + "/deploy/systemd/stackscope-agent.service";
    std::string v;
    run_command("systemd-analyze verify " + unit, &v);
    EXPECT_EQ(v.find("Unknown key"), std::string::npos) << v;
    EXPECT_EQ(v.find("Unknown section"), std::string::npos) << v;
  }
}

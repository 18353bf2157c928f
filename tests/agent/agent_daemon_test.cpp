// stackscope-agent end to end, as an operator runs it: started before the job, it discovers a real CPU torch
// training job (Debian's python3-torch), traces it into segments, and a real Prometheus server (Debian's, started
// here on loopback with its own configuration) scrapes /metrics and answers a query with the job's series; SIGHUP
// reloads (a bad file is refused and the agent goes on), SIGTERM flushes and exits 0. Then 30 short jobs (100 with
// STACKSCOPE_AGENT_JOBS=100) start and
// end under one agent, whose memory and file descriptors stay bounded. Needs root (eBPF) and python3-torch; the
// Prometheus part needs /usr/bin/prometheus.
#include <gtest/gtest.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <regex>
#include <thread>

#include <nlohmann/json.hpp>

#include "agent/agent_test_util.h"
#include "store/recording_reader.h"
#include "test_util.h"

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

const std::string kAgent = STACKSCOPE_AGENT_BIN;
const std::string kWorkload = std::string(STACKSCOPE_SOURCE_DIR) + "/workloads/cpu_train.py";

bool have_torch() { return run_command("/usr/bin/python3 -c 'import torch'") == 0; }

// A plain HTTP/1.0 GET on loopback; the status (0: no answer) and the body.
int http_get(int port, const std::string& path, std::string* body) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return 0;
  }
  const std::string req = "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  if (write(fd, req.data(), req.size()) != static_cast<ssize_t>(req.size())) {
    close(fd);
    return 0;
  }
  std::string resp;
  char buf[65536];
  for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) resp.append(buf, static_cast<size_t>(n));
  close(fd);
  int status = 0;
  if (resp.rfind("HTTP/1.", 0) == 0 && resp.size() > 12) status = std::atoi(resp.c_str() + 9);
  const auto split = resp.find("\r\n\r\n");
  if (body) *body = split == std::string::npos ? std::string() : resp.substr(split + 4);
  return status;
}

std::string fmt_hex(unsigned char c) {
  static const char* digits = "0123456789ABCDEF";
  return std::string{'%', digits[c >> 4], digits[c & 15]};
}

std::string url_encode(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '_' || c == '-' || c == '.') out += static_cast<char>(c);
    else out += fmt_hex(c);
  }
  return out;
}

using stackscope::agent::testing::Child;

struct Agent {
  Child proc;
  std::string log;
  int port = 0;
  Agent(const TempDir& dir, const std::vector<std::string>& extra) : log(dir.file("agent.log")) {
    std::vector<std::string> argv{kAgent, "agent", "--data-dir", dir.file("data"), "--listen", "127.0.0.1:0",
                                  "--scan-interval", "500ms"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    proc = Child(argv, log);
    const std::regex listening("listening on 127\\.0\\.0\\.1:(\\d+)");
    wait_for([&] {
      std::smatch m;
      const std::string text = read_file(log);
      if (std::regex_search(text, m, listening)) port = std::stoi(m[1]);
      return port > 0 || proc.exited();
    }, 60s);
  }
  size_t count(const std::string& what) const {
    const std::string text = read_file(log);
    size_t n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  }
  uint64_t status_kb(const std::string& field) const {
    const std::string s = read_file("/proc/" + std::to_string(proc.pid) + "/status");
    const auto at = s.find(field + ":");
    return at == std::string::npos ? 0 : std::strtoull(s.c_str() + at + field.size() + 1, nullptr, 10);
  }
  // What each open descriptor points at (socket:[...], anon_inode:bpf-map, a path), so a leak names itself.
  std::multiset<std::string> fds() const {
    std::multiset<std::string> targets;
    std::error_code ec;
    for (auto it = fs::directory_iterator("/proc/" + std::to_string(proc.pid) + "/fd", ec);
         !ec && it != fs::directory_iterator(); ++it) {
      std::error_code link_ec;
      const auto target = fs::read_symlink(it->path(), link_ec);
      targets.insert(link_ec ? "?" : target.string());
    }
    return targets;
  }
};

}  // namespace

TEST(AgentDaemon, DiscoversATorchJobAndPrometheusScrapesIt) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (eBPF)";
  if (!have_torch()) GTEST_SKIP() << "python3-torch missing";
  const bool have_prometheus = fs::exists("/usr/bin/prometheus");
  TempDir dir;
  const std::string config = dir.file("agent.toml");
  write_file(config, "[api]\nmax_incidents = 100\n");
  // Only this test's jobs (ctest may run other torch tests beside it, which the agent must not slow down): the
  // workload runs from the test's directory, which the command filter names.
  Agent agent(dir, {"--config", config, "--set", "discovery.command_filter=" + dir.path()});
  ASSERT_GT(agent.port, 0) << read_file(agent.log);

  std::string body;
  ASSERT_EQ(http_get(agent.port, "/healthz", &body), 200) << body;
  EXPECT_EQ(nlohmann::json::parse(body)["status"], "ok");

  // The job starts after the agent.
  fs::copy_file(kWorkload, dir.file("cpu_train.py"));
  Child job({"/usr/bin/python3", dir.file("cpu_train.py"), "--seconds", "25"}, dir.file("job.log"));
  const std::string name = "python3-" + std::to_string(job.pid);
  ASSERT_TRUE(wait_for([&] { return agent.count("tracing job " + name) == 1; }, 60s)) << read_file(agent.log);
  // Its series in /metrics: labelled by job, events counted by layer.
  const std::regex events_re("stackscope_job_events_total\\{[^}]*job_name=\"" + name + "\"[^}]*\\} ([0-9.e+]+)");
  double traced = 0;
  ASSERT_TRUE(wait_for([&] {
    std::string m;
    if (http_get(agent.port, "/metrics", &m) != 200) return false;
    for (std::sregex_iterator it(m.begin(), m.end(), events_re), end; it != end; ++it) traced += std::stod((*it)[1]);
    return traced > 0;
  }, 60s)) << read_file(agent.log);
  ASSERT_EQ(http_get(agent.port, "/metrics", &body), 200);
  EXPECT_NE(body.find("stackscope_job_info{container=\"\",job_name=\"" + name + "\",libraries=\"torch\",pod=\"\"} 1"),
            std::string::npos) << body;
  EXPECT_NE(body.find("stackscope_incident_active{class=\"cpu_interference\""), std::string::npos);
  EXPECT_NE(body.find("# TYPE stackscope_cpu_time_user_seconds_total counter"), std::string::npos)
      << "no host series from the node's sampler";
  // Where the agent's CPU goes, by thread name: the node's host sampler runs for as long as the agent.
  EXPECT_NE(body.find("stackscope_agent_thread_cpu_seconds{thread=\"ss-procfs\"}"), std::string::npos) << body;

  if (have_prometheus) {
    // A real Prometheus scrapes the agent every second; its query API then has the job's series.
    const int prom_port = free_port();
    write_file(dir.file("prometheus.yml"),
               "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
               "scrape_configs:\n  - job_name: stackscope\n    static_configs:\n"
               "      - targets: ['127.0.0.1:" + std::to_string(agent.port) + "']\n");
    Child prom({"/usr/bin/prometheus", "--config.file=" + dir.file("prometheus.yml"),
                "--storage.tsdb.path=" + dir.file("tsdb"), "--web.listen-address=127.0.0.1:" + std::to_string(prom_port)},
               dir.file("prometheus.log"));
    nlohmann::json result;
    const std::string query = "/api/v1/query?query=" + url_encode("stackscope_job_events_total{job_name=\"" + name + "\"}");
    ASSERT_TRUE(wait_for([&] {
      std::string r;
      if (http_get(prom_port, query, &r) != 200) return false;
      result = nlohmann::json::parse(r, nullptr, false);
      return !result.is_discarded() && result["status"] == "success" && !result["data"]["result"].empty();
    }, 90s)) << read_file(dir.file("prometheus.log")).substr(0, 4000);
    const auto& series = result["data"]["result"][0];
    EXPECT_EQ(series["metric"]["job"], "stackscope");  // Prometheus's own job label is left alone
    EXPECT_EQ(series["metric"]["job_name"], name);
    std::string up;
    ASSERT_EQ(http_get(prom_port, "/api/v1/query?query=" + url_encode("up{job=\"stackscope\"}"), &up), 200);
    EXPECT_EQ(nlohmann::json::parse(up)["data"]["result"][0]["value"][1], "1") << up;
    // Every query of the Grafana dashboard is valid PromQL for this server; the job panels have data.
    const auto dash = nlohmann::json::parse(read_file(std::string(STACKSCOPE_SOURCE_DIR) +
                                                      "/deploy/grafana/stackscope-dashboard.json"));
    std::this_thread::sleep_for(6s);  // rate() and increase() need a few scrapes
    size_t queries = 0, with_data = 0;
    for (const auto& panel : dash["panels"])
      for (const auto& target : panel["targets"]) {
        std::string expr = target["expr"];
        for (size_t at; (at = expr.find("$instance")) != std::string::npos;) expr.replace(at, 9, ".*");
        std::string r;
        ASSERT_EQ(http_get(prom_port, "/api/v1/query?query=" + url_encode(expr), &r), 200) << expr << "\n" << r;
        const auto j = nlohmann::json::parse(r);
        EXPECT_EQ(j["status"], "success") << expr;
        ++queries;
        with_data += !j["data"]["result"].empty();
      }
    EXPECT_GE(queries, 10u);
    EXPECT_GE(with_data, 3u) << "the job, host and agent panels";
    EXPECT_EQ(prom.stop(SIGTERM, 30s), 0);
  } else {
    std::cerr << "prometheus not installed: the scrape by a real server was skipped\n";
  }

  // /api/incidents answers JSON.
  ASSERT_EQ(http_get(agent.port, "/api/incidents", &body), 200);
  EXPECT_TRUE(nlohmann::json::parse(body)["incidents"].is_array()) << body;
  EXPECT_EQ(http_get(agent.port, "/nothing", &body), 404);

  // SIGHUP: a good file is reloaded; a bad one is refused and the agent carries on.
  write_file(config, "[api]\nmax_incidents = 50\n");
  kill(agent.proc.pid, SIGHUP);
  ASSERT_TRUE(wait_for([&] { return agent.count("configuration reloaded") == 1; }, 20s)) << read_file(agent.log);
  write_file(config, "[api]\nmax_incidents = \"many\"\n");
  kill(agent.proc.pid, SIGHUP);
  ASSERT_TRUE(wait_for([&] { return agent.count("reload refused") == 1; }, 20s)) << read_file(agent.log);
  ASSERT_EQ(http_get(agent.port, "/metrics", &body), 200);
  EXPECT_NE(body.find("stackscope_agent_config_reloads_total{result=\"ok\"} 1"), std::string::npos);
  EXPECT_NE(body.find("stackscope_agent_config_reloads_total{result=\"error\"} 1"), std::string::npos);

  // The job ends; its segments are recordings with its events.
  ASSERT_TRUE(wait_for([&] { return job.exited(); }, 90s));
  ASSERT_TRUE(wait_for([&] { return agent.count("job " + name + " ended") == 1; }, 30s)) << read_file(agent.log);
  uint64_t events = 0;
  size_t segments = 0;
  // Only this job's directory: the agent traces every torch process of the machine (other tests' too).
  for (auto& e : fs::recursive_directory_iterator(dir.file("data/jobs")))
    if (e.path().extension() == ".sdb" && e.path().parent_path().filename().string().rfind(name + "-", 0) == 0) {
      ++segments;
      stackscope::RecordingReader r(e.path().string());
      EXPECT_NE(r.meta_or("agent_job").find("\"job\":\"" + name + "\""), std::string::npos) << r.meta_or("agent_job");
      r.for_each_event({}, [&](const stackscope::Event&) { ++events; });
    }
  EXPECT_GE(segments, 1u);
  EXPECT_GT(events, 0u);
  EXPECT_FALSE(fs::is_empty(dir.file("data/node")));

  // SIGTERM: flushed and exited 0.
  EXPECT_EQ(agent.proc.stop(SIGTERM, 60s), 0) << read_file(agent.log);
  EXPECT_EQ(agent.count("stackscope agent: stopped"), 1u) << read_file(agent.log);
}

TEST(AgentDaemon, SurvivesThirtyShortJobsWithBoundedMemory) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (eBPF)";
  if (!have_torch()) GTEST_SKIP() << "python3-torch missing";
  TempDir dir;
  // --set wins over the flag; only this test's jobs (their command lines carry the test's directory).
  Agent agent(dir, {"--set", "discovery.scan_interval=300ms", "--set", "discovery.command_filter=" + dir.path()});
  ASSERT_GT(agent.port, 0) << read_file(agent.log);
  // CI runs 30; STACKSCOPE_AGENT_JOBS=100 runs 100, as a longer run outside CI (a multiple of 3).
  const int kJobs = std::getenv("STACKSCOPE_AGENT_JOBS") ? std::atoi(std::getenv("STACKSCOPE_AGENT_JOBS")) : 30;
  constexpr int kWave = 3;
  uint64_t rss_warm_kb = 0;          // the highest idle RSS of the first three waves
  std::vector<uint64_t> idle_rss_kb;  // after each wave
  // The agent's descriptors by kind (socket, pipe, bpf-map, path) while it traces nothing; another torch process on
  // the machine is traced too, so idleness is waited for. Empty when it never became idle.
  using FdKinds = std::map<std::string, int>;
  auto idle_fds = [&]() -> FdKinds {
    std::string h;
    const bool idle = wait_for([&] {
      return http_get(agent.port, "/healthz", &h) == 200 && nlohmann::json::parse(h)["jobs_traced"] == 0;
    }, 60s);
    FdKinds kinds;
    if (!idle) return kinds;
    std::this_thread::sleep_for(1s);  // the last job's tracer thread closes its files after /healthz says idle
    // The process sampler keeps every live process's /proc/PID/stat open (bounded by its descriptor budget): those
    // follow the machine's process count, not the jobs; one whose process is gone would be a leak.
    const std::regex proc_file("^/proc/(\\d+)/");
    for (const auto& target : agent.fds()) {
      std::smatch m;
      if (std::regex_search(target, m, proc_file))
        ++kinds[fs::exists("/proc/" + m[1].str()) ? "/proc/PID (live)" : "/proc/PID (gone)"];
      else
        ++kinds[std::regex_replace(target, std::regex("\\[\\d+\\]|:\\d+$"), "")];
    }
    kinds.erase("/proc/PID (live)");
    return kinds;
  };
  auto total = [](const FdKinds& k) {
    int n = 0;
    for (const auto& [kind, count] : k) n += count;
    return n;
  };
  FdKinds fds_warm;
  size_t traced = 0, ended = 0;  // of this test's jobs (other torch processes on the machine are traced too)
  for (int started = 0; started < kJobs; started += kWave) {
    std::vector<std::unique_ptr<Child>> wave;
    for (int i = 0; i < kWave; ++i)
      wave.push_back(std::make_unique<Child>(
          std::vector<std::string>{"/usr/bin/python3", "-c", "import torch, time; time.sleep(3)", dir.path()},
          dir.file("jobs.log")));
    for (auto& c : wave) {
      const std::string name = "python3-" + std::to_string(c->pid);
      EXPECT_TRUE(wait_for([&] { return agent.count("tracing job " + name) == 1 || c->exited(); }, 60s));
      traced += agent.count("tracing job " + name + " ");
    }
    for (auto& c : wave) {
      const std::string name = "python3-" + std::to_string(c->pid);
      wait_for([&] { return c->exited(); }, 60s);
      EXPECT_TRUE(wait_for([&] { return agent.count("job " + name + " ended") == 1; }, 60s)) << name;
      ended += agent.count("job " + name + " ended");
    }
    // RSS is read once nothing is traced (a job's tracer frees its buffers when it ends), after every wave: a leak
    // raises the floor wave after wave; a transient peak (another torch process on the machine traced) does not.
    const FdKinds fds_now = idle_fds();
    idle_rss_kb.push_back(agent.status_kb("VmRSS"));
    if (started == 2 * kWave) {  // after a few jobs: allocator pools and caches warm
      fds_warm = fds_now;
      rss_warm_kb = *std::max_element(idle_rss_kb.begin(), idle_rss_kb.end());
    }
  }
  EXPECT_EQ(traced, static_cast<size_t>(kJobs)) << read_file(agent.log);
  EXPECT_EQ(ended, static_cast<size_t>(kJobs));
  EXPECT_EQ(agent.count("cannot trace"), 0u) << read_file(agent.log);
  const FdKinds fds_end = idle_fds();
  const uint64_t rss_end_kb = *std::min_element(idle_rss_kb.end() - 3, idle_rss_kb.end());  // the last waves' floor
  std::cerr << "agent idle RSS, first 9 jobs at most " << rss_warm_kb / 1024 << " MiB, floor of the last 9 of "
            << kJobs << ": " << rss_end_kb / 1024 << " MiB (peak " << agent.status_kb("VmHWM") / 1024
            << " MiB); fds " << total(fds_warm) << " -> " << total(fds_end) << "\n";
  EXPECT_LT(rss_end_kb, 200u * 1024) << "the agent's 200 MB RSS target";
  EXPECT_LT(rss_end_kb, rss_warm_kb + 40 * 1024) << "memory grows with every job";
  if (!fds_warm.empty() && !fds_end.empty()) {
    EXPECT_LE(fds_end.count("/proc/PID (gone)") ? fds_end.at("/proc/PID (gone)") : 0, 3)
        << "descriptors kept for exited processes";
    // A leak per job would add one descriptor of some kind per job (24 jobs between the two counts); a few more
    // sockets is an HTTP client's keep-alive connection, not a leak; a process that exited since the per-process
    // sampler's last scan may still be held (bounded above: on an idle node that scan comes every
    // host.idle_host_slow_interval, 30 s, so the last wave's processes are).
    std::string grown;
    for (const auto& [kind, n] : fds_end)
      if (n > (fds_warm.count(kind) ? fds_warm.at(kind) : 0)) grown += " " + kind + " " + std::to_string(n);
    EXPECT_LE(total(fds_end), total(fds_warm) + 6) << "file descriptors leak per job; grown:" << grown;
    for (const auto& [kind, n] : fds_end) {
      if (kind.rfind("socket", 0) != 0 && kind != "/proc/PID (gone)") {
        EXPECT_LE(n, (fds_warm.count(kind) ? fds_warm.at(kind) : 0) + 2) << kind << ": leaks per job";
      }
    }
    std::cerr << "descriptor kinds grown:" << (grown.empty() ? " none" : grown) << "\n";
  }
  else std::cerr << "other torch processes kept the agent busy: descriptors not compared\n";
  std::string body;
  EXPECT_EQ(http_get(agent.port, "/healthz", &body), 200) << body;
  EXPECT_EQ(agent.proc.stop(SIGTERM, 60s), 0) << read_file(agent.log);
}

// A launcher that does not import torch and starts two ranks (RANK, WORLD_SIZE=2), as eval/stragglers/ddp_job.py does
// on a CPU: one job, one tracer (one incident engine, one set of samplers) for launcher and ranks, not one per rank;
// and when the launcher dies before its ranks, the ranks left are still that job, not new jobs to trace.
TEST(AgentDaemon, TracesALauncherAndItsRanksWithOneTracer) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (eBPF)";
  if (!have_torch()) GTEST_SKIP() << "python3-torch missing";
  TempDir dir;
  Agent agent(dir, {"--set", "discovery.command_filter=" + dir.path()});
  ASSERT_GT(agent.port, 0) << read_file(agent.log);
  write_file(dir.file("job.py"),
             "import os, subprocess, sys, time\n"
             "if len(sys.argv) == 1:\n"
             "    cs = [subprocess.Popen([sys.executable, __file__, 'rank'], env=dict(os.environ, RANK=str(r),"
             " WORLD_SIZE='2')) for r in range(2)]\n"
             "    open(os.path.join(os.path.dirname(__file__), 'ranks'), 'w').write(' '.join(str(c.pid) for c in cs))\n"
             "    time.sleep(60)\n"
             "else:\n    import torch\n    t = time.time()\n"
             "    while time.time() < t + 60: torch.ones(64, 64).sum(); time.sleep(0.01)\n");
  Child launcher({"/usr/bin/python3", dir.file("job.py")}, dir.file("job.log"));
  std::vector<pid_t> ranks;
  auto kill_ranks = [&] {
    for (pid_t r : ranks) kill(r, SIGKILL);
  };
  const std::string name = "python3-" + std::to_string(launcher.pid);
  const std::string one_job = "tracing job " + name + " (pid " + std::to_string(launcher.pid) + ", 3 process(es)";
  const bool traced = wait_for([&] { return agent.count(one_job) == 1; }, 60s);
  std::istringstream in(read_file(dir.file("ranks")));
  for (pid_t r; in >> r;) ranks.push_back(r);
  if (!traced) kill_ranks();
  ASSERT_TRUE(traced) << read_file(agent.log);
  ASSERT_EQ(ranks.size(), 2u);
  auto jobs_traced = [&] {
    std::string h;
    return http_get(agent.port, "/healthz", &h) == 200 ? nlohmann::json::parse(h)["jobs_traced"].get<int>() : -1;
  };
  EXPECT_EQ(jobs_traced(), 1);
  // The launcher dies; its ranks live on, reparented: still the one job, for several scans.
  launcher.stop(SIGKILL, 5s);
  std::this_thread::sleep_for(3s);
  EXPECT_EQ(jobs_traced(), 1);
  EXPECT_EQ(agent.count("tracing job "), 1u) << read_file(agent.log);
  EXPECT_EQ(agent.count("job " + name + " ended"), 0u) << read_file(agent.log);
  kill_ranks();
  EXPECT_TRUE(wait_for([&] { return agent.count("job " + name + " ended") == 1; }, 30s)) << read_file(agent.log);
  EXPECT_EQ(agent.count("tracing job "), 1u) << read_file(agent.log);
  EXPECT_EQ(agent.proc.stop(SIGTERM, 60s), 0) << read_file(agent.log);
}

// What any user of the node can do to the root agent's discovery, done as nobody (setpriv): a job whose command line
// is 1.5 MB under a command filter, jobs whose names are invalid UTF-8 or hold "../", and jobs enough to take every
// tracing slot, real or made by renaming another library.
namespace {
namespace agent_testing = stackscope::agent::testing;
constexpr uint32_t kNobody = 65534;

nlohmann::json healthz(int port) {
  std::string body;
  return http_get(port, "/healthz", &body) == 200 ? nlohmann::json::parse(body) : nlohmann::json();
}

bool valid_utf8(const std::string& text) {
  try {
    (void)nlohmann::json(text).dump();
    return true;
  } catch (const nlohmann::json::type_error&) {
    return false;
  }
}
}  // namespace

TEST(AgentDaemon, SurvivesAMegabyteCommandLineUnderItsCommandFilter) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (eBPF)";
  STACKSCOPE_REQUIRE(run_command("command -v setpriv") == 0, "setpriv (util-linux) missing");
  TempDir dir;
  const auto cuda = agent_testing::fake_cuda_in(dir.path());
  // As an operator would write it: `.*` between two words, over a command line of 15 arguments of 100 KB.
  Agent agent(dir, {"--set", "discovery.command_filter=python3.*" + dir.path() + ".*train"});
  ASSERT_GT(agent.port, 0) << read_file(agent.log);
  std::vector<std::string> padding(15, std::string(100'000, 'x'));
  padding.push_back("train");
  agent_testing::MappingProcess job(kNobody, cuda, "", padding);
  const std::string name = "python3-" + std::to_string(job.pid);
  EXPECT_TRUE(wait_for([&] { return agent.count("tracing job " + name) == 1 || agent.proc.exited(); }, 60s))
      << read_file(agent.log);
  ASSERT_FALSE(agent.proc.exited()) << "the agent died: " << read_file(agent.log).substr(0, 4000);
  EXPECT_EQ(healthz(agent.port).value("jobs_traced", 0), 1);
  EXPECT_EQ(agent.proc.stop(SIGTERM, 60s), 0) << read_file(agent.log);
}

TEST(AgentDaemon, TracesJobsWhoseNamesAreInvalidUtf8OrPaths) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (eBPF)";
  STACKSCOPE_REQUIRE(run_command("command -v setpriv") == 0, "setpriv (util-linux) missing");
  TempDir dir;
  const auto cuda = agent_testing::fake_cuda_in(dir.path());
  Agent agent(dir, {"--set", "discovery.command_filter=" + dir.path()});
  ASSERT_GT(agent.port, 0) << read_file(agent.log);
  agent_testing::MappingProcess bytes(kNobody, cuda, "\xff\xfe\x1b[2Jjob");
  agent_testing::MappingProcess path(kNobody, cuda, "../../evil");
  // Their names as labels: invalid UTF-8 as U+FFFD, the terminal escape written out.
  const std::string bytes_name = "\xEF\xBF\xBD\xEF\xBF\xBD?[2Jjob-" + std::to_string(bytes.pid);
  const std::string path_name = "../../evil-" + std::to_string(path.pid);
  ASSERT_TRUE(wait_for([&] { return healthz(agent.port).value("jobs_traced", 0) == 2 || agent.proc.exited(); }, 60s))
      << read_file(agent.log);
  const std::string log = read_file(agent.log);
  EXPECT_EQ(agent.count("tracing job " + bytes_name + " "), 1u) << log;
  EXPECT_EQ(agent.count("tracing job " + path_name + " "), 1u) << log;
  EXPECT_EQ(agent.count("cannot trace"), 0u) << log;
  EXPECT_TRUE(valid_utf8(log)) << "raw bytes in the log";
  std::string metrics;
  ASSERT_EQ(http_get(agent.port, "/metrics", &metrics), 200);
  EXPECT_TRUE(valid_utf8(metrics));
  EXPECT_NE(metrics.find("job_name=\"" + bytes_name + "\""), std::string::npos) << metrics.substr(0, 3000);
  // Each job's segments are in a folder of data_dir/jobs, none elsewhere ("../../evil" is not a path).
  size_t folders = 0;
  for (const auto& e : fs::directory_iterator(dir.file("data/jobs"))) folders += e.is_directory();
  EXPECT_EQ(folders, 2u);
  for (const auto& e : fs::directory_iterator(dir.path()))
    EXPECT_EQ(e.path().filename().string().rfind("evil", 0), std::string::npos) << e.path();
  EXPECT_EQ(agent.proc.stop(SIGTERM, 60s), 0) << read_file(agent.log);
}

TEST(AgentDaemon, OneUserCannotTakeEveryTracingSlot) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (eBPF)";
  STACKSCOPE_REQUIRE(run_command("command -v setpriv") == 0, "setpriv (util-linux) missing");
  TempDir dir;
  const auto cuda = agent_testing::fake_cuda_in(dir.path());
  fs::copy_file(STACKSCOPE_FAKE_NVML, dir.file("libcudart.so.12"));  // another library, named as the CUDA runtime
  // 8 jobs at most, 2 of one user other than root; root's jobs count only against the 8.
  Agent agent(dir, {"--set", "discovery.command_filter=" + dir.path(), "--set", "discovery.max_jobs_per_user=2"});
  ASSERT_GT(agent.port, 0) << read_file(agent.log);
  // Nine of nobody's processes mapping the renamed library, then five mapping the fake CUDA runtime, then three of
  // root's.
  std::vector<std::unique_ptr<agent_testing::MappingProcess>> procs;
  for (int i = 0; i < 9; ++i)
    procs.push_back(std::make_unique<agent_testing::MappingProcess>(
        kNobody, std::vector<std::string>{dir.file("libcudart.so.12")}));
  for (int i = 0; i < 5; ++i) procs.push_back(std::make_unique<agent_testing::MappingProcess>(kNobody, cuda));
  std::vector<std::unique_ptr<agent_testing::MappingProcess>> root_jobs;
  for (int i = 0; i < 3; ++i) root_jobs.push_back(std::make_unique<agent_testing::MappingProcess>(0, cuda));
  ASSERT_TRUE(wait_for([&] {
    const auto h = healthz(agent.port);
    return (h.value("jobs_traced", 0) == 5 && h.value("jobs_untraced", 0) == 3) || agent.proc.exited();
  }, 60s)) << healthz(agent.port).dump() << "\n" << read_file(agent.log);
  for (const auto& r : root_jobs)
    EXPECT_EQ(agent.count("tracing job python3-" + std::to_string(r->pid) + " "), 1u) << read_file(agent.log);
  for (int i = 0; i < 9; ++i)
    EXPECT_EQ(agent.count("job python3-" + std::to_string(procs[i]->pid) + " "), 0u) << "a renamed library's job";
  // Each one left out is said once, not at every scan (500 ms here), and counted.
  std::this_thread::sleep_for(2s);
  EXPECT_EQ(agent.count("for now: uid 65534 has discovery.max_jobs_per_user (2) traced"), 3u) << read_file(agent.log);
  std::string metrics;
  ASSERT_EQ(http_get(agent.port, "/metrics", &metrics), 200);
  EXPECT_NE(metrics.find("stackscope_jobs_untraced 3"), std::string::npos);
  EXPECT_EQ(healthz(agent.port).value("jobs_traced", 0), 5);
  EXPECT_EQ(agent.proc.stop(SIGTERM, 60s), 0) << read_file(agent.log);
}

// kill -9 of the agent while a job runs, then a restart: the job's incidents log is appended to, not emptied, and
// /api/incidents serves the incidents it holds (the segments store them only when they close), without announcing
// them again. The incident is the line the engine writes, put in the log while the agent is down.
TEST(AgentDaemon, IncidentsSurviveAKilledAgent) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (eBPF)";
  if (!have_torch()) GTEST_SKIP() << "python3-torch missing";
  TempDir dir;
  const std::vector<std::string> only_this_test{"--set", "discovery.command_filter=" + dir.path()};
  auto first = std::make_unique<Agent>(dir, only_this_test);
  ASSERT_GT(first->port, 0) << read_file(first->log);
  Child job({"/usr/bin/python3", "-c", "import torch, time; time.sleep(120)", dir.path()}, dir.file("job.log"));
  const std::string name = "python3-" + std::to_string(job.pid);
  ASSERT_TRUE(wait_for([&] { return first->count("tracing job " + name) == 1; }, 60s)) << read_file(first->log);
  std::string log;
  for (const auto& e : fs::directory_iterator(dir.file("data/jobs")))
    if (e.path().filename().string().rfind(name + "-", 0) == 0) log = (e.path() / "incidents.jsonl").string();
  ASSERT_TRUE(fs::exists(log)) << "no incidents log of " << name;
  EXPECT_EQ(first->proc.stop(SIGKILL, 10s), 128 + SIGKILL);
  fs::rename(first->log, dir.file("first-agent.log"));
  first.reset();

  const std::string told =
      read_file(log) +
      "{\"id\": 1, \"online\": \"open\", \"job\": \"" + name + "\", \"start_s\": 12.0, \"cause\": {\"class\": "
      "\"cpu_interference\"}, \"summary\": \"step time +40 %\"}\n"
      "{\"id\": 1, \"online\": \"close\", \"job\": \"" + name + "\", \"start_s\": 12.0, \"end_s\": 20.0, \"cause\": "
      "{\"class\": \"cpu_interference\"}, \"summary\": \"step time +40 %\"}\n";
  write_file(log, told);

  Agent second(dir, only_this_test);
  ASSERT_GT(second.port, 0) << read_file(second.log);
  ASSERT_TRUE(wait_for([&] { return second.count("tracing job " + name) == 1; }, 60s)) << read_file(second.log);
  EXPECT_EQ(read_file(log).substr(0, told.size()), told) << "the job's incidents log was emptied";
  std::string body;
  ASSERT_EQ(http_get(second.port, "/api/incidents", &body), 200);
  const auto incidents = nlohmann::json::parse(body)["incidents"];
  ASSERT_EQ(incidents.size(), 1u) << body;
  EXPECT_EQ(incidents[0]["id"], 1);
  EXPECT_EQ(incidents[0]["job"], name);
  EXPECT_EQ(incidents[0]["state"], "closed");
  EXPECT_EQ(incidents[0]["restored"], true);
  EXPECT_EQ(second.count("incident #1 opened"), 0u) << read_file(second.log);
  job.stop(SIGKILL, 5s);
  EXPECT_EQ(second.proc.stop(SIGTERM, 60s), 0) << read_file(second.log);
}

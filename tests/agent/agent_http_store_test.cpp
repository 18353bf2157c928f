// The agent's endpoint and store under hostile or failing conditions: idle and slow HTTP clients, request bodies, a
// bearer token; retention among files the agent did not write; a full disk and the free-space floor; a reload to a
// busy port or an uncreatable data_dir; host counters across sampler restarts.
#include <gtest/gtest.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <regex>
#include <thread>

#include <nlohmann/json.hpp>

#include "agent/agent_config.h"
#include "agent/agent_metrics.h"
#include "agent/http_endpoint.h"
#include "agent/segment_store.h"
#include "model/clock.h"
#include "store/recording_reader.h"
#include "test_util.h"

using namespace stackscope;
using namespace stackscope::agent;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

const std::string kAgentBin = STACKSCOPE_AGENT_BIN;

int connect_loopback(int port, int timeout_s = 10) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{timeout_s, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

struct Reply {
  int status = 0;  // 0: no answer
  std::string head, body;
  bool closed = false;  // the server closed the connection (rather than the wait timing out)
};

// Sends `request` and reads until the server closes the connection or `timeout_s` passes.
Reply http_raw(int port, const std::string& request, int timeout_s = 15) {
  Reply r;
  const int fd = connect_loopback(port, timeout_s);
  if (fd < 0) return r;
  if (write(fd, request.data(), request.size()) != static_cast<ssize_t>(request.size())) {
    close(fd);
    return r;
  }
  std::string resp;
  char buf[65536];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) resp.append(buf, static_cast<size_t>(n));
  r.closed = n == 0 || (n < 0 && errno == ECONNRESET);
  close(fd);
  if (resp.rfind("HTTP/1.", 0) == 0 && resp.size() > 12) r.status = std::atoi(resp.c_str() + 9);
  const auto split = resp.find("\r\n\r\n");
  r.head = resp.substr(0, split);
  if (split != std::string::npos) r.body = resp.substr(split + 4);
  return r;
}

Reply http_get(int port, const std::string& path, const std::string& headers = "", int timeout_s = 15) {
  return http_raw(port, "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n" + headers + "\r\n", timeout_s);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::map<std::string, HttpEndpoint::Handler> test_routes() {
  return {{"/healthz", [] { return HttpResponse{200, "application/json", "{\"status\":\"ok\"}\n"}; }},
          {"/metrics", [] { return HttpResponse{200, "text/plain", "up 1\n"}; }}};
}

// A child process whose stdout and stderr go to a file.
struct Child {
  pid_t pid = -1;
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
      std::this_thread::sleep_for(50ms);
    }
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    pid = -1;
    return -1;
  }
  int exit_status(std::chrono::seconds timeout) {  // waits for it to exit on its own
    int status = 0;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (pid > 0 && std::chrono::steady_clock::now() < deadline) {
      if (waitpid(pid, &status, WNOHANG) == pid) {
        pid = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(50ms);
    }
    return -1;
  }
  ~Child() {
    if (pid > 0) stop(SIGKILL, 5s);
  }
};

// The agent daemon with only the node's host sampler (no job is traced: the test's own processes map no CUDA
// library), scanning every 300 ms; `args` add to or override that.
struct Daemon {
  std::string log;
  std::unique_ptr<Child> proc;
  int port = 0;
  Daemon(const TempDir& dir, std::vector<std::string> args) : log(dir.file("agent.log")) {
    std::vector<std::string> argv{kAgentBin, "agent", "--scan-interval", "300ms", "--set", "host.layers=host",
                                  "--set", "discovery.command_filter=^never-a-job$"};
    argv.insert(argv.end(), args.begin(), args.end());
    proc = std::make_unique<Child>(argv, log);
    const std::regex listening("listening on [0-9.]+:(\\d+)");
    wait_for([&] {
      std::smatch m;
      const std::string text = read_file(log);
      if (std::regex_search(text, m, listening)) port = std::stoi(m[1]);
      return port > 0 || exited();
    }, 30s);
  }
  bool exited() const {  // without reaping it: its exit status stays for Child
    siginfo_t info{};
    return waitid(P_PID, static_cast<id_t>(proc->pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid != 0;
  }
  size_t count(const std::string& what) const {
    const std::string text = read_file(log);
    size_t n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  }
  nlohmann::json health() const {
    const Reply r = http_get(port, "/healthz");
    auto j = nlohmann::json::parse(r.body, nullptr, false);
    return j.is_discarded() ? nlohmann::json{{"status", "no answer"}, {"http", r.status}} : j;
  }
  double metric(const std::string& series) const {  // the value of one exposition line, -1 when absent
    const std::string text = http_get(port, "/metrics").body;
    const auto at = text.find("\n" + series + " ");
    return at == std::string::npos ? -1 : std::stod(text.substr(at + series.size() + 2));
  }
};

}  // namespace

// Idle connections and slow senders each hold a worker for the request deadline at most: /healthz still answers,
// where two idle connections took civetweb's two workers for 10 s each.
TEST(HttpEndpoint, HealthzAnswersWhileIdleAndSlowClientsHoldConnections) {
  HttpEndpoint http("127.0.0.1:0", test_routes(), "", {"/healthz"});
  ASSERT_GT(http.port(), 0);
  std::vector<int> held;
  for (int i = 0; i < 2 * HttpEndpoint::kWorkers; ++i) held.push_back(connect_loopback(http.port()));
  // Slowloris: a request line, then a header byte every 100 ms, never the blank line that ends the headers.
  std::vector<int> slow;
  for (int i = 0; i < 8; ++i) {
    slow.push_back(connect_loopback(http.port()));
    const std::string start = "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ";
    ASSERT_EQ(write(slow.back(), start.data(), start.size()), static_cast<ssize_t>(start.size()));
  }
  std::atomic<bool> done{false};
  std::thread trickle([&] {
    while (!done) {
      for (int fd : slow) (void)!send(fd, "a", 1, MSG_NOSIGNAL);
      std::this_thread::sleep_for(100ms);
    }
  });
  const auto t0 = std::chrono::steady_clock::now();
  const Reply r = http_get(http.port(), "/healthz", "", 30);
  const double took = seconds_since(t0);
  done = true;
  trickle.join();
  EXPECT_EQ(r.status, 200) << r.head;
  // Queued behind two rounds of held workers at most (each round one request deadline): a few seconds, not the
  // 10 s per connection and worker of before.
  EXPECT_LT(took, 3.0 * HttpEndpoint::kRequestTimeoutMs / 1000 + 2) << "seconds for /healthz";
  // The slow senders were cut off at the deadline (a 400 at most), never served.
  for (int fd : slow) {
    std::string got;
    char buf[4096];
    ssize_t n;
    while ((n = read(fd, buf, sizeof buf)) > 0) got.append(buf, static_cast<size_t>(n));
    EXPECT_TRUE(n == 0 || (n < 0 && errno == ECONNRESET)) << "still open";
    EXPECT_EQ(got.find(" 200 "), std::string::npos) << got;
    close(fd);
  }
  for (int fd : held) close(fd);
}

TEST(HttpEndpoint, ARequestBodyIsRefusedAtOnce) {
  HttpEndpoint http("127.0.0.1:0", test_routes(), "", {"/healthz"});
  const auto t0 = std::chrono::steady_clock::now();
  // The body announced never comes: the answer does not wait for it, and the connection is closed.
  const Reply r = http_raw(http.port(),
                           "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999\r\n\r\n", 30);
  const double took = seconds_since(t0);
  EXPECT_EQ(r.status, 413) << r.head;
  EXPECT_TRUE(r.closed);
  EXPECT_LT(took, HttpEndpoint::kRequestTimeoutMs / 1000.0) << "seconds until the connection was closed";
  EXPECT_EQ(http_raw(http.port(), "GET /metrics HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n", 30)
                .status,
            413);
  EXPECT_EQ(http_raw(http.port(), "POST /metrics HTTP/1.0\r\nContent-Length: 2\r\n\r\nab").status, 405);
  EXPECT_EQ(http_get(http.port(), "/healthz").status, 200);
}

TEST(HttpEndpoint, BearerTokenGuardsEveryRouteButHealthz) {
  HttpEndpoint http("127.0.0.1:0", test_routes(), "s3cret-token", {"/healthz"});
  const Reply none = http_get(http.port(), "/metrics");
  EXPECT_EQ(none.status, 401);
  EXPECT_NE(none.head.find("WWW-Authenticate: Bearer"), std::string::npos) << none.head;
  EXPECT_EQ(none.body.find("up 1"), std::string::npos);
  EXPECT_EQ(http_get(http.port(), "/metrics", "Authorization: Bearer s3cret-tokeN\r\n").status, 401);
  EXPECT_EQ(http_get(http.port(), "/metrics", "Authorization: Bearer s3cret-token-and-more\r\n").status, 401);
  EXPECT_EQ(http_get(http.port(), "/metrics", "Authorization: Basic czNjcmV0LXRva2Vu\r\n").status, 401);
  const Reply ok = http_get(http.port(), "/metrics", "Authorization: Bearer s3cret-token\r\n");
  EXPECT_EQ(ok.status, 200);
  EXPECT_EQ(ok.body, "up 1\n");
  EXPECT_EQ(http_get(http.port(), "/healthz").status, 200);  // the kubelet's probes carry no token
  http.set_token("rotated");
  EXPECT_EQ(http_get(http.port(), "/metrics", "Authorization: Bearer s3cret-token\r\n").status, 401);
  EXPECT_EQ(http_get(http.port(), "/metrics", "Authorization: bearer rotated\r\n").status, 200);
}

TEST(HttpEndpoint, TokenFileMustBeTheOwnersOnly) {
  TempDir dir;
  const std::string path = dir.file("token");
  write_file(path, "abc123-token\n");
  ::chmod(path.c_str(), 0644);
  try {
    read_http_token(path);
    FAIL() << "a token file others may read was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("chmod 600"), std::string::npos) << e.what();
  }
  ::chmod(path.c_str(), 0600);
  EXPECT_EQ(read_http_token(path), "abc123-token");
  write_file(path, "\n");
  EXPECT_THROW(read_http_token(path), std::invalid_argument);
  write_file(path, "two words\n");
  EXPECT_THROW(read_http_token(path), std::invalid_argument);
  EXPECT_THROW(read_http_token(dir.file("missing")), std::invalid_argument);
}

// The agent with http.token_file: /metrics needs the token, /healthz does not; a new token is read on SIGHUP; a
// token file others may read stops the start with a message that says how to fix it.
TEST(AgentDaemon, BearerTokenFromItsFile) {
  STACKSCOPE_REQUIRE(::geteuid() == 0, "needs root (the agent's samplers)");
  TempDir dir;
  const std::string token = dir.file("token");
  write_file(token, "first-token\n");
  ::chmod(token.c_str(), 0600);
  const std::string config = dir.file("agent.toml");
  write_file(config, "[http]\ntoken_file = \"" + token + "\"\n");
  Daemon agent(dir, {"--config", config, "--data-dir", dir.file("data"), "--listen", "127.0.0.1:0"});
  ASSERT_GT(agent.port, 0) << read_file(agent.log);
  EXPECT_EQ(http_get(agent.port, "/metrics").status, 401);
  EXPECT_EQ(http_get(agent.port, "/api/incidents").status, 401);
  EXPECT_EQ(http_get(agent.port, "/healthz").status, 200);
  EXPECT_EQ(http_get(agent.port, "/metrics", "Authorization: Bearer first-token\r\n").status, 200);
  write_file(token, "second-token\n");
  kill(agent.proc->pid, SIGHUP);
  ASSERT_TRUE(wait_for([&] { return agent.count("configuration reloaded") == 1; }, 20s)) << read_file(agent.log);
  EXPECT_EQ(http_get(agent.port, "/metrics", "Authorization: Bearer first-token\r\n").status, 401);
  EXPECT_EQ(http_get(agent.port, "/metrics", "Authorization: Bearer second-token\r\n").status, 200);
  EXPECT_EQ(agent.proc->stop(SIGTERM, 30s), 0) << read_file(agent.log);

  ::chmod(token.c_str(), 0644);
  TempDir other;
  Daemon refused(other, {"--config", config, "--data-dir", other.file("data"), "--listen", "127.0.0.1:0"});
  EXPECT_EQ(refused.proc->exit_status(30s), 1) << read_file(refused.log);
  EXPECT_NE(read_file(refused.log).find("chmod 600"), std::string::npos) << read_file(refused.log);
}

// A host counter exported from the node's samples is the source's total, also after the samplers restart (a
// reload makes a new exporter): not the total added once more each time.
TEST(AgentMetrics, HostCountersStayTheTrueTotalAcrossSamplerRestarts) {
  AgentMetrics m("node1", "0.1.0");
  struct Null final : TelemetrySink {
    SeriesId add_series(const SeriesInfo&) override { return ++n; }
    void append_event(Event&&) override {}
    void append_samples(std::span<const Sample>) override {}
    void add_drops(std::string_view, uint64_t) override {}
    void add_note(std::string_view, std::string_view) override {}
    SeriesId n = 0;
  };
  const auto info = series_info("gpu.energy", "gpu0", Subsystem::gpu, "joules", SeriesKind::counter,
                                SeriesCategory::dynamic, "nvml");
  const std::string series = "stackscope_gpu_energy_joules_total{gpu=\"gpu0\"} ";
  auto value = [&] {
    const std::string text = m.scrape();
    const auto at = text.find(series);
    return at == std::string::npos ? -1.0 : std::stod(text.substr(at + series.size()));
  };
  for (double total : {722.0, 725.0, 731.0}) {  // each a restart of the samplers, the source counting on
    Null null;
    auto exporter = m.host_exporter(null, 100);
    const SeriesId id = exporter->add_series(info);
    Sample s{id, 1, total};
    exporter->append_samples(std::span(&s, 1));
    EXPECT_DOUBLE_EQ(value(), total);
  }
}

// The DaemonSet's endpoint is not open to every pod: a NetworkPolicy admits one namespace to port 9477, and the
// agent reads its bearer token from a Secret mounted owner-only.
TEST(AgentDeploy, DaemonSetNeedsATokenAndANetworkPolicyGuardsIt) {
  STACKSCOPE_REQUIRE(run_command("/usr/bin/python3 -c 'import yaml'") == 0, "python3-yaml missing");
  const std::string path = std::string(STACKSCOPE_SOURCE_DIR) + "/deploy/kubernetes/stackscope-agent.yaml";
  std::string out;
  ASSERT_EQ(run_command("/usr/bin/python3 -c \"import json, yaml; print(json.dumps(list(yaml.safe_load_all(open('" +
                            path + "')))))\"",
                        &out),
            0)
      << out;
  nlohmann::json ds, policy, config;
  for (const auto& d : nlohmann::json::parse(out)) {
    if (d["kind"] == "DaemonSet") ds = d;
    if (d["kind"] == "NetworkPolicy") policy = d;
    if (d["kind"] == "ConfigMap") config = d;
  }
  ASSERT_FALSE(policy.is_null()) << "no NetworkPolicy";
  EXPECT_EQ(policy["spec"]["podSelector"]["matchLabels"], ds["spec"]["selector"]["matchLabels"]);
  ASSERT_EQ(policy["spec"]["ingress"].size(), 1u);
  const auto& rule = policy["spec"]["ingress"][0];
  EXPECT_FALSE(rule["from"].empty()) << "ingress from anywhere";
  EXPECT_EQ(rule["ports"][0]["port"], 9477);
  const auto& spec = ds["spec"]["template"]["spec"];
  std::string token_dir;
  for (const auto& v : spec["volumes"])
    if (v.contains("secret")) {
      EXPECT_EQ(v["secret"]["defaultMode"], 0400) << v;
      for (const auto& m : spec["containers"][0]["volumeMounts"])
        if (m["name"] == v["name"]) token_dir = m["mountPath"];
    }
  ASSERT_FALSE(token_dir.empty()) << "no Secret mounted";
  const std::string toml = config["data"]["agent.toml"];
  EXPECT_NE(toml.find("token_file = \"" + token_dir + "/"), std::string::npos) << toml;
}

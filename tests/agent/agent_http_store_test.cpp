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
#include "agent/agent_test_util.h"
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

// A small tmpfs, unmounted at the end; empty path() when it cannot be mounted (not root, no CAP_SYS_ADMIN).
struct SmallDisk {
  TempDir dir;
  std::string mounted;
  explicit SmallDisk(const std::string& size) {
    const std::string at = dir.file("disk");
    fs::create_directories(at);
    if (::mount("tmpfs", at.c_str(), "tmpfs", 0, ("size=" + size + ",mode=0700").c_str()) == 0) mounted = at;
  }
  ~SmallDisk() {
    if (!mounted.empty()) ::umount2(mounted.c_str(), MNT_DETACH);
  }
  const std::string& path() const { return mounted; }
  // Writes `name` until the disk is full, or up to `bytes`; returns what it wrote.
  uint64_t fill(const std::string& name, uint64_t bytes = UINT64_MAX) const {
    const int fd = ::open((mounted + "/" + name).c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
    std::string chunk(1 << 16, 'x');
    uint64_t done = 0;
    while (done < bytes) {
      const size_t want = static_cast<size_t>(std::min<uint64_t>(chunk.size(), bytes - done));
      const ssize_t n = ::write(fd, chunk.data(), want);
      if (n <= 0) break;
      done += static_cast<uint64_t>(n);
    }
    ::close(fd);
    return done;
  }
};

using stackscope::agent::testing::Child;

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

// Idle connections and slow senders each hold a worker for the request deadline at most: /healthz still answers.
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
  // Queued behind two rounds of held workers at most (each round one request deadline): a few seconds.
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

// Retention deletes the agent's segments only: a user's files and folders under data_dir, an old recording of
// theirs among them, stay, and a job folder with the user's file in it is kept (without the agent's files).
TEST(SegmentStore, RetentionDeletesOnlyWhatTheAgentWrote) {
  TempDir dir;
  const std::string root = dir.file("data");
  auto manifest = std::make_shared<StoreManifest>(root);
  const int64_t now_s = realtime_ns() / 1'000'000'000;
  auto age = [&](const std::string& p, int64_t age_s) {
    timespec times[2] = {{now_s - age_s, 0}, {now_s - age_s, 0}};
    ASSERT_EQ(utimensat(AT_FDCWD, p.c_str(), times, 0), 0) << p;
  };
  SegmentOptions so;
  so.prefix = "segment";
  so.manifest = manifest;
  std::vector<std::string> agent_segments;
  for (const char* job : {"jobs/a-1", "jobs/b-2"}) {
    so.dir = root + "/" + job;
    SegmentedRecording rec(so);
    agent_segments.push_back(rec.close());
    manifest->add_file(so.dir + "/incidents.jsonl");
    write_file(so.dir + "/incidents.jsonl", "{}\n");
  }
  // The user's: notes and a source tree beside the agent's folders, an old recording of theirs at the top and in a
  // folder of theirs, and a note in one of the agent's job folders.
  write_file(root + "/notes.txt", "mine");
  fs::create_directories(root + "/src/pkg");
  write_file(root + "/src/pkg/train.py", "print(1)");
  write_file(root + "/old.sdb", std::string(5000, 'x'));
  fs::create_directories(root + "/mine");
  write_file(root + "/mine/run.sdb", std::string(5000, 'x'));
  write_file(root + "/jobs/b-2/notes.txt", "mine too");
  for (const auto& p : {root + "/old.sdb", root + "/mine/run.sdb", agent_segments[0], agent_segments[1]})
    age(p, 30 * 86400);

  const auto r = apply_retention(*manifest, 1ull << 30, 86'400'000'000'000, 0, {}, {});
  EXPECT_EQ(r.deleted, 2u);
  for (const auto& p : agent_segments) EXPECT_FALSE(fs::exists(p)) << p;
  EXPECT_FALSE(fs::exists(root + "/jobs/a-1"));  // the agent's folder, left empty
  EXPECT_FALSE(fs::exists(root + "/jobs/b-2/incidents.jsonl"));
  EXPECT_EQ(read_file(root + "/jobs/b-2/notes.txt"), "mine too");
  EXPECT_EQ(read_file(root + "/notes.txt"), "mine");
  EXPECT_EQ(read_file(root + "/src/pkg/train.py"), "print(1)");
  EXPECT_TRUE(fs::exists(root + "/old.sdb"));
  EXPECT_TRUE(fs::exists(root + "/mine/run.sdb"));
  // Also under pressure of size and free space: nothing of the user's goes.
  apply_retention(*manifest, 1, 1'000'000'000, UINT64_MAX, {}, {});
  EXPECT_TRUE(fs::exists(root + "/old.sdb") && fs::exists(root + "/mine/run.sdb") && fs::exists(root + "/notes.txt"));

  // The list survives a restart: a segment made, the agent restarted, the segment old: it goes.
  so.dir = root + "/node";
  so.prefix = "node";
  std::string node_segment;
  {
    SegmentedRecording rec(so);
    node_segment = rec.close();
  }
  age(node_segment, 30 * 86400);
  StoreManifest again(root);
  EXPECT_TRUE(again.has_file(node_segment));
  EXPECT_FALSE(again.has_file(root + "/old.sdb"));
  EXPECT_EQ(apply_retention(again, 1ull << 30, 86'400'000'000'000, 0, {}, {}).deleted, 1u);
  EXPECT_FALSE(fs::exists(node_segment));
}

// A data_dir of an agent from before the manifest: its segments are recognised (by path and metadata) and listed,
// a user's file of the same name pattern is not.
TEST(SegmentStore, SegmentsOfAnEarlierAgentAreAdopted) {
  TempDir dir;
  const std::string root = dir.file("data");
  SegmentOptions so;
  so.dir = root + "/jobs/python3-7-100";
  so.prefix = "segment";
  so.meta["config"] = nlohmann::json{{"agent", true}, {"layers", {"host"}}}.dump();
  std::string written;
  {
    SegmentedRecording rec(so);  // no manifest: as the earlier agent wrote it
    written = rec.close();
  }
  write_file(so.dir + "/incidents.jsonl", "{}\n");
  fs::create_directories(root + "/jobs/theirs");
  write_file(root + "/jobs/theirs/segment-1.sdb", "not a recording");
  StoreManifest m(root);
  EXPECT_EQ(m.adopted(), 1u);
  EXPECT_TRUE(m.has_file(written));
  EXPECT_TRUE(m.has_file(so.dir + "/incidents.jsonl"));
  EXPECT_TRUE(m.has_dir(so.dir));
  EXPECT_FALSE(m.has_file(root + "/jobs/theirs/segment-1.sdb"));
  EXPECT_FALSE(m.has_dir(root + "/jobs/theirs"));
  EXPECT_EQ(StoreManifest(root).adopted(), 0u);  // once: the manifest now exists
}

// A full disk: what the segment cannot take is counted, the chain goes on in a new segment once there is room,
// and the gap shows in that segment's drops.
TEST(SegmentStore, AFullDiskIsCountedAndWritingResumesInANewSegment) {
  STACKSCOPE_REQUIRE(::geteuid() == 0, "needs root to mount a small tmpfs");
  SmallDisk disk("16m");
  if (disk.path().empty()) GTEST_SKIP() << "cannot mount a tmpfs here";
  auto manifest = std::make_shared<StoreManifest>(disk.path());
  SegmentOptions so;
  so.dir = disk.path() + "/node";
  so.prefix = "node";
  so.manifest = manifest;
  SegmentedRecording rec(so);
  const SeriesId id = rec.add_series(
      series_info("test.value", "", Subsystem::cpu, "count", SeriesKind::gauge, SeriesCategory::dynamic));
  const std::string first = rec.current_path();
  disk.fill("filler");
  int64_t t = monotonic_ns();
  auto append = [&](int n) {
    for (int i = 0; i < n; ++i, ++t) {
      Event e;
      e.layer = Layer::torch;
      e.pid = 42;
      e.start_ns = t;
      e.name = "op_" + std::to_string(t % 9973);
      rec.append_event(std::move(e));
      Sample s{id, t, static_cast<double>(t)};
      rec.append_samples(std::span(&s, 1));
    }
  };
  ASSERT_TRUE(wait_for([&] {
    append(20000);
    return rec.failed();
  }, 30s)) << "the segment never failed on a full disk";
  append(1000);
  EXPECT_NE(rec.check().find("not writing"), std::string::npos);
  EXPECT_NE(rec.error().find("failed"), std::string::npos) << rec.error();
  EXPECT_EQ(rec.check("the disk is full"), "");  // one line per episode
  append(1000);
  const StoreLoss lost = rec.lost();
  EXPECT_GE(lost.events, 2000u);
  EXPECT_GE(lost.samples, 2000u);
  fs::remove(disk.path() + "/filler");
  const std::string line = rec.check();
  EXPECT_NE(line.find("writing again"), std::string::npos) << line;
  EXPECT_EQ(rec.error(), "");
  const std::string second = rec.current_path();
  EXPECT_NE(second, first);
  EXPECT_TRUE(manifest->has_file(second));
  append(500);
  rec.close();
  RecordingReader r(second);
  uint64_t events = 0;
  r.for_each_event({}, [&](const Event&) { ++events; });
  EXPECT_EQ(events, 500u);
  const auto drops = r.summary().drops;
  ASSERT_TRUE(drops.count("store.unwritable")) << "the gap is not in the new segment";
  EXPECT_GE(drops.at("store.unwritable"), 2000u);
}

// Below the free-space floor retention deletes the agent's oldest closed segments until there is room again, and
// never an open one or a file of someone else's.
TEST(SegmentStore, RetentionKeepsTheFreeSpaceFloor) {
  STACKSCOPE_REQUIRE(::geteuid() == 0, "needs root to mount a small tmpfs");
  SmallDisk disk("32m");
  if (disk.path().empty()) GTEST_SKIP() << "cannot mount a tmpfs here";
  StoreManifest manifest(disk.path());
  manifest.create_dirs(disk.path() + "/node");
  const int64_t now_s = realtime_ns() / 1'000'000'000;
  std::vector<std::string> segments;
  for (int i = 0; i < 4; ++i) {  // 4 MiB each, oldest first
    const std::string p = disk.path() + "/node/node-" + std::to_string(i) + ".sdb";
    write_file(p, std::string(4 << 20, 'x'));
    timespec times[2] = {{now_s - 100 + i, 0}, {now_s - 100 + i, 0}};
    utimensat(AT_FDCWD, p.c_str(), times, 0);
    manifest.add_file(p);
    segments.push_back(p);
  }
  disk.fill("user-data", 12 << 20);  // 16 + 12 of 32 MiB: about 4 MiB free
  ASSERT_LT(free_bytes(disk.path()), 5ull << 20);
  const uint64_t floor = 10ull << 20;
  const auto r = apply_retention(manifest, 1ull << 40, 86'400'000'000'000, floor, {segments[0]}, {});
  EXPECT_GE(r.free_bytes, floor);
  EXPECT_GE(free_bytes(disk.path()), floor);
  EXPECT_TRUE(fs::exists(segments[0])) << "open: never deleted";
  EXPECT_FALSE(fs::exists(segments[1]));
  EXPECT_FALSE(fs::exists(segments[2]));
  EXPECT_TRUE(fs::exists(segments[3])) << "deleted beyond the floor";
  EXPECT_EQ(fs::file_size(disk.path() + "/user-data"), 12u << 20);
}

// The agent on a full data_dir: /healthz says so, the node's lost samples are counted and logged once, and it
// writes again on the next scan after room is made. Then the free-space floor stops it before the disk is full.
TEST(AgentDaemon, FullDataDirIsCountedReportedAndResumed) {
  STACKSCOPE_REQUIRE(::geteuid() == 0, "needs root (the agent's samplers, a tmpfs)");
  SmallDisk disk("32m");
  if (disk.path().empty()) GTEST_SKIP() << "cannot mount a tmpfs here";
  TempDir dir;
  const std::string config = dir.file("agent.toml");
  write_file(config, "[store]\nmin_free = \"0\"\n");
  Daemon agent(dir, {"--config", config, "--data-dir", disk.path(), "--listen", "127.0.0.1:0", "--host-interval",
                     "100ms"});
  ASSERT_GT(agent.port, 0) << read_file(agent.log);
  ASSERT_EQ(agent.health()["status"], "ok") << read_file(agent.log);
  disk.fill("filler");
  ASSERT_TRUE(wait_for([&] { return agent.health()["status"] == "degraded"; }, 30s)) << read_file(agent.log);
  EXPECT_NE(agent.health()["store_error"].get<std::string>().find("node"), std::string::npos) << agent.health();
  ASSERT_TRUE(wait_for([&] { return agent.metric("stackscope_store_dropped_total{kind=\"samples\"}") > 0; }, 10s));
  std::this_thread::sleep_for(1s);  // several scans: still one line
  EXPECT_EQ(agent.count("node: not writing"), 1u) << read_file(agent.log);
  fs::remove(disk.path() + "/filler");
  ASSERT_TRUE(wait_for([&] { return agent.health()["status"] == "ok"; }, 10s)) << read_file(agent.log);
  EXPECT_EQ(agent.count("node: writing again"), 1u) << read_file(agent.log);

  // The floor: 12 MiB kept free. Filled to 8 MiB free, the agent deletes what it can and then stops writing.
  write_file(config, "[store]\nmin_free = \"12MiB\"\n");
  kill(agent.proc->pid, SIGHUP);
  ASSERT_TRUE(wait_for([&] { return agent.count("configuration reloaded") == 1; }, 10s)) << read_file(agent.log);
  const uint64_t free_now = free_bytes(disk.path());
  disk.fill("filler", free_now - (8ull << 20));
  ASSERT_TRUE(wait_for([&] {
    const auto h = agent.health();
    return h["status"] == "degraded" && h["store_error"].get<std::string>().find("store.min_free") != std::string::npos;
  }, 10s)) << agent.health() << read_file(agent.log);
  const double lost = agent.metric("stackscope_store_dropped_total{kind=\"samples\"}");
  ASSERT_TRUE(wait_for([&] { return agent.metric("stackscope_store_dropped_total{kind=\"samples\"}") > lost; }, 10s));
  EXPECT_GE(free_bytes(disk.path()), 7ull << 20) << "the agent wrote on below the floor";
  fs::remove(disk.path() + "/filler");
  ASSERT_TRUE(wait_for([&] { return agent.health()["status"] == "ok"; }, 10s)) << read_file(agent.log);
  EXPECT_EQ(agent.proc->stop(SIGTERM, 30s), 0) << read_file(agent.log);
}

// A traced job's segment on a full disk: its lost events are counted in stackscope_job_dropped_events_total and
// logged once, and the job is stored again, in a new segment, once there is room.
TEST(AgentDaemon, AJobsEventsLostToAFullDiskAreCounted) {
  STACKSCOPE_REQUIRE(::geteuid() == 0, "needs root (eBPF, a tmpfs)");
  STACKSCOPE_REQUIRE(run_command("/usr/bin/python3 -c 'import torch'") == 0, "python3-torch missing");
  SmallDisk disk("64m");
  if (disk.path().empty()) GTEST_SKIP() << "cannot mount a tmpfs here";
  TempDir dir;
  // Only this test's job (its command line names the test's folder); no floor, so that the disk fills.
  Daemon agent(dir, {"--data-dir", disk.path(), "--listen", "127.0.0.1:0", "--set", "store.min_free=0", "--set",
                     "discovery.command_filter=" + dir.path(), "--set", "trace.layers=torch,python"});
  ASSERT_GT(agent.port, 0) << read_file(agent.log);
  fs::copy_file(std::string(STACKSCOPE_SOURCE_DIR) + "/workloads/cpu_train.py", dir.file("cpu_train.py"));
  Child job({"/usr/bin/python3", dir.file("cpu_train.py"), "--seconds", "60"}, dir.file("job.log"));
  const std::string name = "python3-" + std::to_string(job.pid);
  ASSERT_TRUE(wait_for([&] { return agent.count("tracing job " + name) == 1; }, 60s)) << read_file(agent.log);
  const std::string events_sum = "stackscope_job_events_total{";
  ASSERT_TRUE(wait_for([&] { return http_get(agent.port, "/metrics").body.find(events_sum) != std::string::npos; },
                       30s));
  const std::string dropped = "stackscope_job_dropped_events_total{container=\"\",job_name=\"" + name + "\",pod=\"\"}";
  EXPECT_EQ(agent.metric(dropped), 0);
  disk.fill("filler");
  ASSERT_TRUE(wait_for([&] { return agent.metric(dropped) > 0; }, 30s)) << read_file(agent.log);
  EXPECT_EQ(agent.count("job " + name + ": not writing"), 1u) << read_file(agent.log);
  EXPECT_NE(agent.health()["store_error"].get<std::string>().find(name), std::string::npos) << agent.health();
  fs::remove(disk.path() + "/filler");
  ASSERT_TRUE(wait_for([&] { return agent.count("job " + name + ": writing again") == 1; }, 10s))
      << read_file(agent.log);
  job.stop(SIGKILL, 5s);
  EXPECT_EQ(agent.proc->stop(SIGTERM, 60s), 0) << read_file(agent.log);
}

// SIGHUP with `listen` moved to a port another process holds: the agent goes on serving where it was, says so and
// counts an error; the next SIGHUP, once the port is free, moves it.
TEST(AgentDaemon, ReloadToABusyPortKeepsTheOldListenerAndRetries) {
  STACKSCOPE_REQUIRE(::geteuid() == 0, "needs root (the agent's samplers)");
  TempDir dir;
  const int first = free_port();
  const std::string config = dir.file("agent.toml");
  write_file(config, "listen = \"127.0.0.1:" + std::to_string(first) + "\"\n");
  Daemon agent(dir, {"--config", config, "--data-dir", dir.file("data")});
  ASSERT_EQ(agent.port, first) << read_file(agent.log);
  // Another process's listener on the port asked for.
  const int busy = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(busy, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(listen(busy, 1), 0);
  socklen_t len = sizeof a;
  getsockname(busy, reinterpret_cast<sockaddr*>(&a), &len);
  const int second = ntohs(a.sin_port);
  write_file(config, "listen = \"127.0.0.1:" + std::to_string(second) + "\"\n");
  kill(agent.proc->pid, SIGHUP);
  ASSERT_TRUE(wait_for([&] { return agent.count("refused") == 1; }, 20s)) << read_file(agent.log);
  EXPECT_EQ(agent.count("configuration reloaded"), 0u) << read_file(agent.log);
  EXPECT_EQ(http_get(first, "/healthz").status, 200) << "the old listener was closed";
  EXPECT_EQ(agent.metric("stackscope_agent_config_reloads_total{result=\"error\"}"), 1);
  EXPECT_EQ(agent.metric("stackscope_agent_config_reloads_total{result=\"ok\"}"), 0);
  close(busy);
  kill(agent.proc->pid, SIGHUP);
  ASSERT_TRUE(wait_for([&] { return agent.count("configuration reloaded") == 1; }, 20s)) << read_file(agent.log);
  EXPECT_EQ(http_get(second, "/healthz").status, 200) << read_file(agent.log);
  EXPECT_EQ(http_get(first, "/healthz", "", 2).status, 0) << "the old listener stayed";
  EXPECT_EQ(agent.proc->stop(SIGTERM, 30s), 0) << read_file(agent.log);
}

// A data_dir that cannot be made (a file is in the way), at start or after a reload: /healthz says degraded and
// why, and the node's store starts on the next scan once it can.
TEST(AgentDaemon, UncreatableDataDirIsDegradedAndRetried) {
  STACKSCOPE_REQUIRE(::geteuid() == 0, "needs root (the agent's samplers)");
  TempDir dir;
  write_file(dir.file("blocker"), "a file where a folder should be");
  const std::string config = dir.file("agent.toml");
  write_file(config, "data_dir = \"" + dir.file("blocker/data") + "\"\n");
  Daemon agent(dir, {"--config", config, "--listen", "127.0.0.1:0"});
  ASSERT_GT(agent.port, 0) << read_file(agent.log);
  auto h = agent.health();
  EXPECT_EQ(h["status"], "degraded") << h;
  EXPECT_NE(h["store_error"].get<std::string>().find(dir.file("blocker/data")), std::string::npos) << h;
  EXPECT_EQ(http_get(agent.port, "/healthz").status, 503);
  fs::remove(dir.file("blocker"));
  ASSERT_TRUE(wait_for([&] { return agent.health()["status"] == "ok"; }, 10s)) << read_file(agent.log);
  ASSERT_TRUE(wait_for([&] { return fs::exists(dir.file("blocker/data/node")); }, 5s));
  EXPECT_FALSE(fs::is_empty(dir.file("blocker/data/node")));

  // Reloaded onto another that cannot be made: degraded again until it can.
  write_file(dir.file("blocker2"), "");
  write_file(config, "data_dir = \"" + dir.file("blocker2/data") + "\"\n");
  kill(agent.proc->pid, SIGHUP);
  ASSERT_TRUE(wait_for([&] { return agent.health()["status"] == "degraded"; }, 10s)) << read_file(agent.log);
  fs::remove(dir.file("blocker2"));
  ASSERT_TRUE(wait_for([&] { return agent.health()["status"] == "ok"; }, 10s)) << read_file(agent.log);
  EXPECT_TRUE(wait_for([&] { return fs::exists(dir.file("blocker2/data/node")); }, 5s));
  EXPECT_EQ(agent.proc->stop(SIGTERM, 30s), 0) << read_file(agent.log);
}

// A host counter exported from the node's samples is the source's total, also after the samplers restart (a
// reload makes a new exporter): not the total added once more each time.
TEST(AgentMetrics, HostCountersStayTheTrueTotalAcrossSamplerRestarts) {
  AgentMetrics m("node1", "0.1.0");
  const auto info = series_info("gpu.energy", "gpu0", Subsystem::gpu, "joules", SeriesKind::counter,
                                SeriesCategory::dynamic, "nvml");
  const std::string series = "stackscope_gpu_energy_joules_total{gpu=\"gpu0\"} ";
  auto value = [&] {
    const std::string text = m.scrape();
    const auto at = text.find(series);
    return at == std::string::npos ? -1.0 : std::stod(text.substr(at + series.size()));
  };
  for (double total : {722.0, 725.0, 731.0}) {  // each a restart of the samplers, the source counting on
    stackscope::agent::testing::NullSink null;
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

TEST(AgentConfig, MinFreeIsASizeAPercentageOrNone) {
  const AgentConfig d = load_agent_config("", {});
  EXPECT_EQ(d.min_free_floor(10ull << 30), 512ull << 20);  // 5 % of 10 GiB: smaller than 1 GiB
  EXPECT_EQ(d.min_free_floor(100ull << 30), 1ull << 30);
  EXPECT_EQ(load_agent_config("", {{"store.min_free", "2GiB"}}).min_free_floor(100ull << 30), 2ull << 30);
  EXPECT_EQ(load_agent_config("", {{"store.min_free", "10%"}}).min_free_floor(100ull << 30), 10ull << 30);
  EXPECT_EQ(load_agent_config("", {{"store.min_free", "0"}}).min_free_floor(100ull << 30), 0u);
  for (const char* bad : {"lots", "-1GiB", "80%", "%"}) {
    try {
      load_agent_config("", {{"store.min_free", bad}});
      ADD_FAILURE() << bad << " accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("store.min_free"), std::string::npos) << e.what();
    }
  }
}

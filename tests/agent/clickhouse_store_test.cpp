// The fleet store on a real ClickHouse server (Debian's clickhouse-server 18.16, started here on loopback with its
// own configuration and data, tables from deploy/clickhouse/schema.sql): the sink's rows of every table arrive and
// queries see them; batches made while ClickHouse is down wait in the spool and arrive, in order, once it is up;
// a batch already stored (its acknowledgement lost) is not stored twice; the agent's rows arrive; and ClickHouse
// killed (SIGKILL) mid-stream and restarted loses no row and stores none twice. Needs /usr/sbin/clickhouse-server
// (scripts/install-deps.sh) and curl.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <regex>
#include <sstream>
#include <thread>

#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include "agent/clickhouse_sink.h"
#include "agent/clickhouse_spool.h"
#include "model/clock.h"
#include "model/series.h"
#include "clickhouse_server.h"
#include "test_util.h"

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using clickhouse_test::Server;

const std::string kAgent = STACKSCOPE_AGENT_BIN;
const std::string kSchema = std::string(STACKSCOPE_SOURCE_DIR) + "/deploy/clickhouse/schema.sql";

// Where the node's samplers would write: series ids, nothing kept.
class NullSink final : public stackscope::TelemetrySink {
 public:
  stackscope::SeriesId add_series(const stackscope::SeriesInfo&) override { return ++next_; }
  void append_event(stackscope::Event&&) override {}
  void append_samples(std::span<const stackscope::Sample>) override {}
  void add_drops(std::string_view, uint64_t) override {}
  void add_note(std::string_view, std::string_view) override {}

 private:
  stackscope::SeriesId next_ = 0;
};

size_t spool_files(const std::string& dir) {
  size_t n = 0;
  std::error_code ec;
  for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator(); ++it)
    n += it->path().extension() == ".spool";
  return n;
}

std::string scrape(prometheus::Registry& r) { return prometheus::TextSerializer().Serialize(r.Collect()); }

#define REQUIRE_CLICKHOUSE() \
  STACKSCOPE_REQUIRE(clickhouse_test::server_binary() != nullptr, "clickhouse-server not installed (scripts/install-deps.sh)")

TEST(ClickHouseStore, RowsOfEveryTableArriveAndAQuerySeesThem) {
  REQUIRE_CLICKHOUSE();
  TempDir dir;
  Server server(dir);
  ASSERT_TRUE(server.start()) << server.log();
  std::string error;
  ASSERT_TRUE(server.create_schema(kSchema, "fleet", &error)) << error;

  stackscope::agent::ClickHouseSettings s;
  s.url = server.url();
  s.database = "fleet";
  s.batch_rows = 100;
  s.batch_interval_ns = 200'000'000;
  s.spool_dir = dir.file("spool");
  prometheus::Registry registry;
  const auto before = stackscope::realtime_ns();
  {
    stackscope::agent::ClickHouseSink sink(s, dir.path(), "node-a", registry);
    NullSink segments;
    auto tee = sink.sample_tee(segments);
    const auto cpu = tee->add_series(stackscope::series_info("cpu.time.user", "cpu0", stackscope::Subsystem::cpu,
                                                             "jiffies", stackscope::SeriesKind::counter,
                                                             stackscope::SeriesCategory::dynamic));
    const auto mem = tee->add_series(stackscope::series_info("mem.used", "", stackscope::Subsystem::memory, "bytes",
                                                             stackscope::SeriesKind::gauge,
                                                             stackscope::SeriesCategory::dynamic));
    std::vector<stackscope::Sample> samples;
    const int64_t t0 = stackscope::monotonic_ns();
    for (int i = 0; i < 250; ++i) samples.push_back({i % 2 ? cpu : mem, t0 + i * 1'000'000, double(i)});
    samples.push_back({cpu, t0, std::numeric_limits<double>::quiet_NaN()});  // not a value ClickHouse stores
    tee->append_samples(samples);
    const stackscope::agent::JobLabels job{"python3-42", "pod-1", "c0ffee"};
    sink.add_event_counts(job, "0", stackscope::Layer::cuda, 10, 5000, 3000);
    sink.add_event_counts(job, "0", stackscope::Layer::cuda, 5, 1000, 200);
    sink.add_event_counts(job, "1", stackscope::Layer::nccl, 7, 70000);
    sink.add_incident(job, {{"online", "open"}, {"id", 3}, {"cause", {{"class", "gpu_throttle"}}}});
    sink.add_incident(job, {{"online", "close"}, {"id", 3}, {"cause", {{"class", "gpu_throttle"}}}});
    ASSERT_TRUE(wait_for([&] { return sink.stats().rows_sent >= 250; }, 20s)) << sink.stats().last_error;
  }  // the rest (the open aggregate interval) is flushed on destruction
  EXPECT_EQ(server.number("SELECT count() FROM fleet.samples FINAL"), 250);
  EXPECT_EQ(server.number("SELECT count() FROM fleet.samples WHERE host = 'node-a' AND series = 'cpu.time.user' "
                          "AND device = 'cpu0' AND unit = 'jiffies'"), 125);
  EXPECT_EQ(server.number("SELECT toUInt64(sum(value)) FROM fleet.samples FINAL"), 249 * 250 / 2);
  // Unix time, not the monotonic clock the samplers use.
  const long long first_ts = server.number("SELECT min(ts_ns) FROM fleet.samples");
  EXPECT_GE(first_ts, before - 5'000'000'000LL);
  EXPECT_LE(first_ts, stackscope::realtime_ns());
  EXPECT_EQ(server.number("SELECT sum(events) FROM fleet.event_aggregates FINAL WHERE job = 'python3-42' AND "
                          "rank = '0' AND layer = 'cuda' AND pod = 'pod-1' AND container = 'c0ffee'"), 15);
  EXPECT_EQ(server.number("SELECT sum(duration_ns) FROM fleet.event_aggregates FINAL WHERE layer = 'nccl'"), 70000);
  // The waits (CUDA syncs) per rank: what the fleet's straggler verdict compares.
  EXPECT_EQ(server.number("SELECT sum(wait_ns) FROM fleet.event_aggregates FINAL WHERE rank = '0'"), 3200);
  EXPECT_EQ(server.number("SELECT sum(wait_ns) FROM fleet.event_aggregates FINAL WHERE rank = '1'"), 0);
  // This host's clock against the server's (the same machine): probed while sending, within the half second of
  // the server's whole-second now() plus the round trip.
  EXPECT_GE(server.number("SELECT count() FROM fleet.clock_offsets FINAL WHERE host = 'node-a'"), 1);
  EXPECT_LE(server.number("SELECT toInt64(max(abs(offset_ns))) FROM fleet.clock_offsets"), 600'000'000);
  // Each series' kind as its sampler declared it.
  EXPECT_EQ(server.number("SELECT count() FROM fleet.samples FINAL WHERE series = 'cpu.time.user' AND kind = 'counter'"),
            125);
  EXPECT_EQ(server.number("SELECT count() FROM fleet.samples FINAL WHERE series = 'mem.used' AND kind = 'gauge'"), 125);
  EXPECT_EQ(server.number("SELECT count() FROM fleet.event_aggregates WHERE interval_ns = 10000000000 AND "
                          "interval_start_ns % 10000000000 = 0"), server.number("SELECT count() FROM fleet.event_aggregates"));
  std::string incidents;
  ASSERT_TRUE(server.query("SELECT state, class, incident_id, visitParamExtractString(report, 'online') FROM "
                           "fleet.incidents FINAL ORDER BY ts_ns, row_index FORMAT TSV", &incidents));
  EXPECT_EQ(incidents, "open\tgpu_throttle\t3\topen\nclose\tgpu_throttle\t3\tclose\n");
  // Each row's batch key is unique; nothing waits in the spool.
  EXPECT_EQ(server.number("SELECT uniqExact(batch_id, row_index) FROM fleet.samples"), 250);
  EXPECT_EQ(spool_files(dir.file("spool")), 0u);
  const std::string m = scrape(registry);
  EXPECT_NE(m.find("stackscope_clickhouse_rows_sent_total{table=\"samples\"} 250"), std::string::npos) << m;
  EXPECT_NE(m.find("stackscope_clickhouse_rows_sent_total{table=\"incidents\"} 2"), std::string::npos) << m;
  std::smatch batches;  // 100, 100 and the last 50 after batch_interval (more if this machine is slow)
  ASSERT_TRUE(std::regex_search(m, batches, std::regex("stackscope_clickhouse_batches_sent_total\\{table=\"samples\"\\} (\\d+)")));
  EXPECT_GE(std::stoi(batches[1]), 3) << m;
  EXPECT_NE(m.find("stackscope_clickhouse_send_errors_total 0"), std::string::npos) << m;
  EXPECT_NE(m.find("stackscope_clickhouse_spool_size_bytes 0"), std::string::npos) << m;
}

TEST(ClickHouseStore, BatchesWaitInTheSpoolWhileClickHouseIsDownAndArriveInOrder) {
  REQUIRE_CLICKHOUSE();
  TempDir dir;
  Server server(dir);
  stackscope::agent::ClickHouseSettings s;
  s.url = server.url();  // nothing listens there yet
  s.database = "fleet";
  s.batch_rows = 10;
  s.batch_interval_ns = 100'000'000;
  s.spool_dir = dir.file("spool");
  prometheus::Registry registry;
  const stackscope::agent::JobLabels job{"train-1", "", ""};
  {
    stackscope::agent::ClickHouseSink sink(s, dir.path(), "node-b", registry);
    for (int i = 0; i < 45; ++i) sink.add_incident(job, {{"online", "open"}, {"id", i}});
    ASSERT_TRUE(wait_for([&] { return sink.stats().spool_batches == 5 && sink.stats().send_errors > 0; }, 20s));
    EXPECT_FALSE(sink.stats().last_error.empty());
    const std::string m = scrape(registry);
    EXPECT_NE(m.find("stackscope_clickhouse_spool_batches 5"), std::string::npos) << m;
    EXPECT_EQ(m.find("stackscope_clickhouse_spool_size_bytes 0"), std::string::npos) << m;
  }  // the agent stops with ClickHouse still down
  EXPECT_EQ(spool_files(dir.file("spool")), 1u);
  ASSERT_TRUE(server.start()) << server.log();
  std::string error;
  ASSERT_TRUE(server.create_schema(kSchema, "fleet", &error)) << error;
  {
    stackscope::agent::ClickHouseSink sink(s, dir.path(), "node-b", registry);  // the agent's next start
    sink.add_incident(job, {{"online", "open"}, {"id", 45}});
    ASSERT_TRUE(wait_for([&] { return sink.stats().rows_sent == 46 && sink.stats().spool_batches == 0; }, 30s))
        << sink.stats().last_error;
  }
  // In the order they were made: incident ids by batch sequence and row.
  std::string ids;
  ASSERT_TRUE(server.query("SELECT groupArray(incident_id) FROM (SELECT incident_id FROM fleet.incidents FINAL "
                           "ORDER BY toUInt64(splitByChar('-', batch_id)[2]), row_index)", &ids));
  std::string expect = "[";
  for (int i = 0; i <= 45; ++i) expect += (i ? "," : "") + std::to_string(i);
  EXPECT_EQ(ids, expect + "]\n");
  EXPECT_EQ(server.number("SELECT count() FROM fleet.incidents"), 46);
  EXPECT_EQ(spool_files(dir.file("spool")), 0u);
}

// Idempotence, made to happen rather than hoped for: a batch the agent sent whose acknowledgement it never saw
// (it was killed first) is in ClickHouse and still in the spool. At the next start the sink finds it stored and
// does not insert it again; and a batch inserted twice anyway collapses to one copy (FINAL, then a merge).
TEST(ClickHouseStore, ABatchAlreadyStoredIsNotStoredTwice) {
  REQUIRE_CLICKHOUSE();
  TempDir dir;
  Server server(dir);
  ASSERT_TRUE(server.start()) << server.log();
  std::string error;
  ASSERT_TRUE(server.create_schema(kSchema, "fleet", &error)) << error;
  std::string batch_id, keyed;
  {
    stackscope::agent::ClickHouseSpool spool(dir.file("spool"), 1 << 20);
    std::string payload;
    for (int i = 0; i < 3; ++i)
      payload += "{\"host\":\"node-c\",\"job\":\"j\",\"pod\":\"\",\"container\":\"\",\"incident_id\":" +
                 std::to_string(i) + ",\"state\":\"open\",\"class\":\"x\",\"ts_ns\":1764200000000000000,\"report\":\"{}\"}\n";
    spool.append("incidents", 3, payload);
    batch_id = spool.front()->batch_id;
    // What the sink sends: the batch key in front of each row.
    int row = 0;
    std::istringstream lines(payload);
    for (std::string line; std::getline(lines, line);)
      keyed += "{\"batch_id\":\"" + batch_id + "\",\"row_index\":" + std::to_string(row++) + "," + line.substr(1) + "\n";
  }
  ASSERT_TRUE(server.query("INSERT INTO fleet.incidents FORMAT JSONEachRow\n" + keyed, &error)) << error;
  stackscope::agent::ClickHouseSettings s;
  s.url = server.url();
  s.database = "fleet";
  s.spool_dir = dir.file("spool");
  prometheus::Registry registry;
  {
    stackscope::agent::ClickHouseSink sink(s, dir.path(), "node-c", registry);
    ASSERT_TRUE(wait_for([&] { return sink.stats().spool_batches == 0; }, 20s)) << sink.stats().last_error;
    EXPECT_EQ(sink.stats().batches_sent, 1u);
  }
  EXPECT_EQ(server.number("SELECT count() FROM fleet.incidents"), 3) << "sent again";
  // Inserted twice more regardless: FINAL counts each row once, and a merge keeps one copy.
  for (int i = 0; i < 2; ++i)
    ASSERT_TRUE(server.query("INSERT INTO fleet.incidents FORMAT JSONEachRow\n" + keyed, &error)) << error;
  EXPECT_EQ(server.number("SELECT count() FROM fleet.incidents"), 9);
  EXPECT_EQ(server.number("SELECT count() FROM fleet.incidents FINAL"), 3);
  ASSERT_TRUE(server.query("OPTIMIZE TABLE fleet.incidents FINAL", &error)) << error;
  EXPECT_EQ(server.number("SELECT count() FROM fleet.incidents"), 3);
}

// The agent as an operator runs it, with [clickhouse] set: the node's host series arrive in ClickHouse.
struct AgentProcess {
  pid_t pid = -1;
  std::string log;
  int port = 0;
  AgentProcess(const TempDir& dir, const std::vector<std::string>& extra) : log(dir.file("agent.log")) {
    std::vector<std::string> argv{kAgent, "agent", "--data-dir", dir.file("data"), "--listen", "127.0.0.1:0",
                                  "--scan-interval", "1s", "--host-interval", "100ms",
                                  // No job of the machine (other tests' torch jobs) is traced: only the node.
                                  "--set", "discovery.command_filter=^no-such-job-" + dir.path() + "$"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    pid = fork();
    if (pid == 0) {
      int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      dup2(fd, 1);
      dup2(fd, 2);
      std::vector<char*> args;
      for (auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      execv(args[0], args.data());
      _exit(127);
    }
    const std::regex listening("listening on 127\\.0\\.0\\.1:(\\d+)");
    wait_for([&] {
      std::smatch m;
      const std::string text = read_file(log);
      if (std::regex_search(text, m, listening)) port = std::stoi(m[1]);
      return port > 0 || waitpid(pid, nullptr, WNOHANG) == pid;
    }, 60s);
  }
  std::string metrics() const {
    std::string out;
    run_command("curl -s --max-time 10 http://127.0.0.1:" + std::to_string(port) + "/metrics", &out);
    return out;
  }
  double metric(const std::string& name) const {
    const std::string m = metrics();
    double sum = 0;
    const std::regex re("\n" + name + "(\\{[^}]*\\})? ([0-9.e+-]+)");
    for (std::sregex_iterator it(m.begin(), m.end(), re), end; it != end; ++it) sum += std::stod((*it)[2]);
    return sum;
  }
  // SIGTERM; the exit status, or -1 when it did not stop within `timeout`.
  int stop(std::chrono::seconds timeout) {
    if (pid <= 0) return -1;
    kill(pid, SIGTERM);
    int status = 0;
    if (!wait_for([&] { return waitpid(pid, &status, WNOHANG) == pid; }, timeout)) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
      pid = -1;
      return -1;
    }
    pid = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  ~AgentProcess() {
    if (pid > 0) stop(10s);
  }
};

// Tables made by an earlier stackscope (no samples.kind, no event_aggregates.wait_ns): the sink adds the columns
// before its first insert (18.16 has no ADD COLUMN IF NOT EXISTS: it asks system.columns first). A table it cannot
// alter the same way (not a MergeTree: on a cluster, a Distributed table) gets the rows without the new values.
TEST(ClickHouseStore, TablesOfAnEarlierSchemaGetTheNewColumnsOrTheRowsWithoutThem) {
  REQUIRE_CLICKHOUSE();
  TempDir dir;
  Server server(dir);
  ASSERT_TRUE(server.start()) << server.log();
  std::string error;
  ASSERT_TRUE(server.create_schema(kSchema, "fleet", &error)) << error;
  // The earlier schema: samples without kind (a MergeTree), event_aggregates without wait_ns and as a Log table.
  ASSERT_TRUE(server.query("ALTER TABLE fleet.samples DROP COLUMN kind", &error)) << error;
  ASSERT_TRUE(server.query("DROP TABLE fleet.event_aggregates", &error)) << error;
  ASSERT_TRUE(server.query("CREATE TABLE fleet.event_aggregates (host String, job String, pod String, container "
                           "String, rank String, layer String, interval_start_ns UInt64, interval_ns UInt64, events "
                           "UInt64, duration_ns UInt64, batch_id String, row_index UInt32) ENGINE = Log", &error))
      << error;
  ASSERT_EQ(server.number("SELECT count() FROM system.columns WHERE database = 'fleet' AND name IN ('kind', 'wait_ns')"),
            0);
  stackscope::agent::ClickHouseSettings s;
  s.url = server.url();
  s.database = "fleet";
  s.batch_rows = 10;
  s.batch_interval_ns = 200'000'000;
  s.aggregate_interval_ns = 1'000'000'000;
  s.spool_dir = dir.file("spool");
  prometheus::Registry registry;
  {
    stackscope::agent::ClickHouseSink sink(s, dir.path(), "node-a", registry);
    NullSink segments;
    auto tee = sink.sample_tee(segments);
    const auto mem = tee->add_series(stackscope::series_info("mem.used", "", stackscope::Subsystem::memory, "bytes",
                                                             stackscope::SeriesKind::gauge,
                                                             stackscope::SeriesCategory::dynamic));
    std::vector<stackscope::Sample> samples;
    for (int i = 0; i < 20; ++i) samples.push_back({mem, stackscope::monotonic_ns() + i, double(i)});
    tee->append_samples(samples);
    sink.add_event_counts({"python3-42", "", ""}, "0", stackscope::Layer::cuda, 10, 5000, 3000);
    ASSERT_TRUE(wait_for([&] { return sink.stats().rows_sent >= 20; }, 20s)) << sink.stats().last_error;
  }
  EXPECT_EQ(server.number("SELECT count() FROM system.columns WHERE database = 'fleet' AND table = 'samples' AND "
                          "name = 'kind'"), 1);
  EXPECT_EQ(server.number("SELECT count() FROM fleet.samples FINAL WHERE kind = 'gauge'"), 20);
  // Not altered (a Log table): the rows arrived all the same, without their waits.
  EXPECT_EQ(server.number("SELECT count() FROM system.columns WHERE database = 'fleet' AND name = 'wait_ns'"), 0);
  EXPECT_EQ(server.number("SELECT sum(events) FROM fleet.event_aggregates"), 10);
  EXPECT_NE(scrape(registry).find("stackscope_clickhouse_send_errors_total 0"), std::string::npos) << scrape(registry);
}

TEST(ClickHouseStore, TheAgentsRowsArriveAndAQuerySeesThem) {
  REQUIRE_CLICKHOUSE();
  TempDir dir;
  Server server(dir);
  ASSERT_TRUE(server.start()) << server.log();
  std::string error;
  ASSERT_TRUE(server.create_schema(kSchema, "stackscope", &error)) << error;
  write_file(dir.file("agent.toml"), "[clickhouse]\nurl = \"" + server.url() + "\"\nbatch_interval = \"500ms\"\n");
  AgentProcess agent(dir, {"--config", dir.file("agent.toml")});
  ASSERT_GT(agent.port, 0) << read_file(agent.log);
  // Host series of this node, with Unix times of now.
  ASSERT_TRUE(wait_for([&] { return server.number("SELECT count() FROM stackscope.samples WHERE series = "
                                                  "'cpu.time.user'") > 0; }, 30s))
      << read_file(agent.log);
  const long long age_s = server.number("SELECT toUInt64(now()) - intDiv(max(ts_ns), 1000000000) FROM stackscope.samples");
  EXPECT_GE(age_s, 0);
  EXPECT_LE(age_s, 30);
  EXPECT_GT(server.number("SELECT uniqExact(series) FROM stackscope.samples WHERE job = ''"), 3);
  EXPECT_EQ(server.number("SELECT uniqExact(host) FROM stackscope.samples"), 1);
  // The counters in /metrics and /healthz.
  EXPECT_GT(agent.metric("stackscope_clickhouse_batches_sent_total"), 0) << agent.metrics();
  EXPECT_GT(agent.metric("stackscope_clickhouse_rows_sent_total"), 0);
  EXPECT_EQ(agent.metric("stackscope_clickhouse_send_errors_total"), 0);
  std::string health;
  run_command("curl -s http://127.0.0.1:" + std::to_string(agent.port) + "/healthz", &health);
  EXPECT_GT(nlohmann::json::parse(health)["clickhouse"]["rows_sent"].get<uint64_t>(), 0u) << health;
  EXPECT_EQ(agent.stop(30s), 0) << read_file(agent.log);
  // The last rows were sent on the way out: the spool is empty and the count is final.
  EXPECT_EQ(spool_files(dir.file("data/clickhouse-spool")), 0u) << read_file(agent.log);
}

// SIGHUP with [clickhouse] added to the file turns the store on (the node's samplers restart into it); with it
// removed, off again: nothing more is sent and the agent goes on.
TEST(ClickHouseStore, AReloadTurnsTheStoreOnAndOff) {
  REQUIRE_CLICKHOUSE();
  TempDir dir;
  Server server(dir);
  ASSERT_TRUE(server.start()) << server.log();
  std::string error;
  ASSERT_TRUE(server.create_schema(kSchema, "stackscope", &error)) << error;
  write_file(dir.file("agent.toml"), "[api]\nmax_incidents = 10\n");
  AgentProcess agent(dir, {"--config", dir.file("agent.toml")});
  ASSERT_GT(agent.port, 0) << read_file(agent.log);
  EXPECT_EQ(read_file(agent.log).find("fleet store"), std::string::npos);
  write_file(dir.file("agent.toml"), "[clickhouse]\nurl = \"" + server.url() + "\"\nbatch_interval = \"300ms\"\n");
  kill(agent.pid, SIGHUP);
  ASSERT_TRUE(wait_for([&] { return server.number("SELECT count() FROM stackscope.samples") > 0; }, 30s))
      << read_file(agent.log);
  write_file(dir.file("agent.toml"), "[api]\nmax_incidents = 10\n");
  kill(agent.pid, SIGHUP);
  ASSERT_TRUE(wait_for([&] {
    const std::string log = read_file(agent.log);
    size_t n = 0;
    for (size_t at = log.find("configuration reloaded"); at != std::string::npos; at = log.find("configuration reloaded", at + 1)) ++n;
    return n == 2;
  }, 20s)) << read_file(agent.log);
  const long long rows = server.number("SELECT count() FROM stackscope.samples");
  std::this_thread::sleep_for(1500ms);
  EXPECT_EQ(server.number("SELECT count() FROM stackscope.samples"), rows) << "still sending after the store was turned off";
  EXPECT_EQ(agent.metric("stackscope_clickhouse_send_errors_total"), 0);
  EXPECT_GT(agent.metric("stackscope_clickhouse_rows_sent_total"), 0) << "the counters stay";
  EXPECT_EQ(agent.stop(30s), 0) << read_file(agent.log);
}

// A real traced job (Debian's python3-torch on the CPU): its calls, counted per interval, rank and layer, arrive.
TEST(ClickHouseStore, ATracedJobsEventCountsArrive) {
  REQUIRE_CLICKHOUSE();
  STACKSCOPE_REQUIRE(geteuid() == 0, "needs root (eBPF)");
  STACKSCOPE_REQUIRE(run_command("/usr/bin/python3 -c 'import torch'") == 0, "python3-torch missing");
  TempDir dir;
  Server server(dir);
  ASSERT_TRUE(server.start()) << server.log();
  std::string error;
  ASSERT_TRUE(server.create_schema(kSchema, "stackscope", &error)) << error;
  // Only this test's job: the workload runs from the test's directory, which the command filter names (the
  // filter given by AgentProcess is replaced: the last --set wins).
  AgentProcess agent(dir, {"--clickhouse-url", server.url(), "--set", "clickhouse.batch_interval=500ms", "--set",
                           "clickhouse.aggregate_interval=1s", "--set", "discovery.command_filter=" + dir.path(),
                           "--layers", "torch,python"});
  ASSERT_GT(agent.port, 0) << read_file(agent.log);
  fs::copy_file(std::string(STACKSCOPE_SOURCE_DIR) + "/workloads/cpu_train.py", dir.file("cpu_train.py"));
  const pid_t job = fork();
  if (job == 0) {
    int fd = open(dir.file("job.log").c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    execl("/usr/bin/python3", "python3", dir.file("cpu_train.py").c_str(), "--seconds", "20", static_cast<char*>(nullptr));
    _exit(127);
  }
  const std::string name = "python3-" + std::to_string(job);
  const bool arrived = wait_for([&] {
    return server.number("SELECT count() FROM stackscope.event_aggregates WHERE job = '" + name + "' AND events > 0") > 0;
  }, 50s);
  kill(job, SIGKILL);
  waitpid(job, nullptr, 0);
  ASSERT_TRUE(arrived) << read_file(agent.log);
  std::string layers;
  ASSERT_TRUE(server.query("SELECT groupUniqArray(layer) FROM stackscope.event_aggregates WHERE job = '" + name + "'",
                           &layers));
  EXPECT_TRUE(layers.find("torch") != std::string::npos || layers.find("python") != std::string::npos) << layers;
  EXPECT_EQ(server.number("SELECT count() FROM stackscope.event_aggregates WHERE interval_ns != 1000000000 OR "
                          "interval_start_ns % 1000000000 != 0"), 0);
  EXPECT_EQ(agent.stop(30s), 0) << read_file(agent.log);
}

TEST(ClickHouseStore, ClickHouseKilledMidStreamAndRestartedEveryRowArrivesOnce) {
  REQUIRE_CLICKHOUSE();
  TempDir dir;
  Server server(dir);
  ASSERT_TRUE(server.start()) << server.log();
  std::string error;
  ASSERT_TRUE(server.create_schema(kSchema, "stackscope", &error)) << error;
  // A batch about every 200 ms, each a request: a kill at any moment is likely to fall in the middle of one.
  AgentProcess agent(dir, {"--clickhouse-url", server.url(), "--set", "clickhouse.batch_interval=200ms",
                           "--set", "clickhouse.batch_rows=500", "--set", "clickhouse.timeout=2s"});
  ASSERT_GT(agent.port, 0) << read_file(agent.log);
  ASSERT_TRUE(wait_for([&] { return agent.metric("stackscope_clickhouse_batches_sent_total") >= 5; }, 30s))
      << read_file(agent.log);

  server.kill_now();
  // Batches made meanwhile wait in the spool; sends fail and are counted.
  ASSERT_TRUE(wait_for([&] {
    return agent.metric("stackscope_clickhouse_send_errors_total") > 0 &&
           agent.metric("stackscope_clickhouse_spool_batches") >= 3;
  }, 20s)) << agent.metrics();
  EXPECT_GT(agent.metric("stackscope_clickhouse_spool_size_bytes"), 0);

  ASSERT_TRUE(server.start()) << server.log();  // the same data directory
  ASSERT_TRUE(wait_for([&] { return agent.metric("stackscope_clickhouse_spool_batches") == 0; }, 45s))
      << agent.metrics() << read_file(agent.log);
  const double sent_rows = agent.metric("stackscope_clickhouse_rows_sent_total");
  EXPECT_EQ(agent.stop(30s), 0) << read_file(agent.log);
  EXPECT_EQ(spool_files(dir.file("data/clickhouse-spool")), 0u) << read_file(agent.log);

  // Exactly once: every row stored one time (no copy even before merges), every batch whole, and no batch
  // missing between the first and the last (one agent session: one id prefix, consecutive sequence numbers).
  const long long rows = server.number("SELECT count() FROM stackscope.samples");
  EXPECT_GE(rows, static_cast<long long>(sent_rows));
  EXPECT_EQ(server.number("SELECT count() FROM stackscope.samples FINAL"), rows);
  EXPECT_EQ(server.number("SELECT uniqExact(batch_id, row_index) FROM stackscope.samples"), rows);
  EXPECT_EQ(server.number("SELECT count() FROM (SELECT batch_id, count() AS n, max(row_index) AS last FROM "
                          "stackscope.samples GROUP BY batch_id HAVING n != last + 1)"), 0);
  EXPECT_EQ(server.number("SELECT uniqExact(splitByChar('-', batch_id)[1]) FROM stackscope.samples"), 1);
  // Sequence numbers are shared by the tables: those of samples and of the clock probes (clock_offsets) are
  // consecutive when this node made no other. The probes, exactly once too.
  const std::string both = "(SELECT batch_id FROM stackscope.samples UNION ALL SELECT batch_id FROM "
                           "stackscope.clock_offsets)";
  const long long batches = server.number("SELECT uniqExact(batch_id) FROM " + both);
  const long long span = server.number("SELECT max(toUInt64(splitByChar('-', batch_id)[2])) - "
                                       "min(toUInt64(splitByChar('-', batch_id)[2])) + 1 FROM " + both);
  EXPECT_EQ(server.number("SELECT uniqExact(batch_id, row_index) FROM stackscope.clock_offsets"),
            server.number("SELECT count() FROM stackscope.clock_offsets"));
  const long long others = server.number("SELECT count() FROM (SELECT batch_id FROM stackscope.event_aggregates "
                                         "UNION ALL SELECT batch_id FROM stackscope.incidents)");
  EXPECT_EQ(others, 0);
  EXPECT_EQ(batches, span) << "a batch went missing";
  EXPECT_GT(batches, 10);
  const std::string log = read_file(agent.log);
  EXPECT_NE(log.find("sending again"), std::string::npos) << log;
}

}  // namespace

// `stackscope analyze --source clickhouse://HOST:PORT/DB`: fleet analysis from the store, on a real ClickHouse
// server (Debian's clickhouse-server, started here on loopback, tables from deploy/clickhouse/schema.sql). Rows for
// three hosts go straight into the samples table as an agent would send them (Unix ns, cumulative counters raw, hosts
// starting and ending at different moments); the CLI names the host whose memory level departs from its peers' and
// the series, names no host in an identical clean set, and fails clearly on a bad URL, an unreachable server and
// an empty span.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "clickhouse_server.h"
#include "test_util.h"

namespace {

using clickhouse_test::Server;

const std::string kStackscope = STACKSCOPE_BIN;
const std::string kSchema = std::string(STACKSCOPE_SOURCE_DIR) + "/deploy/clickhouse/schema.sql";
constexpr int64_t kBase = 1795694400LL * 1'000'000'000;  // 2026-11-26T12:00:00Z
constexpr int kSeconds = 300;

#define REQUIRE_CLICKHOUSE() \
  STACKSCOPE_REQUIRE(clickhouse_test::server_binary() != nullptr, "clickhouse-server not installed (scripts/install-deps.sh)")

// Deterministic noise in [-1, 1).
struct Noise {
  uint64_t state;
  double next() {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<double>(state >> 11) / static_cast<double>(1ULL << 52) - 1.0;
  }
};

// One host's node series for kSeconds at 1 s (its first sample `start_s` late, its last `end_s` early, and its
// clock's stamps a few ms off the second): CPU and memory gauges, network and disk counters (cumulative, raw), each
// row with its kind as the agent writes it (without: as agents before the kind column wrote them). mem_scale
// multiplies the memory level: the planted departure. rising_gauge: one more gauge that only rises over the span
// (memory of a cache that fills), which the values alone make a counter.
// cpu_burst: CPU utilisation that much higher from 150 s to 170 s (a per-host incident).
// clock_skew_ns: the host's clock that far ahead of true time (its stamps with it).
std::string host_rows(const std::string& host, uint64_t seed, int start_s, int end_s, double mem_scale,
                      bool with_kind = true, bool rising_gauge = false, double cpu_burst = 0,
                      int64_t clock_skew_ns = 0) {
  Noise noise{seed};
  std::string rows;
  uint32_t index = 0;
  double rx = 1e9 * static_cast<double>(seed % 7), reads = 5e8;
  auto row = [&](const char* series, const char* device, const char* unit, int64_t ts, double value,
                 const char* kind) {
    nlohmann::json r = {{"host", host}, {"job", ""}, {"series", series}, {"device", device}, {"unit", unit},
                        {"ts_ns", ts}, {"value", value}, {"batch_id", host + "-1"}, {"row_index", index++}};
    if (with_kind) r["kind"] = kind;
    rows += r.dump() + "\n";
  };
  for (int s = start_s; s < kSeconds - end_s; ++s) {
    const int64_t ts = kBase + s * 1'000'000'000LL + static_cast<int64_t>(seed % 5) * 1'000'000 + clock_skew_ns;
    row("cpu.util", "", "ratio", ts, 0.55 + (s >= 150 && s < 170 ? cpu_burst : 0) + 0.05 * noise.next(), "gauge");
    row("mem.used", "", "bytes", ts, mem_scale * (8e9 + 5e7 * noise.next()), "gauge");
    rx += 2e6 * (1 + 0.1 * noise.next());
    row("net.rx.bytes", "eth0", "bytes", ts, rx, "counter");
    reads += 4e5 * (1 + 0.1 * noise.next());
    row("disk.read_bytes", "vda", "bytes", ts, reads, "counter");
    if (rising_gauge) row("mem.cached", "", "bytes", ts, 1e9 + 1e7 * s + 1e6 * (1 + noise.next()), "gauge");
  }
  return rows;
}

// One rank's waits per 10 s interval as the agent writes them (event_aggregates, interval starts on multiples of
// 10 s): `wait_s` of each interval blocked in CUDA syncs, +-0.3 s of noise, over kIntervals intervals, as two layer
// rows (cuda with the waits, torch without) that the reader adds up.
constexpr int kIntervals = 28;
std::string rank_rows(const std::string& host, const std::string& rank, uint64_t seed, double wait_s) {
  Noise noise{seed};
  std::string rows;
  uint32_t index = 0;
  for (int k = 0; k < kIntervals; ++k) {
    const int64_t start = kBase + k * 10'000'000'000LL;
    const double noisy = wait_s + 0.3 * noise.next();
    const auto wait = static_cast<uint64_t>(wait_s > 0 ? noisy * 1e9 : 0);  // wait_s 0: a job with no CUDA syncs
    for (const char* layer : {"cuda", "torch"}) {
      const bool cuda = layer == std::string("cuda");
      rows += nlohmann::json({{"host", host}, {"job", "python3-" + std::to_string(100 + seed)}, {"pod", ""},
                              {"container", ""}, {"rank", rank}, {"layer", layer}, {"interval_start_ns", start},
                              {"interval_ns", 10'000'000'000LL}, {"events", cuda ? 4000 : 9000},
                              {"duration_ns", cuda ? wait + 200'000'000 : 6'000'000'000ULL},
                              {"wait_ns", cuda ? wait : 0}, {"batch_id", host + "-agg-" + rank},
                              {"row_index", index++}})
                  .dump() +
              "\n";
    }
  }
  return rows;
}

struct Fleet {
  TempDir dir;
  Server server{dir};
  bool ready = false;
  std::string error;
  Fleet() { ready = server.start() && server.create_schema(kSchema, "fleet", &error); }
  bool insert(const std::string& rows, const std::string& table = "samples") {
    return server.query("INSERT INTO fleet." + table + " FORMAT JSONEachRow\n" + rows, &error);
  }
  std::string source() const { return "clickhouse://127.0.0.1:" + std::to_string(server.port()) + "/fleet"; }
};

int analyze(const std::string& args, std::string* out) {
  return run_command(kStackscope + " analyze -q " + args, out);
}

const char* kSpan = "--since 2026-11-26T11:59:00Z --until 2026-11-26T12:10:00Z";

TEST(ClickHouseFleetAnalysis, NamesTheHostWhoseSeriesDepartAndTheSeries) {
  REQUIRE_CLICKHOUSE();
  Fleet fleet;
  ASSERT_TRUE(fleet.ready) << fleet.error << fleet.server.log();
  ASSERT_TRUE(fleet.insert(host_rows("node-a", 11, 0, 0, 1.0))) << fleet.error;
  ASSERT_TRUE(fleet.insert(host_rows("node-b", 23, 7, 0, 1.0))) << fleet.error;  // its agent started 7 s later
  ASSERT_TRUE(fleet.insert(host_rows("node-c", 37, 0, 4, 1.6))) << fleet.error;  // 60 % more memory in use

  std::string out;
  ASSERT_EQ(analyze("--source " + fleet.source() + " " + kSpan + " --json", &out), 0) << out;
  const auto j = nlohmann::json::parse(out.substr(out.find('{')));
  EXPECT_EQ(j["hosts"].size(), 3u) << out;
  // Clock alignment: every host cut over the span all of them reported in (node-b's late start, node-c's early end).
  EXPECT_EQ(j["alignment"]["common_start_utc"], "2026-11-26T12:00:07.003Z") << j["alignment"].dump();
  EXPECT_EQ(j["alignment"]["common_end_utc"], "2026-11-26T12:04:55.002Z") << j["alignment"].dump();
  const auto& deviating = j["reveal"]["cross_host_hosts"];
  ASSERT_EQ(deviating.size(), 1u) << j["reveal"]["cross_host"].dump(2);
  EXPECT_EQ(deviating[0]["host"], "node-c");
  EXPECT_EQ(deviating[0]["subsystem"], "memory");
  EXPECT_EQ(deviating[0]["metrics"][0], "mem.used") << deviating.dump(2);
  for (const auto& d : j["reveal"]["cross_host"]) EXPECT_EQ(d["host"], "node-c") << d.dump();
  // Counters were recognised (their rates compared, not their uptime-dependent totals).
  for (const auto& h : j["hosts"]) EXPECT_EQ(h["counters"], 2) << h.dump();

  // The text report says what alignment was done and names the host and the series.
  ASSERT_EQ(analyze("--source " + fleet.source() + " " + kSpan, &out), 0) << out;
  EXPECT_NE(out.find("clock alignment:"), std::string::npos) << out;
  EXPECT_NE(out.find("1 deviating host(s)"), std::string::npos) << out;
  EXPECT_NE(out.find("node-c"), std::string::npos) << out;
  EXPECT_NE(out.find("mem.used"), std::string::npos) << out;

  // --hosts narrows the comparison: two hosts cannot tell which is the odd one.
  ASSERT_EQ(analyze("--source " + fleet.source() + " " + kSpan + " --hosts node-a,node-c", &out), 0) << out;
  EXPECT_NE(out.find("3 or more are needed"), std::string::npos) << out;
  EXPECT_EQ(out.find("deviating host"), std::string::npos) << out;
}

// A healthy fleet: three hosts of white noise, no departure and no incident, for several draws of the noise (the
// 99th-percentile thresholds flag a few windows of any data: the incident rules must not make incidents of them).
// The same fleet with a 20 s CPU burst on one host: that host's incident, attributed to the CPU, and no other.
TEST(ClickHouseFleetAnalysis, ACleanFleetHasNoIncidentsAndNoDepartures) {
  REQUIRE_CLICKHOUSE();
  Fleet fleet;
  ASSERT_TRUE(fleet.ready) << fleet.error << fleet.server.log();
  for (uint64_t draw : {0u, 1000u, 2000u}) {
    for (const char* name : {"clean", "burst"}) {
      const std::string db = name;
      ASSERT_TRUE(fleet.server.query("DROP DATABASE IF EXISTS " + db, &fleet.error)) << fleet.error;
      ASSERT_TRUE(fleet.server.create_schema(kSchema, db, &fleet.error)) << fleet.error;
      for (auto [host, seed] : {std::pair{"node-a", 11u}, {"node-b", 23u}, {"node-c", 37u}}) {
        const double burst = db == "burst" && host == std::string("node-a") ? 0.3 : 0.0;
        ASSERT_TRUE(fleet.server.query("INSERT INTO " + db + ".samples FORMAT JSONEachRow\n" +
                                           host_rows(host, seed + draw, 0, 0, 1.0, true, false, burst),
                                       &fleet.error))
            << fleet.error;
      }
    }
    const std::string where = "clickhouse://127.0.0.1:" + std::to_string(fleet.server.port());
    std::string out;
    ASSERT_EQ(analyze("--source " + where + "/clean " + kSpan + " --json", &out), 0) << out;
    auto j = nlohmann::json::parse(out.substr(out.find('{')));
    EXPECT_TRUE(j["reveal"]["cross_host"].empty()) << j["reveal"]["cross_host"].dump(2);
    EXPECT_TRUE(j["reveal"]["cross_host_hosts"].empty());
    EXPECT_TRUE(j["reveal"]["findings"].empty()) << "draw " << draw << ": " << j["reveal"]["findings"].dump(2);
    ASSERT_EQ(j["reveal"]["recordings"].size(), 3u);
    for (const auto& r : j["reveal"]["recordings"]) EXPECT_EQ(r["incidents"], 0) << "draw " << draw << r["host"];

    ASSERT_EQ(analyze("--source " + where + "/burst " + kSpan + " --json", &out), 0) << out;
    j = nlohmann::json::parse(out.substr(out.find('{')));
    ASSERT_FALSE(j["reveal"]["findings"].empty()) << "draw " << draw;
    for (const auto& f : j["reveal"]["findings"]) {
      EXPECT_EQ(f["host"], "node-a") << "draw " << draw << f.dump(2);
      EXPECT_EQ(f["subsystem"], "cpu") << f.dump(2);
      EXPECT_LE(f["t_start_s"].get<double>(), 170) << f.dump(2);
      EXPECT_GE(f["t_end_s"].get<double>(), 150) << f.dump(2);
    }
  }
}

TEST(ClickHouseFleetAnalysis, BadUrlUnreachableServerAndEmptySpanFailClearly) {
  REQUIRE_CLICKHOUSE();
  Fleet fleet;
  ASSERT_TRUE(fleet.ready) << fleet.error << fleet.server.log();
  ASSERT_TRUE(fleet.insert(host_rows("node-a", 11, 0, 0, 1.0))) << fleet.error;
  std::string out;

  EXPECT_NE(analyze("--source http://127.0.0.1/fleet " + std::string(kSpan), &out), 0);
  EXPECT_NE(out.find("not a clickhouse:// URL"), std::string::npos) << out;
  EXPECT_NE(analyze("--source clickhouse://127.0.0.1:99999/fleet " + std::string(kSpan), &out), 0);
  EXPECT_NE(out.find("bad port"), std::string::npos) << out;
  EXPECT_NE(analyze("--source clickhouse://127.0.0.1 " + std::string(kSpan), &out), 0);
  EXPECT_NE(out.find("no database"), std::string::npos) << out;

  const int closed = free_port();  // nothing listens there
  EXPECT_NE(analyze("--source clickhouse://127.0.0.1:" + std::to_string(closed) + "/fleet " + kSpan, &out), 0);
  EXPECT_NE(out.find("ClickHouse at http://127.0.0.1:" + std::to_string(closed)), std::string::npos) << out;

  EXPECT_NE(analyze("--source " + fleet.source() + " --since 2020-01-01T00:00:00Z --until 2020-01-02T00:00:00Z", &out),
            0);
  EXPECT_NE(out.find("no host samples"), std::string::npos) << out;
  EXPECT_NE(analyze("--source " + fleet.source() + " " + kSpan + " --hosts node-x", &out), 0);
  EXPECT_NE(out.find("no host samples"), std::string::npos) << out;
  EXPECT_NE(analyze("--source " + fleet.source() + " --since yesterday", &out), 0);
  EXPECT_NE(out.find("bad --since"), std::string::npos) << out;
  // A database that does not exist: ClickHouse's own message.
  EXPECT_NE(analyze("--source " + fleet.source() + "x " + kSpan, &out), 0);
  EXPECT_NE(out.find("fleetx"), std::string::npos) << out;
  // No recording and no --source.
  EXPECT_NE(analyze("", &out), 0);
  EXPECT_NE(out.find("no recording given"), std::string::npos) << out;
}

// The kind column: a gauge that only rises (a filling cache) stays a gauge when the agent stored its kind; rows
// from agents before the column are guessed (the same gauge then reads as a counter); a store whose table lacks the
// column altogether is read with every kind guessed, and says so.
TEST(ClickHouseFleetAnalysis, StoredKindsAreUsedAndRowsWithoutOneAreGuessed) {
  REQUIRE_CLICKHOUSE();
  Fleet fleet;
  ASSERT_TRUE(fleet.ready) << fleet.error << fleet.server.log();
  ASSERT_TRUE(fleet.insert(host_rows("node-a", 11, 0, 0, 1.0, true, true))) << fleet.error;
  ASSERT_TRUE(fleet.insert(host_rows("node-b", 23, 0, 0, 1.0, false, true))) << fleet.error;  // an older agent
  std::string out;
  ASSERT_EQ(analyze("--source " + fleet.source() + " " + kSpan + " --json", &out), 0) << out;
  auto j = nlohmann::json::parse(out.substr(out.find('{')));
  ASSERT_EQ(j["hosts"].size(), 2u) << out;
  EXPECT_EQ(j["hosts"][0]["host"], "node-a");
  EXPECT_EQ(j["hosts"][0]["counters"], 2) << j["hosts"][0].dump();  // net, disk; mem.cached a gauge as stored
  EXPECT_EQ(j["hosts"][0]["kinds_guessed"], 0);
  EXPECT_EQ(j["hosts"][1]["counters"], 3) << j["hosts"][1].dump();  // mem.cached guessed a counter
  EXPECT_EQ(j["hosts"][1]["kinds_guessed"], 5);
  ASSERT_EQ(analyze("--source " + fleet.source() + " " + kSpan, &out), 0) << out;
  EXPECT_NE(out.find("series kinds: 5 of 10 as the agents stored them; 5 guessed"), std::string::npos) << out;

  // A store made before the column (never migrated): read without it, every kind guessed.
  ASSERT_TRUE(fleet.server.query("ALTER TABLE fleet.samples DROP COLUMN kind", &fleet.error)) << fleet.error;
  ASSERT_EQ(analyze("--source " + fleet.source() + " " + kSpan + " --json", &out), 0) << out;
  j = nlohmann::json::parse(out.substr(out.find('{')));
  EXPECT_EQ(j["hosts"][0]["counters"], 3) << j["hosts"][0].dump();
  EXPECT_EQ(j["hosts"][0]["kinds_guessed"], 5);
  ASSERT_EQ(analyze("--source " + fleet.source() + " " + kSpan, &out), 0) << out;
  EXPECT_NE(out.find("the samples table has no kind column"), std::string::npos) << out;
}

// Stragglers across nodes from the store: 4 hosts x 2 ranks; node-c's ranks wait 0.4 s per 10 s interval for the
// others, the others 3 s for them: the verdict names node-c (a slow group of its two ranks, one host). Ranks of a
// CPU job (no waits) are left out and counted.
TEST(ClickHouseFleetAnalysis, NamesTheSlowHostFromTheRanksWaits) {
  REQUIRE_CLICKHOUSE();
  Fleet fleet;
  ASSERT_TRUE(fleet.ready) << fleet.error << fleet.server.log();
  int rank = 0;
  for (const char* host : {"node-a", "node-b", "node-c", "node-d"}) {
    ASSERT_TRUE(fleet.insert(host_rows(host, 11 + static_cast<uint64_t>(rank), 0, 0, 1.0))) << fleet.error;
    for (int local = 0; local < 2; ++local, ++rank)
      ASSERT_TRUE(fleet.insert(rank_rows(host, std::to_string(rank), 5 + static_cast<uint64_t>(rank),
                                         host == std::string("node-c") ? 0.4 : 3.0),
                               "event_aggregates"))
          << fleet.error;
  }
  std::string cpu_job = rank_rows("node-a", "", 99, 0.0);  // a CPU job on node-a: events, no waits
  ASSERT_TRUE(fleet.insert(cpu_job, "event_aggregates")) << fleet.error;
  std::string out;
  ASSERT_EQ(analyze("--source " + fleet.source() + " " + kSpan + " --json", &out), 0) << out;
  const auto j = nlohmann::json::parse(out.substr(out.find('{')));
  const auto& st = j["stragglers"];
  EXPECT_EQ(st["ranks"], 8) << st.dump(2);
  EXPECT_EQ(st["ranks_without_waits"], 1) << st.dump(2);
  EXPECT_EQ(st["intervals"], kIntervals) << st.dump(2);
  EXPECT_EQ(st["interval_ns"], 10'000'000'000LL);
  EXPECT_EQ(st["slow_hosts"], nlohmann::json::array({"node-c"})) << st.dump(2);
  EXPECT_EQ(st["verdict"], "slow-group") << st.dump(2);
  ASSERT_EQ(st["workers"].size(), 2u) << st.dump(2);
  for (const auto& w : st["workers"]) EXPECT_EQ(w.get<std::string>().rfind("node-c/", 0), 0u) << w;
  EXPECT_GT(st["excess_s"].get<double>(), 0.5 * kIntervals * 2.6) << st.dump(2);

  ASSERT_EQ(analyze("--source " + fleet.source() + " " + kSpan, &out), 0) << out;
  EXPECT_NE(out.find("== stragglers across nodes"), std::string::npos) << out;
  EXPECT_NE(out.find("verdict: slow host node-c"), std::string::npos) << out;

  // --hosts without node-c: a balanced set, no straggler.
  ASSERT_EQ(analyze("--source " + fleet.source() + " " + kSpan + " --hosts node-a,node-b,node-d --json", &out), 0)
      << out;
  const auto k = nlohmann::json::parse(out.substr(out.find('{')));
  EXPECT_EQ(k["stragglers"]["verdict"], "none") << k["stragglers"].dump(2);
  EXPECT_TRUE(k["stragglers"]["slow_hosts"].empty());
}

// A balanced fleet (every rank waits about as long) has no straggler; a fleet whose ranks carry no waits (or too
// few intervals) says it cannot tell.
TEST(ClickHouseFleetAnalysis, ABalancedFleetHasNoStraggler) {
  REQUIRE_CLICKHOUSE();
  Fleet fleet;
  ASSERT_TRUE(fleet.ready) << fleet.error << fleet.server.log();
  int rank = 0;
  for (const char* host : {"node-a", "node-b", "node-c"}) {
    ASSERT_TRUE(fleet.insert(host_rows(host, 11 + static_cast<uint64_t>(rank), 0, 0, 1.0))) << fleet.error;
    for (int local = 0; local < 2; ++local, ++rank)
      ASSERT_TRUE(fleet.insert(rank_rows(host, std::to_string(rank), 5 + static_cast<uint64_t>(rank), 2.0),
                               "event_aggregates"))
          << fleet.error;
  }
  std::string out;
  ASSERT_EQ(analyze("--source " + fleet.source() + " " + kSpan + " --json", &out), 0) << out;
  auto j = nlohmann::json::parse(out.substr(out.find('{')));
  EXPECT_EQ(j["stragglers"]["ranks"], 6);
  EXPECT_EQ(j["stragglers"]["verdict"], "none") << j["stragglers"].dump(2);
  EXPECT_TRUE(j["stragglers"]["slow_hosts"].empty());
  ASSERT_EQ(analyze("--source " + fleet.source() + " " + kSpan, &out), 0) << out;
  EXPECT_NE(out.find("verdict: no straggler"), std::string::npos) << out;

  // Only the span's first 3 intervals: too few to tell.
  ASSERT_EQ(analyze("--source " + fleet.source() + " --since 2026-11-26T12:00:00Z --until 2026-11-26T12:00:30Z",
                    &out),
            0)
      << out;
  EXPECT_NE(out.find("verdict: undetermined"), std::string::npos) << out;
}

// A host's agent probes its clock against the server's (clock_offsets): `probes` round trips of 2 ms, one every
// 1.37 s from kBase, the server's now() whole seconds of true time, the host's stamps clock_skew_ns ahead.
std::string clock_rows(const std::string& host, int64_t clock_skew_ns, int probes) {
  std::string rows;
  for (int k = 0; k < probes; ++k) {
    const int64_t true_mid = kBase + k * 1'370'000'000LL;
    const int64_t server_s = true_mid / 1'000'000'000;
    const int64_t mid = true_mid + clock_skew_ns;
    rows += nlohmann::json({{"host", host}, {"ts_ns", mid}, {"server_s", server_s}, {"rtt_ns", 2'000'000},
                            {"offset_ns", server_s * 1'000'000'000 + 500'000'000 - mid},
                            {"batch_id", host + "-clock"}, {"row_index", k}})
                .dump() +
            "\n";
  }
  return rows;
}

// Clocks aligned per host: node-b's clock runs 3 s ahead (its samples stamped so); its agent's probes of the server's
// whole-second now() say so within their uncertainty, and the analysis moves node-b's times back: every host then
// starts on the same second. Without the clock_offsets table (a store made before it) the times stay as stamped,
// and the report says so.
TEST(ClickHouseFleetAnalysis, HostClocksAreMovedOntoTheServersByTheirMeasuredOffsets) {
  REQUIRE_CLICKHOUSE();
  Fleet fleet;
  ASSERT_TRUE(fleet.ready) << fleet.error << fleet.server.log();
  for (auto [host, seed, skew] :
       {std::tuple{"node-a", 11u, 0LL}, {"node-b", 23u, 3'000'000'000LL}, {"node-c", 37u, 0LL}}) {
    const std::string name = host;
    const int64_t skew_ns = skew;
    ASSERT_TRUE(fleet.insert(host_rows(name, seed, 0, 0, 1.0, true, false, 0, skew_ns))) << fleet.error;
    ASSERT_TRUE(fleet.insert(clock_rows(name, skew_ns, 200), "clock_offsets")) << fleet.error;
  }
  std::string out;
  ASSERT_EQ(analyze("--source " + fleet.source() + " " + kSpan + " --json", &out), 0) << out;
  auto j = nlohmann::json::parse(out.substr(out.find('{')));
  EXPECT_EQ(j["alignment"]["skew_corrected"], true) << j["alignment"].dump();
  ASSERT_EQ(j["hosts"].size(), 3u);
  for (const auto& h : j["hosts"]) {
    const double expected = h["host"] == "node-b" ? -3e9 : 0.0;
    EXPECT_EQ(h["clock_probes"], 200) << h.dump();
    const double uncertainty = h["clock_uncertainty_ns"].get<double>();
    EXPECT_LT(uncertainty, 30e6) << h.dump();  // 0.29 s / sqrt(200) + 1 ms
    EXPECT_NEAR(h["clock_offset_ns"].get<double>(), expected, uncertainty) << h.dump();
    // Every host's first sample, moved onto the server's clock, within the offset's uncertainty of 12:00:00.
    EXPECT_EQ(h["first_utc"].get<std::string>().substr(0, 19), "2026-11-26T12:00:00") << h.dump();
  }
  ASSERT_EQ(analyze("--source " + fleet.source() + " " + kSpan, &out), 0) << out;
  EXPECT_NE(out.find("3 of 3 hosts moved onto the ClickHouse server's clock"), std::string::npos) << out;
  EXPECT_NE(out.find("host node-b"), std::string::npos) << out;

  ASSERT_TRUE(fleet.server.query("DROP TABLE fleet.clock_offsets", &fleet.error)) << fleet.error;
  ASSERT_EQ(analyze("--source " + fleet.source() + " " + kSpan + " --json", &out), 0) << out;
  j = nlohmann::json::parse(out.substr(out.find('{')));
  EXPECT_EQ(j["alignment"]["skew_corrected"], false);
  EXPECT_EQ(j["hosts"][1]["first_utc"].get<std::string>().substr(0, 19), "2026-11-26T12:00:03") << j["hosts"][1].dump();
  ASSERT_EQ(analyze("--source " + fleet.source() + " " + kSpan, &out), 0) << out;
  EXPECT_NE(out.find("no clock_offsets table"), std::string::npos) << out;
}

}  // namespace

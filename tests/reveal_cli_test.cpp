// `stackscope analyze --detector reveal` and `stackscope import --format csv` end to end, on recordings written
// with RecordingWriter: host-like telemetry (noisy gauges and counters over CPU, memory, network, storage)
// with one injected episode each.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <random>

#include "model/clock.h"
#include "store/recording_reader.h"
#include "store/recording_writer.h"
#include "store/series_csv.h"
#include "test_util.h"

using namespace stackscope;

namespace {
constexpr int64_t kMs = 1'000'000;

struct Episode {
  double from_s = 0, to_s = 0;  // when the injected behaviour is on
  std::string series;           // which series it moves
  double extra = 0;             // added to its rate (counters) or level (gauges)
};

// 100 ms samples of a small host: per-CPU user jiffies (counters), memory gauges, network and disk byte counters.
void write_host_recording(const std::string& path, const std::string& host, double seconds, uint32_t seed,
                          const std::vector<Episode>& episodes, double mem_offset = 0) {
  RecordingWriter w(path);
  w.set_meta("host", host);
  struct S {
    SeriesInfo info;
    double rate_or_level, noise, total = 0;
    SeriesId id = 0;
  };
  auto mk = [&](std::string name, std::string dev, Subsystem sub, SeriesKind kind, double base, double noise) {
    SeriesInfo i;
    i.name = std::move(name);
    i.device = std::move(dev);
    i.subsystem = sub;
    i.kind = kind;
    i.host = host;
    i.source = "test";
    return S{i, base, noise};
  };
  std::vector<S> s = {
      mk("cpu.time.user", "cpu0", Subsystem::cpu, SeriesKind::counter, 5, 2),
      mk("cpu.time.user", "cpu1", Subsystem::cpu, SeriesKind::counter, 4, 2),
      mk("cpu.time.system", "cpu0", Subsystem::cpu, SeriesKind::counter, 2, 1),
      mk("cpu.interrupts", "", Subsystem::cpu, SeriesKind::counter, 800, 60),
      mk("mem.used", "", Subsystem::memory, SeriesKind::gauge, 2.0e9 + mem_offset, 2e6),
      mk("mem.Dirty", "", Subsystem::memory, SeriesKind::gauge, 5e6, 4e5),
      mk("net.rx.bytes", "eth0", Subsystem::network, SeriesKind::counter, 2e5, 3e4),
      mk("net.tx.bytes", "eth0", Subsystem::network, SeriesKind::counter, 1e5, 2e4),
      mk("disk.write_bytes", "vda", Subsystem::storage, SeriesKind::counter, 4e5, 8e4),
      mk("disk.read_bytes", "vda", Subsystem::storage, SeriesKind::counter, 1e5, 3e4),
  };
  for (auto& x : s) x.id = w.add_series(x.info);
  std::mt19937 rng(seed);
  std::normal_distribution<double> n01;
  const int64_t t0 = monotonic_ns() + 10 * kMs;  // after the recording's start
  std::vector<Sample> batch;
  for (int i = 0; i <= static_cast<int>(seconds * 10); ++i) {
    const double t_s = i * 0.1;
    for (auto& x : s) {
      double extra = 0;
      for (const auto& e : episodes)
        if (e.series == x.info.key() && t_s >= e.from_s && t_s < e.to_s) extra += e.extra;
      const double v = std::max(0.0, x.rate_or_level + extra + x.noise * n01(rng));
      if (x.info.kind == SeriesKind::counter) {
        x.total += std::round(v * 0.1);  // per 100 ms
        batch.push_back({x.id, t0 + i * 100 * kMs, x.total});
      } else {
        batch.push_back({x.id, t0 + i * 100 * kMs, v});
      }
    }
  }
  w.append_samples(batch);
  w.close();
}

nlohmann::json analyze_json(const std::string& args) {
  std::string out;
  int rc = run_command(std::string(STACKSCOPE_BIN) + " analyze --detector reveal --json " + args + " 2>/dev/null", &out);
  EXPECT_EQ(rc, 0) << out;
  auto j = nlohmann::json::parse(out, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << out;
  return j.is_discarded() ? nlohmann::json() : j["reveal"];
}

bool has_finding(const nlohmann::json& reveal, const std::string& subsystem, double from_s, double to_s,
                 const std::string& host = "") {
  for (const auto& f : reveal["findings"])
    if (f["subsystem"] == subsystem && f["t_end_s"].get<double>() > from_s && f["t_start_s"].get<double>() < to_s &&
        (host.empty() || f["host"] == host))
      return true;
  return false;
}
}  // namespace

TEST(RevealCli, CpuBurstIsFoundAndAttributedToCpu) {
  TempDir dir;
  const std::string rec = dir.file("cpu.sdb");
  // A competitor burns both CPUs (about 100 jiffies/s each) for 5 s in the middle of a 4-minute recording.
  write_host_recording(rec, "h1", 240, 11, {{120, 125, "cpu.time.user{cpu0}", 90}, {120, 125, "cpu.time.user{cpu1}", 90}});
  auto j = analyze_json(rec);
  EXPECT_TRUE(has_finding(j, "cpu", 120, 125)) << j["findings"].dump(1);
  // Stored back into the recording for later reports.
  RecordingReader r(rec);
  auto stored = r.findings();
  EXPECT_FALSE(stored.empty());
  for (const auto& f : stored) EXPECT_EQ(f.detector, "reveal");
}

TEST(RevealCli, StorageBurstIsAttributedToStorage) {
  TempDir dir;
  const std::string rec = dir.file("disk.sdb");
  write_host_recording(rec, "h1", 240, 12, {{180, 184, "disk.write_bytes{vda}", 5e7}});
  auto j = analyze_json(rec + " --no-store");
  EXPECT_TRUE(has_finding(j, "storage", 180, 184)) << j["findings"].dump(1);
}

TEST(RevealCli, CleanWarmUpBaselineFindsEveryOneOfSeveralEpisodes) {
  TempDir dir;
  const std::string rec = dir.file("many.sdb");
  // Four 10 s episodes in 3 minutes: ~48 of ~178 windows are anomalous, far above the 1% the in-sample
  // thresholds assume; fitted on the first 40 s alone, each episode stands out.
  write_host_recording(rec, "h1", 180, 21,
                       {{60, 70, "cpu.time.user{cpu0}", 90}, {90, 100, "mem.used", 4e8},
                        {120, 130, "disk.write_bytes{vda}", 5e7}, {150, 160, "net.rx.bytes{eth0}", 5e7}});
  auto j = analyze_json(rec + " --no-store --reveal-baseline 40s");
  EXPECT_EQ(j["recordings"][0]["fit_windows"].get<int>(), 38);  // 3 s windows ending by 40 s
  EXPECT_TRUE(has_finding(j, "cpu", 60, 70)) << j["findings"].dump(1);
  EXPECT_TRUE(has_finding(j, "memory", 90, 100)) << j["findings"].dump(1);
  EXPECT_TRUE(has_finding(j, "storage", 120, 130)) << j["findings"].dump(1);
  EXPECT_TRUE(has_finding(j, "network", 150, 160)) << j["findings"].dump(1);
  std::string out;
  EXPECT_EQ(run_command(std::string(STACKSCOPE_BIN) + " analyze --detector reveal --no-store --reveal-baseline x " +
                            rec + " 2>&1",
                        &out),
            2)
      << out;
}

TEST(RevealCli, CrossHostMemoryImbalanceNamesTheHost) {
  TempDir dir;
  std::string args;
  for (int h = 0; h < 4; ++h) {
    const std::string rec = dir.file("h" + std::to_string(h) + ".sdb");
    write_host_recording(rec, "node" + std::to_string(h), 12, 20 + h, {}, h == 2 ? 1.0e9 : 0.0);
    args += rec + " ";
  }
  auto j = analyze_json(args + "--no-store");
  bool found = false;
  for (const auto& d : j["cross_host"])
    if (d["host"] == "node2" && d["metric"] == "mem.used" && d["subsystem"] == "memory") found = true;
  EXPECT_TRUE(found) << j["cross_host"].dump(1);
  for (const auto& d : j["cross_host"]) EXPECT_EQ(d["host"], "node2") << d.dump();
}

TEST(RevealCli, SavedMetricListIsReused) {
  TempDir dir;
  const std::string rec = dir.file("a.sdb"), list = dir.file("metrics.json");
  write_host_recording(rec, "h1", 15, 3, {});
  auto first = analyze_json(rec + " --no-store --reveal-metrics " + list);
  ASSERT_TRUE(first["pruning"].contains("saved_to"));
  auto saved = nlohmann::json::parse(read_file(list));
  ASSERT_TRUE(saved["kept"].is_array());
  auto second = analyze_json(rec + " --no-store --reveal-metrics " + list);
  EXPECT_EQ(second["pruning"]["source"], list);
  EXPECT_EQ(second["pruning"]["kept"], saved["kept"].size());
  write_file(list, "{\"nope\": 1}");
  std::string out;
  EXPECT_NE(run_command(std::string(STACKSCOPE_BIN) + " analyze --detector reveal " + rec + " --reveal-metrics " + list, &out), 0);
  EXPECT_NE(out.find("metric list"), std::string::npos) << out;
}

TEST(RevealImport, CsvBecomesARecordingAndBadRowsAreNamed) {
  TempDir dir;
  const std::string csv = dir.file("s.csv"), rec = dir.file("s.sdb");
  std::string body = "timestamp,ec2_cpu_utilization,disk_write_bytes_total,tcp_retrans_total\n";
  for (int i = 0; i < 50; ++i)
    body += "2014-02-14 14:" + std::string(i < 10 ? "0" : "") + std::to_string(i) + ":00," + std::to_string(10 + i % 3) +
            "," + std::to_string(1000 * i) + "," + std::to_string(i / 10) + "\n";
  write_file(csv, body);
  std::string out;
  ASSERT_EQ(run_command(std::string(STACKSCOPE_BIN) + " import --format csv " + csv + " --out " + rec +
                            " --host web1 --column ec2_cpu_utilization=cpu:gauge:dynamic:percent",
                        &out),
            0)
      << out;
  RecordingReader r(rec);
  ASSERT_EQ(r.series().size(), 3u);
  EXPECT_EQ(r.series()[0].subsystem, Subsystem::cpu);
  EXPECT_EQ(r.series()[0].unit, "percent");
  EXPECT_EQ(r.series()[1].subsystem, Subsystem::storage);
  EXPECT_EQ(r.series()[1].kind, SeriesKind::counter);
  EXPECT_EQ(r.series()[2].subsystem, Subsystem::network);
  EXPECT_EQ(r.series()[2].category, SeriesCategory::event_counter);
  EXPECT_EQ(r.series()[0].host, "web1");
  auto sum = r.summary();
  EXPECT_EQ(sum.samples, 150u);
  EXPECT_EQ(sum.end_ns - sum.start_ns, 49LL * 60 * 1'000'000'000 + 1);
  // realtime offset maps the first sample back to 2014-02-14 14:00:00 UTC.
  EXPECT_EQ(sum.start_ns + sum.realtime_offset_ns, 1392386400LL * 1'000'000'000);

  write_file(csv, "t,a,b\n1,2,3\n2,x,4\n");
  EXPECT_NE(run_command(std::string(STACKSCOPE_BIN) + " import --format csv " + csv + " --out " + rec, &out), 0);
  EXPECT_NE(out.find(":3: column 'a': 'x' is not a number"), std::string::npos) << out;
  write_file(csv, "t,a\n1,2\n2,3,4\n");
  EXPECT_NE(run_command(std::string(STACKSCOPE_BIN) + " import --format csv " + csv + " --out " + rec, &out), 0);
  EXPECT_NE(out.find(":3: expected 2 fields, got 3"), std::string::npos) << out;
  write_file(csv, "t,a\nyesterday,2\n");
  EXPECT_NE(run_command(std::string(STACKSCOPE_BIN) + " import --format csv " + csv + " --out " + rec, &out), 0);
  EXPECT_NE(out.find("neither seconds nor an ISO 8601 time"), std::string::npos) << out;
  write_file(csv, "t,a\n5,2\n4,3\n");
  EXPECT_NE(run_command(std::string(STACKSCOPE_BIN) + " import --format csv " + csv + " --out " + rec +
                            " --on-disorder error", &out), 0);
  EXPECT_NE(out.find("time goes backwards"), std::string::npos) << out;
  EXPECT_NE(run_command(std::string(STACKSCOPE_BIN) + " import --format csv " + csv + " --out " + rec +
                            " --column a=gpu:sometimes", &out), 0);
  EXPECT_NE(out.find("unknown kind 'sometimes'"), std::string::npos) << out;
}

TEST(RevealImport, TimestampFormats) {
  EXPECT_EQ(parse_csv_timestamp_ns("1.5"), 1'500'000'000);
  EXPECT_EQ(parse_csv_timestamp_ns("1970-01-01T00:00:01Z"), 1'000'000'000);
  EXPECT_EQ(parse_csv_timestamp_ns("1970-01-01 01:00:00+01:00"), 0);
  EXPECT_EQ(parse_csv_timestamp_ns("2014-02-14 14:30:00.250000"), 1392388200LL * 1'000'000'000 + 250'000'000);
  EXPECT_FALSE(parse_csv_timestamp_ns("2014-13-01"));
  EXPECT_FALSE(parse_csv_timestamp_ns("-999-02-14 14:00:00"));  // past 64-bit nanoseconds (found by fuzzing)
  EXPECT_FALSE(parse_csv_timestamp_ns("9999-12-31"));
  EXPECT_FALSE(parse_csv_timestamp_ns("12:00"));
}

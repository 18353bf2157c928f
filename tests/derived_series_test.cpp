// Derived metrics (Reveal Appendix B) on synthetic series whose answers are known.
#include "analyze/features/derived_series.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace stackscope;
using namespace stackscope::analyze;

namespace {

SeriesInfo counter(SeriesId id, std::string name, std::string device, std::string unit,
                   SeriesKind kind = SeriesKind::counter) {
  SeriesInfo s;
  s.id = id;
  s.name = std::move(name);
  s.device = std::move(device);
  s.unit = std::move(unit);
  s.kind = kind;
  s.host = "h";
  s.source = "procfs";
  return s;
}

const SeriesInfo* find(const DerivedSeries& d, const std::string& name, const std::string& device) {
  for (auto& s : d.series)
    if (s.name == name && s.device == device) return &s;
  return nullptr;
}

constexpr int64_t kSec = 1'000'000'000;

}  // namespace

TEST(DerivedSeries, CounterRateOfASyntheticCounter) {
  // 1000 bytes/s for 5 s at 100 ms, then a counter reset (driver reload), then 2000 bytes/s.
  std::vector<SeriesInfo> series = {counter(7, "net.rx.bytes", "eth0", "bytes")};
  SeriesSamples samples;
  auto& [t, v] = samples[7];
  double total = 5e9;
  for (int i = 0; i <= 50; ++i) {
    t.push_back(i * kSec / 10);
    v.push_back(total);
    total += 100;
  }
  total = 0;
  for (int i = 51; i <= 60; ++i) {
    t.push_back(i * kSec / 10);
    v.push_back(total);
    total += 200;
  }
  DerivedSeries d = derive_series(series, samples);
  const SeriesInfo* rate = find(d, "net.rx.bytes.rate", "eth0");
  ASSERT_TRUE(rate);
  EXPECT_EQ(rate->unit, "bytes/s");
  EXPECT_EQ(rate->source, "derived");
  EXPECT_EQ(rate->kind, SeriesKind::gauge);
  EXPECT_EQ(rate->host, "h");
  EXPECT_GT(rate->id, 7u);
  auto& [rt, rv] = d.samples.at(rate->id);
  ASSERT_EQ(rt.size(), 60u);  // one per interval
  for (size_t i = 0; i < 50; ++i) EXPECT_NEAR(rv[i], 1000.0, 1e-6) << i;
  // The reset interval counts what the counter shows since restarting (0 here), never a negative rate.
  EXPECT_GE(rv[50], 0.0);
  for (size_t i = 51; i < 60; ++i) EXPECT_NEAR(rv[i], 2000.0, 1e-6) << i;
  EXPECT_EQ(rt.front(), kSec / 10);
}

TEST(DerivedSeries, TimeAndEnergyCountersBecomeRatiosAndWatts) {
  std::vector<SeriesInfo> series = {counter(1, "disk.io_time", "vda", "milliseconds"),
                                    counter(2, "power.energy", "0:package-0", "microjoules"),
                                    counter(3, "pressure.io.some.total", "", "microseconds"),
                                    counter(4, "mem.MemFree", "", "bytes", SeriesKind::gauge)};
  SeriesSamples s;
  for (int i = 0; i < 10; ++i) {
    int64_t t = i * kSec;
    s[1].first.push_back(t), s[1].second.push_back(250.0 * i);     // busy 25% of each second
    s[2].first.push_back(t), s[2].second.push_back(35e6 * i);      // 35 W
    s[3].first.push_back(t), s[3].second.push_back(100'000.0 * i); // stalled 10%
    s[4].first.push_back(t), s[4].second.push_back(1e9);
  }
  DerivedSeries d = derive_series(series, s);
  auto check = [&](const char* name, const char* dev, const char* unit, double want) {
    const SeriesInfo* r = find(d, name, dev);
    ASSERT_TRUE(r) << name;
    EXPECT_EQ(r->unit, unit);
    for (double x : d.samples.at(r->id).second) EXPECT_NEAR(x, want, 1e-9) << name;
  };
  check("disk.io_time.rate", "vda", "ratio", 0.25);
  check("power.energy.rate", "0:package-0", "watts", 35.0);
  check("pressure.io.some.total.rate", "", "ratio", 0.1);
  EXPECT_FALSE(find(d, "mem.MemFree.rate", ""));  // gauges have no rate
}

TEST(DerivedSeries, CpuUtilisationPerCoreAndTotalInUnitInterval) {
  const char* fields[] = {"user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal"};
  std::vector<SeriesInfo> series;
  SeriesSamples s;
  SeriesId id = 1;
  // cpu0: 60% user, 10% system, 30% idle per interval; cpu1: all idle, with a backwards iowait step.
  for (std::string dev : {"cpu0", "cpu1"}) {
    for (int f = 0; f < 8; ++f) {
      series.push_back(counter(id, std::string("cpu.time.") + fields[f], dev, "jiffies"));
      for (int i = 0; i < 20; ++i) {
        double v = 0;
        if (dev == "cpu0") v = (f == 0 ? 6.0 : f == 2 ? 1.0 : f == 3 ? 3.0 : 0.0) * i;
        else v = f == 3 ? 10.0 * i : f == 4 ? (i == 10 ? 0.0 : 5.0) : 0.0;
        s[id].first.push_back(i * kSec / 10);
        s[id].second.push_back(v);
      }
      ++id;
    }
  }
  DerivedSeries d = derive_series(series, s);
  const SeriesInfo* u0 = find(d, "cpu.util", "cpu0");
  const SeriesInfo* u1 = find(d, "cpu.util", "cpu1");
  ASSERT_TRUE(u0 && u1);
  EXPECT_EQ(u0->unit, "ratio");
  EXPECT_EQ(d.samples.at(u0->id).second.size(), 19u);
  for (double x : d.samples.at(u0->id).second) EXPECT_NEAR(x, 0.7, 1e-12);
  for (double x : d.samples.at(u1->id).second) {
    EXPECT_GE(x, 0.0);
    EXPECT_LE(x, 1.0);
  }
  for (double x : d.samples.at(find(d, "cpu.util.user", "cpu0")->id).second) EXPECT_NEAR(x, 0.6, 1e-12);
  for (double x : d.samples.at(find(d, "cpu.util.system", "cpu0")->id).second) EXPECT_NEAR(x, 0.1, 1e-12);
  for (auto& info : d.series)
    if (info.unit == "ratio")
      for (double x : d.samples.at(info.id).second) {
        EXPECT_TRUE(std::isfinite(x));
        EXPECT_GE(x, 0.0) << info.key();
        EXPECT_LE(x, 1.0) << info.key();
      }
  // cpu.time.* get utilisation, not jiffies rates.
  EXPECT_FALSE(find(d, "cpu.time.user.rate", "cpu0"));
}

TEST(DerivedSeries, PmuRatiosPerCpuAndHostTotal) {
  std::vector<SeriesInfo> series;
  SeriesSamples s;
  SeriesId id = 1;
  // cpu0 IPC 2, cpu1 IPC 0.5, equal cycles: host IPC 1.25. Cache miss 10% on cpu0.
  for (int cpu = 0; cpu < 2; ++cpu) {
    std::string dev = "cpu" + std::to_string(cpu);
    SeriesId cyc = id++, ins = id++, ref = id++, miss = id++;
    series.push_back(counter(cyc, "perf.cycles", dev, "count"));
    series.push_back(counter(ins, "perf.instructions", dev, "count"));
    series.push_back(counter(ref, "perf.cache_references", dev, "count"));
    series.push_back(counter(miss, "perf.cache_misses", dev, "count"));
    for (int i = 0; i < 10; ++i) {
      int64_t t = i * kSec;
      for (SeriesId k : {cyc, ins, ref, miss}) s[k].first.push_back(t);
      s[cyc].second.push_back(1e9 * i);
      s[ins].second.push_back((cpu == 0 ? 2e9 : 0.5e9) * i);
      s[ref].second.push_back(1e6 * i);
      s[miss].second.push_back((cpu == 0 ? 1e5 : 0) * i);
    }
  }
  DerivedSeries d = derive_series(series, s);
  auto all = [&](const char* name, const char* dev, double want) {
    const SeriesInfo* r = find(d, name, dev);
    ASSERT_TRUE(r) << name << "{" << dev << "}";
    ASSERT_EQ(d.samples.at(r->id).second.size(), 9u);
    for (double x : d.samples.at(r->id).second) EXPECT_NEAR(x, want, 1e-12) << name;
  };
  all("cpu.ipc", "cpu0", 2.0);
  all("cpu.ipc", "cpu1", 0.5);
  all("cpu.ipc", "", 1.25);
  all("cpu.cache_miss_rate", "cpu0", 0.1);
  all("cpu.cache_miss_rate", "", 0.05);
  EXPECT_FALSE(find(d, "cpu.branch_miss_rate", "cpu0"));  // no branch counters given
}

TEST(DerivedSeries, MemoryAndNetworkUtilisation) {
  std::vector<SeriesInfo> series = {counter(1, "mem.MemTotal", "", "bytes", SeriesKind::static_value),
                                    counter(2, "mem.MemAvailable", "", "bytes", SeriesKind::gauge),
                                    counter(3, "net.rx.bytes", "eth0", "bytes"),
                                    counter(4, "net.tx.bytes", "eth0", "bytes"),
                                    counter(5, "net.link.speed", "eth0", "bits/s", SeriesKind::static_value)};
  SeriesSamples s;
  for (int i = 0; i < 5; ++i) {
    int64_t t = i * kSec;
    for (SeriesId k : {1, 2, 3, 4}) s[k].first.push_back(t);
    s[1].second.push_back(8e9);
    s[2].second.push_back(2e9);
    s[3].second.push_back(125e6 * i * 0.4);  // 40% of 1 Gb/s
    s[4].second.push_back(125e6 * i * 0.1);
  }
  s[5] = {{0}, {1e9}};
  DerivedSeries d = derive_series(series, s);
  const SeriesInfo* mu = find(d, "mem.util", "");
  ASSERT_TRUE(mu);
  for (double x : d.samples.at(mu->id).second) EXPECT_NEAR(x, 0.75, 1e-12);
  const SeriesInfo* nu = find(d, "net.util", "eth0");
  ASSERT_TRUE(nu);
  for (double x : d.samples.at(nu->id).second) EXPECT_NEAR(x, 0.4, 1e-12);
}

TEST(DerivedSeries, BadInputYieldsNothingNotGarbage) {
  std::vector<SeriesInfo> series = {counter(1, "net.rx.bytes", "eth0", "bytes"),
                                    counter(2, "disk.reads", "vda", "count")};
  SeriesSamples s;
  s[1] = {{3, 2, 1}, {1, 2, 3}};                          // times out of order
  s[2] = {{0, kSec, kSec, 2 * kSec}, {0, NAN, 5, 10}};    // NaN and a repeated time
  DerivedSeries d = derive_series(series, s);
  EXPECT_FALSE(find(d, "net.rx.bytes.rate", "eth0"));
  const SeriesInfo* r = find(d, "disk.reads.rate", "vda");
  ASSERT_TRUE(r);
  for (double x : d.samples.at(r->id).second) EXPECT_TRUE(std::isfinite(x));
  // Flat samples in any order give the same as grouped ones.
  std::vector<Sample> flat = {{2, 2 * kSec, 10}, {2, 0, 0}, {2, kSec, 5}};
  DerivedSeries d2 = derive_series(series, std::span<const Sample>(flat));
  const SeriesInfo* r2 = find(d2, "disk.reads.rate", "vda");
  ASSERT_TRUE(r2);
  EXPECT_EQ(d2.samples.at(r2->id).second, (std::vector<double>{5, 5}));
  // Empty input: empty output.
  EXPECT_TRUE(derive_series({}, SeriesSamples{}).series.empty());
}

// Synthesises a long host recording for the Reveal memory benchmark (bench/reveal_memory.sh measures the
// analysis' peak RSS on it): SERIES series sampled every PERIOD_MS for DAYS simulated days -- CPU-like gauges
// with a daily cycle, network byte counters, memory gauges and sparse error counters, each with its own noise
// -- and one injected anomaly: every cpu.util gauge jumps by 0.5 for 120 s at 60% of the run (a competitor on
// every core; on all of them because pruning keeps one representative of the correlated CPU gauges), which the
// analysis must still find.
// usage: reveal_memory_bench OUT.sdb [days=7] [series=100] [period_ms=1000]
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "model/clock.h"
#include "store/recording_writer.h"

using namespace stackscope;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: reveal_memory_bench OUT.sdb [days=7] [series=100] [period_ms=1000]\n");
    return 2;
  }
  const double days = argc > 2 ? std::atof(argv[2]) : 7;
  const int series = argc > 3 ? std::atoi(argv[3]) : 100;
  const int64_t period = (argc > 4 ? std::atoll(argv[4]) : 1000) * 1'000'000;
  if (!(days > 0) || series < 4 || period <= 0) {
    std::fprintf(stderr, "reveal_memory_bench: days > 0, series >= 4 and period_ms > 0 please\n");
    return 2;
  }
  RecordingWriterOptions wo;
  RecordingWriter w(argv[1], wo);
  w.set_meta("host", "synthetic-week");
  struct Gen {
    SeriesId id;
    int type;  // 0 cpu gauge, 1 net byte counter, 2 memory gauge, 3 error counter
    double level, noise, total = 0;
  };
  std::mt19937_64 rng(42);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<Gen> gens;
  for (int i = 0; i < series; ++i) {
    SeriesInfo s;
    const int type = i % 4;
    const std::string dev = std::to_string(i);
    s.source = "synthetic";
    s.host = "synthetic-week";
    if (type == 0) s = {0, "cpu.util", Subsystem::cpu, "ratio", SeriesKind::gauge, SeriesCategory::dynamic, s.host, "cpu" + dev, s.source};
    if (type == 1) s = {0, "net.rx_bytes", Subsystem::network, "bytes", SeriesKind::counter, SeriesCategory::dynamic, s.host, "eth" + dev, s.source};
    if (type == 2) s = {0, "mem.used", Subsystem::memory, "bytes", SeriesKind::gauge, SeriesCategory::dynamic, s.host, "node" + dev, s.source};
    if (type == 3) s = {0, "net.rx_errs", Subsystem::network, "count", SeriesKind::counter, SeriesCategory::event_counter, s.host, "eth" + dev, s.source};
    gens.push_back({w.add_series(s), type, 0.2 + 0.6 * u(rng), 0.02 + 0.05 * u(rng)});
  }
  std::normal_distribution<double> n01(0.0, 1.0);
  const int64_t start = monotonic_ns() + 10'000'000;  // after the recording's start
  const int64_t steps = static_cast<int64_t>(days * 86400e9 / static_cast<double>(period));
  const int64_t anomaly_from = steps * 6 / 10, anomaly_to = anomaly_from + 120'000'000'000 / period;
  std::vector<Sample> batch;
  batch.reserve(static_cast<size_t>(series) * 1000);
  for (int64_t k = 0; k < steps; ++k) {
    const int64_t t = start + k * period;
    const double day_phase = std::sin(2 * M_PI * static_cast<double>(t) / 86400e9);
    for (Gen& g : gens) {
      double v = g.level + 0.1 * day_phase * g.level + g.noise * n01(rng);
      if (g.type == 0 && k >= anomaly_from && k < anomaly_to) v += 0.5;
      if (g.type == 1) v = (g.total += std::max(0.0, v) * 1e6);
      if (g.type == 2) v *= 8e9;
      if (g.type == 3) v = (g.total += u(rng) < 0.001 ? 1 : 0);
      batch.push_back({g.id, t, v});
    }
    if (batch.size() >= static_cast<size_t>(series) * 1000) {
      w.append_samples(batch);
      batch.clear();
      w.flush();  // keep the writer's backlog bounded
    }
  }
  w.append_samples(batch);
  w.close();
  const auto st = w.stats();
  std::printf("{\"series\":%d,\"days\":%g,\"period_ms\":%lld,\"samples\":%llu,\"dropped\":%llu,\"bytes_stored\":%llu,"
              "\"anomaly_s\":[%.0f,%.0f]}\n",
              series, days, static_cast<long long>(period / 1'000'000), static_cast<unsigned long long>(st.samples),
              static_cast<unsigned long long>(st.dropped), static_cast<unsigned long long>(st.bytes_stored),
              static_cast<double>(anomaly_from * period) / 1e9, static_cast<double>(anomaly_to * period) / 1e9);
  return st.dropped ? 1 : 0;
}

// The /metrics exposition of a big GPU node (the target: 8 GPUs x 700 series in <= 50 ms a scrape): the
// agent's registry filled through the same host exporter the node's NVML sampler feeds, then serialised as a scrape
// does. Plus the per-job families of 8 jobs x 8 ranks x 7 layers. The HTTP round trip is in agent_bench.sh.
#include <benchmark/benchmark.h>

#include "agent/agent_metrics.h"

namespace {

using namespace stackscope;

struct NullSink final : TelemetrySink {
  SeriesId add_series(const SeriesInfo&) override { return ++n; }
  void append_event(Event&&) override {}
  void append_samples(std::span<const Sample>) override {}
  void add_drops(std::string_view, uint64_t) override {}
  void add_note(std::string_view, std::string_view) override {}
  SeriesId n = 0;
};

void BM_Scrape(benchmark::State& state) {
  const int gpus = static_cast<int>(state.range(0)), per_gpu = static_cast<int>(state.range(1));
  agent::AgentMetrics m("node", "bench");
  NullSink null;
  auto exporter = m.host_exporter(null, 1'000'000);
  std::vector<Sample> samples;
  for (int g = 0; g < gpus; ++g)
    for (int s = 0; s < per_gpu; ++s) {
      // 700 distinct metric names per GPU (as NVML field values, NVLink lanes, per-engine counters would be).
      const bool counter = s % 3 == 0;
      const SeriesId id = exporter->add_series(series_info("gpu.field." + std::to_string(s), "gpu" + std::to_string(g),
                                                           Subsystem::gpu, counter ? "count" : "bytes",
                                                           counter ? SeriesKind::counter : SeriesKind::gauge,
                                                           SeriesCategory::dynamic, "nvml"));
      samples.push_back({id, 1, 1e6 + s});
    }
  exporter->append_samples(samples);
  for (int j = 0; j < 8; ++j) {
    agent::JobLabels job{"python3-" + std::to_string(1000 + j), "", ""};
    m.job_started(job, 1.7e9, 7);
    for (int r = 0; r < 8; ++r)
      for (Layer l : {Layer::cuda, Layer::nccl, Layer::torch, Layer::python, Layer::kernel, Layer::nvml, Layer::host})
        m.add_job_events(job, std::to_string(r), l, 100);
  }
  size_t bytes = 0;
  for (auto _ : state) {
    std::string text = m.scrape();
    bytes = text.size();
    benchmark::DoNotOptimize(text);
  }
  state.counters["series"] = static_cast<double>(gpus * per_gpu);
  state.counters["bytes"] = static_cast<double>(bytes);
}
BENCHMARK(BM_Scrape)->Args({8, 700})->Args({1, 100})->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();

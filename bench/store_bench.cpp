// Store throughput: events/s and samples/s a RecordingWriter sustains on one core (the caller's thread
// appends; the writer thread encodes and commits), and bytes per event and per sample on disk.
#include <benchmark/benchmark.h>
#include <sys/stat.h>
#include <unistd.h>

#include <random>
#include <string>

#include "store/recording_writer.h"

using namespace stackscope;

namespace {
std::string temp_path(const char* name) { return std::string("/tmp/stackscope-bench-") + name + ".sdb"; }
uint64_t file_size(const std::string& p) {
  struct stat st{};
  return ::stat(p.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
}
}  // namespace

// Realistic CUDA/NCCL-like events: few distinct names, kernel names from a small set, 3-5 integer args.
static void BM_StoreEvents(benchmark::State& state) {
  std::string path = temp_path("events");
  const char* names[] = {"cudaLaunchKernel", "cudaMemcpyAsync", "ncclAllReduce", "aten::addmm", "cudaMalloc"};
  const char* kernels[] = {"ampere_sgemm_128x64_tn", "vectorized_elementwise_kernel", "reduce_kernel",
                           "softmax_warp_forward", "layer_norm_kernel", "cutlass_80_tensorop_gemm"};
  std::mt19937_64 rng(1);
  int64_t total = 0;
  uint64_t bytes = 0;
  for (auto _ : state) {
    RecordingWriter w(path);
    int64_t t = 1'000'000'000;
    for (int64_t i = 0; i < state.range(0); ++i) {
      Event e;
      int k = static_cast<int>(rng() % 5);
      e.layer = k == 2 ? Layer::nccl : k == 3 ? Layer::torch : Layer::cuda;
      e.flags = kEventHostEnqueue;
      e.pid = 4242;
      e.tid = 4242 + static_cast<uint32_t>(rng() % 4);
      t += 2000 + static_cast<int64_t>(rng() % 3000);
      e.start_ns = t;
      e.duration_ns = 3000 + static_cast<int64_t>(rng() % 5000);
      e.name = names[k];
      e.args.reserve(4);
      e.args.push_back({"grid_x", static_cast<int64_t>(rng() % 1024)});
      e.args.push_back({"block_x", int64_t{256}});
      e.args.push_back({"stream", int64_t{0x7f0000001000}});
      e.args.push_back({"kernel", std::string(kernels[rng() % 6])});
      w.append_event(std::move(e));
    }
    w.close();
    bytes = file_size(path);
    total += state.range(0);
  }
  state.SetItemsProcessed(total);
  state.counters["bytes_per_event"] = static_cast<double>(bytes) / static_cast<double>(state.range(0));
  ::unlink(path.c_str());
}
BENCHMARK(BM_StoreEvents)->Arg(2'000'000)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(3);

// Host-telemetry-like samples: 700 series at one tick each; most counters grow slowly, some gauges jitter.
static void BM_StoreSamples(benchmark::State& state) {
  std::string path = temp_path("samples");
  const int kSeries = 700;
  std::mt19937_64 rng(2);
  int64_t total = 0;
  uint64_t bytes = 0;
  for (auto _ : state) {
    RecordingWriter w(path);
    std::vector<SeriesId> ids;
    for (int s = 0; s < kSeries; ++s)
      ids.push_back(w.add_series({0, "bench.series", Subsystem::cpu, "count",
                                  s % 3 ? SeriesKind::counter : SeriesKind::gauge, SeriesCategory::dynamic, "h",
                                  std::to_string(s), "bench"}));
    std::vector<double> value(kSeries, 0);
    std::vector<Sample> tick(kSeries);
    int64_t ticks = state.range(0) / kSeries;
    for (int64_t k = 0; k < ticks; ++k) {
      int64_t t = 1'000'000'000 + k * 100'000'000;
      for (int s = 0; s < kSeries; ++s) {
        if (s % 3) value[s] += static_cast<double>(rng() % 16);          // counter: small increments
        else value[s] = static_cast<double>(rng() % 1000) / 10.0;        // gauge: one decimal
        tick[s] = {ids[s], t, value[s]};
      }
      w.append_samples(tick);
    }
    w.close();
    bytes = file_size(path);
    total += ticks * kSeries;
  }
  state.SetItemsProcessed(total);
  state.counters["bytes_per_sample"] = static_cast<double>(bytes) / static_cast<double>(state.range(0));
  // What 700 series at 100 ms (7,000 samples/s) would write per second at this density.
  state.counters["KB_per_s_700series_100ms"] = 7000.0 * static_cast<double>(bytes) / static_cast<double>(state.range(0)) / 1024.0;
  ::unlink(path.c_str());
}
BENCHMARK(BM_StoreSamples)->Arg(7'000'000)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(3);

BENCHMARK_MAIN();

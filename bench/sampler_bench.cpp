// Cost of the host telemetry sampler (Reveal reports 1.2-1.4% CPU for its collector).
//   sampler_bench                                  all benchmarks (the recording one runs 30 s)
//   sampler_bench --benchmark_filter=Tick          CPU time per tick, all families and each family alone
//   sampler_bench --benchmark_filter=Threaded      the real sampling thread at 100 ms and 10 ms
//   sampler_bench --benchmark_filter=Recording     30 s at 100 ms into a RecordingWriter: file bytes/s, with the
//                                                  writer's default 250 ms flush and with 1 s (args: seconds/flush)
//   sampler_bench --benchmark_filter=ProcessCpu    the proc_cpu family's scan with ~300 processes on the host (sleepers
//                                                  are started up to that), one traced with 32 threads: cpu_pct_at_1s
// Counters: cpu_pct_at_100ms / cpu_pct_at_10ms = CPU per tick as % of one core at that interval;
// series = series declared; samples_per_tick; bytes_per_s and bytes_per_sample of the recording file.
#include <benchmark/benchmark.h>
#include <time.h>
#include <unistd.h>

#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <thread>
#include <vector>

#include "model/counting_sink.h"
#include "sample/procfs_sampler.h"
#include "store/recording_writer.h"

using namespace stackscope;

namespace {

int64_t thread_cpu_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1'000'000'000LL + ts.tv_nsec;
}

// One tick in the benchmark's own thread; "cpu" is the thread's CPU time.
void BM_Tick(benchmark::State& state, std::vector<std::string> families) {
  ProcfsSamplerOptions opt;
  opt.families = families;
  ProcfsSampler sampler(opt);
  CountingSink sink;
  auto st = sampler.open(sink, "bench");
  if (!st.running) {
    state.SkipWithError(st.message.c_str());
    return;
  }
  sampler.tick();  // declares the series
  uint64_t samples0 = sink.samples;
  int64_t cpu0 = thread_cpu_ns();
  for (auto _ : state) sampler.tick();
  double cpu_per_tick = static_cast<double>(thread_cpu_ns() - cpu0) / static_cast<double>(state.iterations());
  state.counters["series"] = static_cast<double>(sink.series);
  state.counters["samples_per_tick"] =
      static_cast<double>(sink.samples - samples0) / static_cast<double>(state.iterations());
  state.counters["cpu_us_per_tick"] = cpu_per_tick / 1e3;
  state.counters["cpu_pct_at_100ms"] = cpu_per_tick / 100e6 * 100;
  state.counters["cpu_pct_at_10ms"] = cpu_per_tick / 10e6 * 100;
}

// The real thing: the sampler's own thread for a few seconds; its CPU time over wall time.
void BM_Threaded(benchmark::State& state) {
  int interval_ms = static_cast<int>(state.range(0));
  for (auto _ : state) {
    ProcfsSampler sampler{ProcfsSamplerOptions{}};
    CountingSink sink;
    CollectorOptions co;
    co.interval_ms = interval_ms;
    auto st = sampler.start(sink, co);
    if (!st.running) {
      state.SkipWithError(st.message.c_str());
      return;
    }
    std::this_thread::sleep_for(std::chrono::seconds(5));
    sampler.stop();
    auto s = sampler.stats();
    state.SetIterationTime(static_cast<double>(s.wall_ns) / 1e9);
    state.counters["cpu_pct_of_core"] = 100.0 * static_cast<double>(s.thread_cpu_ns) / static_cast<double>(s.wall_ns);
    state.counters["ticks"] = static_cast<double>(s.ticks);
    state.counters["missed_ticks"] = static_cast<double>(s.missed_ticks);
    state.counters["series"] = static_cast<double>(s.series);
    state.counters["samples_per_tick"] = static_cast<double>(s.samples) / static_cast<double>(std::max<uint64_t>(1, s.ticks));
  }
}

// 30 s at 100 ms into a real recording file.
void BM_Recording(benchmark::State& state) {
  int seconds = static_cast<int>(state.range(0));
  RecordingWriterOptions wopt;
  wopt.flush_interval_ms = static_cast<int>(state.range(1));  // 250 is the writer's default
  for (auto _ : state) {
    std::string path = (std::filesystem::temp_directory_path() / ("sampler-bench-" + std::to_string(::getpid()) + ".ssrec")).string();
    RecordingWriterStats ws;
    {
      RecordingWriter writer(path, wopt);
      ProcfsSampler sampler{ProcfsSamplerOptions{}};
      CollectorOptions co;
      co.interval_ms = 100;
      auto st = sampler.start(writer, co);
      if (!st.running) {
        state.SkipWithError(st.message.c_str());
        return;
      }
      std::this_thread::sleep_for(std::chrono::seconds(seconds));
      sampler.stop();
      writer.close();
      ws = writer.stats();
    }
    // Bytes of an empty recording (schema, metadata) are not growth: measure them and subtract.
    std::string empty_path = path + ".empty";
    { RecordingWriter empty(empty_path); empty.close(); }
    double size = static_cast<double>(std::filesystem::file_size(path));
    double base = static_cast<double>(std::filesystem::file_size(empty_path));
    std::filesystem::remove(path);
    std::filesystem::remove(empty_path);
    state.SetIterationTime(seconds);
    state.counters["file_bytes"] = size;
    state.counters["bytes_per_s"] = (size - base) / seconds;
    state.counters["series"] = static_cast<double>(ws.series);
    state.counters["samples"] = static_cast<double>(ws.samples);
    state.counters["bytes_per_sample"] = (size - base) / static_cast<double>(std::max<uint64_t>(1, ws.samples));
    state.counters["block_bytes_raw"] = static_cast<double>(ws.bytes_raw);
    state.counters["block_bytes_stored"] = static_cast<double>(ws.bytes_stored);
  }
}

size_t count_processes() {
  size_t n = 0;
  if (DIR* d = ::opendir("/proc")) {
    while (dirent* e = ::readdir(d)) n += e->d_name[0] >= '1' && e->d_name[0] <= '9';
    ::closedir(d);
  }
  return n;
}

// One scan of every process (the proc_cpu family alone, as it runs every second), with the host topped up to
// state.range(0) processes by sleeping children, and a traced child with 32 threads (a trainer's worker pool)
// whose run-queue wait is read thread by thread.
void BM_ProcessCpu(benchmark::State& state) {
  const size_t target = static_cast<size_t>(state.range(0));
  std::vector<pid_t> children;
  pid_t traced = ::fork();
  if (traced == 0) {
    for (int i = 0; i < 32; ++i) std::thread([] { for (;;) ::pause(); }).detach();
    for (;;) ::pause();
  }
  children.push_back(traced);
  for (size_t n = count_processes(); n < target; ++n) {
    pid_t c = ::fork();
    if (c == 0)
      for (;;) ::pause();
    children.push_back(c);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // threads started
  ProcfsSamplerOptions opt;
  opt.families = {"proc_cpu"};
  opt.proc_cpu_period_ms = 0;
  opt.traced_pids = {static_cast<uint32_t>(traced)};
  ProcfsSampler sampler(opt);
  CountingSink sink;
  auto st = sampler.open(sink, "bench");
  if (st.running) {
    sampler.tick();  // the baseline
    int64_t cpu0 = thread_cpu_ns();
    for (auto _ : state) sampler.tick();
    double cpu_per_scan = static_cast<double>(thread_cpu_ns() - cpu0) / static_cast<double>(state.iterations());
    state.counters["processes"] = static_cast<double>(count_processes());
    state.counters["cpu_us_per_scan"] = cpu_per_scan / 1e3;
    state.counters["cpu_pct_at_1s"] = cpu_per_scan / 1e9 * 100;
    state.counters["series"] = static_cast<double>(sink.series);
  } else {
    state.SkipWithError(st.message.c_str());
  }
  for (pid_t c : children) ::kill(c, SIGKILL);
  for (pid_t c : children) ::waitpid(c, nullptr, 0);
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::RegisterBenchmark("BM_Tick/all", BM_Tick, std::vector<std::string>{});
  for (const ProcfsFamilyInfo& f : list_procfs_families())
    if (f.available) benchmark::RegisterBenchmark(("BM_Tick/" + f.name).c_str(), BM_Tick, std::vector<std::string>{f.name});
  benchmark::RegisterBenchmark("BM_Threaded", BM_Threaded)->Arg(100)->Arg(10)->UseManualTime()->Iterations(1)->Unit(benchmark::kSecond);
  benchmark::RegisterBenchmark("BM_Recording", BM_Recording)->Args({30, 250})->Args({30, 1000})->UseManualTime()->Iterations(1)->Unit(benchmark::kSecond);
  benchmark::RegisterBenchmark("BM_ProcessCpu", BM_ProcessCpu)->Arg(300)->Unit(benchmark::kMillisecond);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

// Cost of the kernel layer (bpf/kernel.bpf.c + src/trace/kernel_tracer.cpp), root only.
//   kernel_layer_bench --benchmark_filter=Tick        CPU time of one read of every counter map (per interval)
//   kernel_layer_bench --benchmark_filter=PingPong    a context-switch-bound workload (two threads bouncing a byte
//                                                     over pipes) without and with the layer on every task (--all)
// Counters: cpu_pct_at_10ms / cpu_pct_at_100ms = reading cost as % of one core at that interval;
// ns_per_switch = the workload's cost per context switch; bpf_ns_per_run = the sched_switch handler's own time
// per run (kernel.bpf_stats_enabled, switched on here for the run).
#include <benchmark/benchmark.h>
#include <bpf/bpf.h>
#include <time.h>
#include <unistd.h>

#include <thread>

#include "model/counting_sink.h"
#include "model/sink.h"
#include "trace/kernel_tracer.h"

using namespace stackscope;

namespace {

int64_t thread_cpu_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1'000'000'000LL + ts.tv_nsec;
}

bool start_all(trace::KernelTracer& tracer, CountingSink& sink, benchmark::State& state) {
  CollectorOptions o;
  o.all_processes = true;
  o.interval_ms = 60'000;  // the thread stays out of the way: the benchmark ticks itself
  auto st = tracer.start(sink, o);
  if (!st.running) state.SkipWithError(("kernel layer: " + st.message).c_str());
  return st.running;
}

void BM_KernelTick(benchmark::State& state) {
  trace::KernelTracer tracer;
  CountingSink sink;
  if (!start_all(tracer, sink, state)) return;
  tracer.tick();  // declares the series
  int64_t cpu0 = thread_cpu_ns();
  for (auto _ : state) tracer.tick();
  double per_tick = static_cast<double>(thread_cpu_ns() - cpu0) / static_cast<double>(state.iterations());
  state.counters["cpu_us_per_tick"] = per_tick / 1e3;
  state.counters["cpu_pct_at_10ms"] = 100.0 * per_tick / 10e6;
  state.counters["cpu_pct_at_100ms"] = 100.0 * per_tick / 100e6;
  state.counters["series"] = static_cast<double>(sink.series);
  tracer.stop();
}
BENCHMARK(BM_KernelTick)->Unit(benchmark::kMicrosecond)->MinTime(2.0);

// Two threads bounce one byte over a pair of pipes: each round trip is at least two context switches.
void BM_PingPong(benchmark::State& state) {
  const bool traced = state.range(0) != 0;
  int stats_fd = traced ? bpf_enable_stats(BPF_STATS_RUN_TIME) : -1;
  trace::KernelTracer tracer;
  CountingSink sink;
  if (traced && !start_all(tracer, sink, state)) return;
  int a[2], b[2];
  if (pipe(a) || pipe(b)) {
    state.SkipWithError("pipe");
    return;
  }
  std::thread echo([&] {
    char c;
    while (read(a[0], &c, 1) == 1 && c) [[maybe_unused]] auto n = write(b[1], &c, 1);
  });
  char c = 1;
  for (auto _ : state) {
    [[maybe_unused]] auto n = write(a[1], &c, 1);
    n = read(b[0], &c, 1);
  }
  c = 0;
  [[maybe_unused]] auto n = write(a[1], &c, 1);
  echo.join();
  for (int fd : {a[0], a[1], b[0], b[1]}) close(fd);
  state.counters["ns_per_switch"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * 2, benchmark::Counter::kIsRate |
                                                                        benchmark::Counter::kInvert);
  if (traced) {
    for (auto& p : tracer.program_costs())
      if (p.name == "on_switch" && p.runs > 0)
        state.counters["bpf_ns_per_run"] = static_cast<double>(p.ns) / static_cast<double>(p.runs);
    tracer.stop();
  }
  if (stats_fd >= 0) close(stats_fd);
}
BENCHMARK(BM_PingPong)->Arg(0)->Arg(1)->UseRealTime()->Unit(benchmark::kMicrosecond)->MinTime(2.0);

}  // namespace

BENCHMARK_MAIN();

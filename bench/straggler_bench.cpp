// KAIR straggler localisation at scale. Target: 4,096 workers x 1,000 steps analysed in at most 2 s on one
// core (stage 1 on a step-time table: pairwise K-S with sampled peers, whole run and windows). The full
// three-stage analysis of simulated timelines is timed too (4,096 workers x 10 steps, ~18 operations each).
#include <benchmark/benchmark.h>

#include "analyze/stragglers/straggler.h"
#include "analyze/stragglers/straggler_sim.h"

using namespace stackscope;
using namespace stackscope::analyze;

static void BM_StragglerStepTable(benchmark::State& state) {
  const int workers = static_cast<int>(state.range(0)), steps = static_cast<int>(state.range(1));
  const auto table = simulate_step_times(workers, steps, {{SimFaultKind::intermittent_stall, workers / 3, 0, 2.0, 0, 0.1}}, 3);
  for (auto _ : state) {
    auto r = analyze_step_times(table);
    benchmark::DoNotOptimize(r.stragglers);
  }
  state.counters["workers"] = workers;
  state.counters["steps"] = steps;
}
BENCHMARK(BM_StragglerStepTable)->Args({512, 1000})->Args({4096, 1000})->Unit(benchmark::kMillisecond)->Iterations(1);

static void BM_StragglerTimelines(benchmark::State& state) {
  SimOptions o;
  o.workers = static_cast<int>(state.range(0));
  o.steps = 10;
  o.faults = {{SimFaultKind::slow_compute, o.workers / 2, 3, 2.0, 0, 0}};
  const auto set = simulate_training(o);
  size_t ops = 0;
  for (auto& w : set.workers) ops += w.ops.size();
  for (auto _ : state) {
    auto r = analyze_stragglers(set);
    benchmark::DoNotOptimize(r.root_causes);
  }
  state.counters["workers"] = o.workers;
  state.counters["operations"] = static_cast<double>(ops);
}
BENCHMARK(BM_StragglerTimelines)->Arg(512)->Arg(4096)->Unit(benchmark::kMillisecond)->Iterations(1);

BENCHMARK_MAIN();

// Step detection of one process whose only operations are its CUDA syncs, three a step (the name sequence repeats
// every operation, the step every third one): what the online incident engine re-runs on every pass until its
// prefix holds 200,000 operations. Trying every step multiple up to n / 60 is O(n^2) (105 ms a pass at 15,000
// syncs of an H200 job), so multiples and samples per position are bounded.
static void BM_StepsOfASyncLoop(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0));
  TimelineSet base;
  base.collectives_include_wait = false;
  WorkerTimeline w;
  w.worker = "rank0";
  const uint32_t sync = base.intern("cudaStreamSynchronize");
  uint64_t x = 88172645463325252ull;  // xorshift: the pauses' noise
  int64_t t = 0;
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    TimelineOp op;
    op.name = sync;
    op.kind = OpKind::sync;
    op.start_ns = t;
    op.duration_ns = 200'000;
    w.ops.push_back(op);
    t += op.duration_ns + (i % 3 == 2 ? 3'000'000 : 1'000'000) + static_cast<int64_t>(x % 400'000);
  }
  base.workers.push_back(std::move(w));
  int steps = 0;
  for (auto _ : state) {
    TimelineSet set = base;
    steps = assign_steps(set).steps;
  }
  state.counters["ops"] = static_cast<double>(n);
  state.counters["steps"] = steps;
}
BENCHMARK(BM_StepsOfASyncLoop)->Arg(15'000)->Arg(60'000)->Arg(200'000)->Unit(benchmark::kMillisecond)->Iterations(3);

// KAIR straggler localisation at scale. Target: 4,096 workers x 1,000 steps analysed in at most 2 s on one
// core (stage 1 on a step-time table: pairwise K-S with sampled peers, whole run and windows). The full
// three-stage analysis of simulated timelines is timed too (4,096 workers x 10 steps, ~18 operations each).
#include <benchmark/benchmark.h>

#include "analyze/stragglers/straggler.h"
#include "analyze/stragglers/straggler_sim.h"

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

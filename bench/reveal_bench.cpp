// Reveal pipeline speed (targets below; Reveal's own figures: features 1.46 s per 3 s window,
// Z 1.1 ms, Mahalanobis 15 ms, Isolation Forest 80 ms per window batch).
//  - feature extraction of one 3 s window at 100 ms (30 samples) for 700 series: target <= 1 ms on one core;
//  - each detector fitted and scored on the same window counts: target 10x under Reveal's figures.
// Run: build/bench/reveal_bench (or build-x/bench/reveal_bench --benchmark_filter=...).
#include <benchmark/benchmark.h>

#include <random>

#include "analyze/detectors/isolation_forest.h"
#include "analyze/detectors/pca_mahalanobis.h"
#include "analyze/reveal/reveal_ensemble.h"
#include "analyze/reveal/window_features.h"
#include "analyze/detectors/zscore.h"

using namespace stackscope::analyze;

namespace {
constexpr int64_t kMs = 1'000'000;

// 700 series x 30 samples of one window, fed as the recording reader would (one run per series).
void BM_WindowFeatures700x30(benchmark::State& state) {
  const int series = 700, samples = 30;
  std::mt19937 rng(1);
  std::normal_distribution<double> n01;
  std::vector<int64_t> t(samples);
  for (int i = 0; i < samples; ++i) t[static_cast<size_t>(i)] = i * 100 * kMs;
  std::vector<std::vector<double>> v(series, std::vector<double>(samples));
  for (auto& s : v)
    for (double& x : s) x = 50 + 10 * n01(rng);
  for (auto _ : state) {
    WindowFeatureExtractor ex(WindowSpec{}, 0, 3000 * kMs);
    for (int s = 0; s < series; ++s) ex.add_series(static_cast<uint32_t>(s + 1), stackscope::SeriesKind::gauge,
                                                   stackscope::SeriesCategory::dynamic);
    for (int s = 0; s < series; ++s) ex.add_samples(static_cast<uint32_t>(s + 1), t, v[static_cast<size_t>(s)]);
    ex.finish();
    benchmark::DoNotOptimize(ex.features().data());
  }
  state.counters["series"] = series;
}
BENCHMARK(BM_WindowFeatures700x30)->Unit(benchmark::kMicrosecond);

// Only the feature arithmetic (no extractor bookkeeping): 700 calls of dynamic_window_features.
void BM_DynamicFeaturesOnly700x30(benchmark::State& state) {
  std::mt19937 rng(2);
  std::normal_distribution<double> n01;
  std::vector<int64_t> t(30);
  for (int i = 0; i < 30; ++i) t[static_cast<size_t>(i)] = i * 100 * kMs;
  std::vector<double> v(700 * 30);
  for (double& x : v) x = n01(rng);
  std::array<double, kDynamicFeatureCount> out;
  for (auto _ : state)
    for (int s = 0; s < 700; ++s) {
      dynamic_window_features(std::span<const double>(v.data() + s * 30, 30), t, out);
      benchmark::DoNotOptimize(out.data());
    }
}
BENCHMARK(BM_DynamicFeaturesOnly700x30)->Unit(benchmark::kMicrosecond);

// A run's windows x features (rows = windows, e.g. 1 800 windows of a 30-minute run; 150 features).
Eigen::MatrixXd features(int rows, int cols) {
  std::mt19937 rng(3);
  std::normal_distribution<double> n01;
  Eigen::MatrixXd x(rows, cols);
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < cols; ++j) x(i, j) = n01(rng);
  return x;
}

template <typename D>
void detector_bench(benchmark::State& state) {
  const Eigen::MatrixXd x = features(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)));
  for (auto _ : state) {
    D d;
    d.fit(x);
    auto s = d.score(x);
    benchmark::DoNotOptimize(s.data());
  }
}
void BM_ZScoreFitScore(benchmark::State& s) { detector_bench<ZScore>(s); }
void BM_PcaMahalanobisFitScore(benchmark::State& s) { detector_bench<PcaMahalanobis>(s); }
void BM_IsolationForestFitScore(benchmark::State& s) { detector_bench<IsolationForest>(s); }
void BM_RevealEnsembleFitEvaluate(benchmark::State& state) {
  const Eigen::MatrixXd x = features(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)));
  for (auto _ : state) {
    RevealEnsemble e;
    e.fit(x);
    auto r = e.evaluate(x);
    benchmark::DoNotOptimize(r.score.data());
  }
}
// Reveal's figures are per window: the cost of scoring one new window against a fitted baseline.
template <typename D>
void per_window_bench(benchmark::State& state) {
  const Eigen::MatrixXd x = features(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)));
  D d;
  d.fit(x);
  const Eigen::MatrixXd one = x.bottomRows(1);
  for (auto _ : state) {
    auto s = d.score(one);
    benchmark::DoNotOptimize(s.data());
  }
}
void BM_ZScoreOneWindow(benchmark::State& s) { per_window_bench<ZScore>(s); }
void BM_PcaMahalanobisOneWindow(benchmark::State& s) { per_window_bench<PcaMahalanobis>(s); }
void BM_IsolationForestOneWindow(benchmark::State& s) { per_window_bench<IsolationForest>(s); }
}  // namespace

BENCHMARK(BM_ZScoreOneWindow)->Args({1800, 150})->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_PcaMahalanobisOneWindow)->Args({1800, 150})->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_IsolationForestOneWindow)->Args({1800, 150})->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_ZScoreFitScore)->Args({300, 150})->Args({1800, 150})->Unit(benchmark::kMillisecond);
BENCHMARK(BM_PcaMahalanobisFitScore)->Args({300, 150})->Args({1800, 150})->Unit(benchmark::kMillisecond);
BENCHMARK(BM_IsolationForestFitScore)->Args({300, 150})->Args({1800, 150})->Unit(benchmark::kMillisecond);
BENCHMARK(BM_RevealEnsembleFitEvaluate)->Args({300, 150})->Args({1800, 150})->Unit(benchmark::kMillisecond);
BENCHMARK_MAIN();

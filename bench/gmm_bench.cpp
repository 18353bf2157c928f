// Engine speed: GMM EM iterations and scoring, Isolation Forest scoring.
//   gmm_bench                      Google Benchmark run of the engine alone
//   gmm_bench --peer DIR           writes the data sets and initial GMM parameters to DIR (raw float64,
//                                  row-major) and the engine's timings to DIR/engine.json; bench/sklearn_peer.py
//                                  then times scikit-learn on the SAME files (bench/run_engine_vs_sklearn.sh).
#include <benchmark/benchmark.h>
#include <time.h>

#include <Eigen/Dense>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "analyze/detectors/em_fitter.h"
#include "analyze/detectors/gmm_detector.h"
#include "analyze/detectors/gmm_kernels.h"
#include "analyze/detectors/isolation_forest.h"

using namespace stackscope::analyze;

namespace {

// A K-component mixture in d dimensions with random means and correlated covariances.
Eigen::MatrixXd mixture_data(Eigen::Index n, Eigen::Index d, int k, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> g(0, 1);
  std::vector<Eigen::MatrixXd> chol(static_cast<size_t>(k));
  Eigen::MatrixXd means(k, d);
  for (int c = 0; c < k; ++c) {
    Eigen::MatrixXd a(d, d);
    for (Eigen::Index i = 0; i < a.size(); ++i) a(i) = g(rng);
    Eigen::MatrixXd cov = a * a.transpose() / static_cast<double>(d) + 0.5 * Eigen::MatrixXd::Identity(d, d);
    chol[static_cast<size_t>(c)] = cov.llt().matrixL();
    for (Eigen::Index j = 0; j < d; ++j) means(c, j) = 4.0 * g(rng);
  }
  Eigen::MatrixXd x(n, d);
  Eigen::VectorXd z(d);
  for (Eigen::Index i = 0; i < n; ++i) {
    const int c = static_cast<int>(i % k);
    for (Eigen::Index j = 0; j < d; ++j) z(j) = g(rng);
    x.row(i) = means.row(c) + (chol[static_cast<size_t>(c)] * z).transpose();
  }
  return x;
}

double thread_cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

struct Timing {
  double wall = 1e300, cpu = 1e300;  // best of the repetitions
};

template <class F>
Timing best_of(int reps, F&& f) {
  Timing t;
  for (int r = 0; r < reps; ++r) {
    const auto w0 = std::chrono::steady_clock::now();
    const double c0 = thread_cpu_seconds();
    f();
    t.cpu = std::min(t.cpu, thread_cpu_seconds() - c0);
    t.wall = std::min(t.wall, std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count());
  }
  return t;
}

void write_raw(const std::string& path, const Eigen::MatrixXd& x) {
  const Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> r = x;
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(r.data()),
                                              static_cast<std::streamsize>(r.size() * sizeof(double)));
}

// Data, initial parameters and the engine's timings for the comparison with scikit-learn.
int run_peer(const std::string& dir) {
  nlohmann::json out;
  out["kernel"] = kernels::active_kernel();
  constexpr int kK = 4, kIters = 30;
  const Eigen::Index n_fit = 100'000, d_fit = 8;
  const Eigen::MatrixXd xf = mixture_data(n_fit, d_fit, kK, 1);
  write_raw(dir + "/fit.f64", xf);
  out["fit"] = {{"file", "fit.f64"}, {"n", n_fit}, {"d", d_fit}, {"k", kK}, {"iterations", kIters}, {"runs", {}}};
  for (CovarianceType cov : {CovarianceType::full, CovarianceType::diagonal}) {
    EmFitter fitter({.components = kK, .covariance = cov, .max_iterations = kIters, .tolerance = 0.0, .seed = 7});
    const GaussianMixture init = fitter.initial_model(xf, 7);
    const std::string tag = std::string(covariance_type_name(cov));
    Eigen::MatrixXd prec(kK, cov == CovarianceType::full ? d_fit * d_fit : d_fit);
    for (int c = 0; c < kK; ++c) {
      if (cov == CovarianceType::full) {
        const Eigen::MatrixXd p = init.covariances()[static_cast<size_t>(c)].inverse();
        prec.row(c) = Eigen::Map<const Eigen::RowVectorXd>(p.data(), p.size());
      } else {
        prec.row(c) = init.variances(c).cwiseInverse().transpose();  // a diagonal model holds d x 1 variances
      }
    }
    write_raw(dir + "/init_" + tag + "_weights.f64", init.weights());
    write_raw(dir + "/init_" + tag + "_means.f64", init.means());
    write_raw(dir + "/init_" + tag + "_precisions.f64", prec);
    EmResult res;
    const Timing t = best_of(3, [&] { res = fitter.run(xf, init); });
    out["fit"]["runs"][tag] = {{"iterations", res.iterations}, {"mean_log_likelihood", res.mean_log_likelihood},
                               {"cpu_s", t.cpu}, {"wall_s", t.wall}, {"cpu_s_per_iteration", t.cpu / res.iterations}};
  }
  // Scoring: the detector's score (density under the most likely component) of 1M points, d = 4, 8, 16.
  const Eigen::Index n_score = 1'000'000;
  for (Eigen::Index d : {4, 8, 16}) {
    const Eigen::MatrixXd xs = mixture_data(n_score, d, kK, 2 + static_cast<unsigned>(d));
    const std::string file = "score_d" + std::to_string(d) + ".f64";
    write_raw(dir + "/" + file, xs);
    GmmDetector det({.components = kK, .restarts = 1, .max_iterations = 20});
    det.fit(xs.topRows(20'000));
    Eigen::VectorXd s;
    const Timing t = best_of(3, [&] { s = det.score(xs); });
    out["score"]["d" + std::to_string(d)] = {{"file", file}, {"n", n_score}, {"d", d}, {"k", kK},
                                             {"cpu_s", t.cpu}, {"wall_s", t.wall},
                                             {"points_per_s_cpu", static_cast<double>(n_score) / t.cpu},
                                             {"finite", s.allFinite()}};
  }
  // Isolation Forest: fit and score the fit data (100 trees, 256 samples per tree).
  {
    IsolationForest f({.trees = 100, .max_samples = 256, .seed = 0});
    const Timing tf = best_of(3, [&] { f.fit(xf); });
    Eigen::VectorXd s;
    const Timing ts = best_of(3, [&] { s = f.score(xf); });
    out["iforest"] = {{"file", "fit.f64"}, {"n", n_fit}, {"d", d_fit}, {"trees", 100}, {"max_samples", 256},
                      {"fit_cpu_s", tf.cpu}, {"score_cpu_s", ts.cpu}, {"score_wall_s", ts.wall},
                      {"points_per_s_cpu", static_cast<double>(n_fit) / ts.cpu}};
  }
  std::ofstream(dir + "/engine.json") << out.dump(2) << "\n";
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

void BM_GmmScore(benchmark::State& state) {
  const Eigen::Index d = state.range(0);
  const Eigen::MatrixXd x = mixture_data(200'000, d, 4, 3);
  GmmDetector det({.components = 4, .restarts = 1, .max_iterations = 20});
  det.fit(x.topRows(20'000));
  for (auto _ : state) benchmark::DoNotOptimize(det.score(x));
  state.SetItemsProcessed(state.iterations() * x.rows());
  state.SetLabel(kernels::active_kernel());
}
BENCHMARK(BM_GmmScore)->Arg(4)->Arg(8)->Arg(16)->Unit(benchmark::kMillisecond);

void BM_EmIteration(benchmark::State& state) {
  const Eigen::Index d = state.range(0);
  const Eigen::MatrixXd x = mixture_data(100'000, d, 4, 4);
  EmFitter fitter({.components = 4, .max_iterations = 1, .tolerance = 0.0});
  const GaussianMixture init = fitter.initial_model(x, 1);
  for (auto _ : state) benchmark::DoNotOptimize(fitter.run(x, init));
  state.SetItemsProcessed(state.iterations() * x.rows());
}
BENCHMARK(BM_EmIteration)->Arg(4)->Arg(8)->Arg(16)->Unit(benchmark::kMillisecond);

void BM_IsolationForestScore(benchmark::State& state) {
  const Eigen::MatrixXd x = mixture_data(100'000, 8, 4, 5);
  IsolationForest f({.trees = 100, .max_samples = 256, .seed = 0});
  f.fit(x);
  for (auto _ : state) benchmark::DoNotOptimize(f.score(x));
  state.SetItemsProcessed(state.iterations() * x.rows());
}
BENCHMARK(BM_IsolationForestScore)->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "--peer") == 0) return run_peer(argv[2]);
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

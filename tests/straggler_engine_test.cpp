// KAIR straggler localisation: the statistics (K-S, z-scores), blame on hand-built dependency graphs,
// step detection, the adaptive tracing policy, and generator + detector accuracy on a small batch.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>

#include "analyze/stragglers/adaptive_tracing.h"
#include "analyze/stragglers/straggler.h"
#include "analyze/stragglers/straggler_eval.h"
#include "analyze/stragglers/straggler_sim.h"

using namespace stackscope;
using namespace stackscope::analyze;

TEST(StragglerKs, TwoSampleStatisticMatchesHandComputedValues) {
  EXPECT_DOUBLE_EQ(ks_statistic({1, 2, 3, 4}, {4, 3, 2, 1}), 0.0);
  EXPECT_DOUBLE_EQ(ks_statistic({1, 2, 3}, {4, 5, 6}), 1.0);
  EXPECT_DOUBLE_EQ(ks_statistic({1, 2, 3, 4}, {3, 4, 5, 6}), 0.5);
  // Unequal sizes: F_a(2) = 1, F_b(2) = 1/4.
  EXPECT_DOUBLE_EQ(ks_statistic({1, 2}, {2, 3, 4, 5}), 0.75);
  EXPECT_DOUBLE_EQ(ks_statistic({}, {1.0}), 0.0);
}

TEST(StragglerKs, AbnormalityIsMeanPairwiseDistanceAndFindsTheShiftedWorker) {
  std::mt19937_64 rng(3);
  std::normal_distribution<double> n(0, 1);
  std::vector<std::vector<double>> samples(6);
  for (int w = 0; w < 6; ++w)
    for (int i = 0; i < 40; ++i) samples[w].push_back(n(rng) + (w == 4 ? 1.5 : 0.0));
  Eigen::MatrixXf d;
  const auto s = ks_abnormality(samples, {}, KsOptions{}, &d);
  // 240 pooled values fit the grid: D is exact, and S_A is its row mean.
  for (int a = 0; a < 6; ++a) {
    double sum = 0;
    for (int b = 0; b < 6; ++b) {
      if (a == b) continue;
      EXPECT_NEAR(d(a, b), ks_statistic(samples[a], samples[b]), 1e-6);
      sum += d(a, b);
    }
    EXPECT_NEAR(s[a], sum / 5, 1e-6);
  }
  EXPECT_EQ(std::max_element(s.begin(), s.end()) - s.begin(), 4);
}

TEST(StragglerKs, PeerGroupsAreComparedOnlyWithinThemselves) {
  // Two groups with different distributions but no outlier inside either: nobody stands out.
  std::vector<std::vector<double>> samples(8);
  for (int w = 0; w < 8; ++w)
    for (int i = 0; i < 30; ++i) samples[w].push_back(i + (w < 4 ? 0 : 1000) + 0.01 * w);
  const auto grouped = ks_abnormality(samples, {0, 0, 0, 0, 1, 1, 1, 1}, KsOptions{});
  for (double v : grouped) EXPECT_LT(v, 0.1);
  const auto mixed = ks_abnormality(samples, {}, KsOptions{});
  for (double v : mixed) EXPECT_GT(v, 0.5);
}

namespace {

// n workers, one step, ops given per worker as (name, kind, start ms, duration ms); collectives get comm 1
// and the same sequence number on every worker.
TimelineSet hand_built(int n, const std::function<std::vector<std::tuple<std::string, OpKind, double, double>>(int)>& ops_of) {
  TimelineSet set;
  const uint32_t comm = set.intern("comm");
  for (int w = 0; w < n; ++w) {
    WorkerTimeline t;
    t.worker = "w" + std::to_string(w);
    int64_t seq = 0;
    for (auto& [name, kind, start, dur] : ops_of(w)) {
      TimelineOp op;
      op.name = set.intern(name);
      op.kind = kind;
      op.start_ns = static_cast<int64_t>(start * 1e6);
      op.duration_ns = static_cast<int64_t>(dur * 1e6);
      op.step = 0;
      if (kind == OpKind::collective) {
        op.comm = comm;
        op.collective_seq = seq++;
      }
      t.ops.push_back(op);
    }
    set.workers.push_back(std::move(t));
  }
  return set;
}

std::vector<RootCause> blame(const TimelineSet& set) {
  const std::vector<int64_t> zero(set.workers.size(), 0);
  const auto s2 = stage2_outliers(set, zero, {}, Stage2Options{});
  return stage3_blame(set, zero, s2, Stage3Options{});
}

}  // namespace

TEST(StragglerBlame, SlowComputeOperatorIsTheCulpritNotTheCollectiveThatWaited) {
  // Worker 2's B runs 25 ms instead of 10; everybody's all-reduce ends when it arrives.
  auto set = hand_built(6, [](int w) {
    const double b = w == 2 ? 25 : 10 + 0.01 * w;
    const double ar_start = 10 + b + 0.02;
    const double ar_end = 10 + 25 + 0.02 + 10;
    return std::vector<std::tuple<std::string, OpKind, double, double>>{
        {"A", OpKind::compute, 0, 10}, {"B", OpKind::compute, 10.01, b},
        {"allreduce", OpKind::collective, ar_start, ar_end - ar_start}, {"C", OpKind::compute, ar_end + 0.01, 5}};
  });
  const auto causes = blame(set);
  ASSERT_FALSE(causes.empty());
  EXPECT_EQ(causes[0].kind, CauseKind::compute_operator);
  EXPECT_EQ(causes[0].worker, 2);
  EXPECT_EQ(causes[0].operation, "B");
  EXPECT_NEAR(causes[0].excess_ns, 15e6, 0.1e6);
}

TEST(StragglerBlame, LateStartAfterAnOnTimePredecessorBlamesTheEdge) {
  // Worker 3's B starts 8 ms after A ended (A on time, B of normal length): the edge A -> B.
  auto set = hand_built(6, [](int w) {
    const double b_start = w == 3 ? 18.01 : 10.01;
    const double ar_start = b_start + 10 + 0.01;
    const double ar_end = 18.01 + 10 + 0.01 + 5;
    return std::vector<std::tuple<std::string, OpKind, double, double>>{
        {"A", OpKind::compute, 0, 10}, {"B", OpKind::compute, b_start, 10},
        {"allreduce", OpKind::collective, ar_start, ar_end - ar_start}, {"C", OpKind::compute, ar_end + 0.01, 5}};
  });
  const auto causes = blame(set);
  ASSERT_FALSE(causes.empty());
  EXPECT_EQ(causes[0].kind, CauseKind::dependency_edge);
  EXPECT_EQ(causes[0].worker, 3);
  EXPECT_EQ(causes[0].operation, "A -> B");
}

TEST(StragglerBlame, AnOperationNoPeerRunsIsAComputeCulpritNotAnEdge) {
  // Worker 3 runs an extra 8 ms kernel ("spin", as an injected GPU delay) between A and B; no peer has it.
  auto set = hand_built(6, [](int w) {
    std::vector<std::tuple<std::string, OpKind, double, double>> ops{{"A", OpKind::compute, 0, 10}};
    const double b_start = w == 3 ? 18.02 : 10.01;
    if (w == 3) ops.emplace_back("spin", OpKind::compute, 10.01, 8);
    const double ar_end = 18.02 + 10 + 0.01 + 5;
    ops.emplace_back("B", OpKind::compute, b_start, 10);
    ops.emplace_back("allreduce", OpKind::collective, b_start + 10.01, ar_end - (b_start + 10.01));
    ops.emplace_back("C", OpKind::compute, ar_end + 0.01, 5);
    return ops;
  });
  const auto causes = blame(set);
  ASSERT_FALSE(causes.empty());
  EXPECT_EQ(causes[0].kind, CauseKind::compute_operator);
  EXPECT_EQ(causes[0].worker, 3);
  EXPECT_EQ(causes[0].operation, "spin");
}

TEST(StragglerBlame, CollectiveThatEndsLateWithEveryoneOnTimeBlamesTheLink) {
  // All arrive on time; worker 1's all-reduce completes 6 ms after everybody else's (its link), so its C is late.
  auto set = hand_built(6, [](int w) {
    const double ar_end = 30 + (w == 1 ? 6 : 0);
    return std::vector<std::tuple<std::string, OpKind, double, double>>{
        {"A", OpKind::compute, 0, 10}, {"B", OpKind::compute, 10.01, 10},
        {"allreduce", OpKind::collective, 20.02, ar_end - 20.02}, {"C", OpKind::compute, ar_end + 0.01, 5}};
  });
  const auto causes = blame(set);
  ASSERT_FALSE(causes.empty());
  EXPECT_EQ(causes[0].kind, CauseKind::communication_link);
  EXPECT_EQ(causes[0].worker, 1);
  EXPECT_EQ(causes[0].operation, "allreduce");
  EXPECT_TRUE(cause_is_edge(causes[0].kind));
}

TEST(StragglerZScore, RobustFlagsAtThreeSigmaAndClassicalCannotWithFewWorkers) {
  // 8 workers; worker 5's op lasts far longer. Durations of the others spread a little.
  auto set = hand_built(8, [](int w) {
    const double d = w == 5 ? 20 : 10 + 0.1 * w;
    return std::vector<std::tuple<std::string, OpKind, double, double>>{{"A", OpKind::compute, 0, d}};
  });
  const std::vector<int64_t> zero(8, 0);
  const auto robust = stage2_outliers(set, zero, {}, Stage2Options{});
  ASSERT_EQ(robust.flagged.size(), 1u);
  EXPECT_EQ(robust.flagged[0].worker, 5);
  EXPECT_GT(robust.flagged[0].a, 3);
  Stage2Options classical;
  classical.robust = false;
  const auto mean_sd = stage2_outliers(set, zero, {}, classical);
  // One outlier among 8 values (population s.d.): |z| <= sqrt(7) = 2.65 whatever its size.
  EXPECT_TRUE(mean_sd.flagged.empty());
  EXPECT_LE(std::abs(mean_sd.stats[5][0].z_duration), std::sqrt(7.0) + 1e-6);
}

TEST(StragglerSteps, CollectivePeriodAndClockSkewAreRecovered) {
  SimOptions o;
  o.workers = 8;
  o.steps = 6;
  o.max_clock_skew_ns = 30'000'000;
  auto set = simulate_training(o);
  const auto truth = set;  // skews are in the timestamps only
  auto det = assign_steps(set);
  EXPECT_EQ(det.source, StepSource::collectives);
  EXPECT_EQ(det.period, 4);  // 3 gradient buckets + the clipping all-reduce
  EXPECT_GE(det.steps, 6);
  // Offsets: workers' all-reduce ends agree after correction.
  const auto off = estimate_clock_offsets(set);
  std::vector<double> ends;
  for (int w = 0; w < 8; ++w)
    for (auto& op : set.workers[w].ops)
      if (op.kind == OpKind::collective && op.collective_seq == 5) ends.push_back(double(op.end_ns() - off[w]));
  ASSERT_EQ(ends.size(), 8u);
  EXPECT_LT(*std::max_element(ends.begin(), ends.end()) - *std::min_element(ends.begin(), ends.end()), 100'000.0);
  EXPECT_EQ(sequence_period({1, 2, 3, 1, 2, 3, 1, 2, 3}, 4), 3);
  EXPECT_EQ(sequence_period({1, 2, 3, 4, 5, 6}, 3), 0);
}

// Corrected end times of every communication instance with more than one participant: their largest spread.
static double worst_end_spread(const TimelineSet& set, const std::vector<int64_t>& off) {
  std::map<std::pair<uint32_t, int64_t>, std::vector<double>> ends;
  for (size_t w = 0; w < set.workers.size(); ++w)
    for (auto& op : set.workers[w].ops)
      if (is_communication(op.kind) && op.collective_seq >= 0)
        ends[{op.comm, op.collective_seq}].push_back(double(op.end_ns() - off[w]));
  double worst = 0;
  for (auto& [key, e] : ends)
    if (e.size() > 1) worst = std::max(worst, *std::max_element(e.begin(), e.end()) - *std::min_element(e.begin(), e.end()));
  return worst;
}

TEST(StragglerSteps, PipelineClockSkewIsRecoveredAcrossReplicasAndStages) {
  // Pipeline replicas meet their stage peers only in the data-parallel all-reduce, and their neighbours in
  // point-to-point transfers: the offsets must satisfy both (a quantile over the mixed residuals stalled
  // with whole replicas ~10 ms off).
  for (uint64_t seed : {3, 17, 29, 41}) {
    SimOptions o;
    o.parallelism = SimOptions::Parallelism::pipeline;
    o.workers = 64;
    o.steps = 8;
    o.seed = seed;
    auto set = simulate_training(o);
    for (auto& w : set.workers)
      std::stable_sort(w.ops.begin(), w.ops.end(), [](auto& a, auto& b) { return a.start_ns < b.start_ns; });
    assign_steps(set);
    EXPECT_LT(worst_end_spread(set, estimate_clock_offsets(set)), 200'000.0) << "seed " << seed;
  }
}

TEST(StragglerSteps, IntermittentStallsDoNotDoubleOneWorkersStep) {
  // Stalls in half of the steps can make the longest pause recur every two steps on that worker's timeline;
  // its peers' period wins, so its step numbers stay aligned with theirs.
  for (uint64_t seed : {1, 2, 3, 4, 5, 6, 7, 8}) {
    SimOptions o;
    o.parallelism = SimOptions::Parallelism::pipeline;
    o.workers = 16;
    o.steps = 8;
    o.seed = seed;
    o.faults = {{SimFaultKind::intermittent_stall, 9, 6, 3.0, 0, 0.5}};
    auto set = simulate_training(o);
    for (auto& w : set.workers)
      std::stable_sort(w.ops.begin(), w.ops.end(), [](auto& a, auto& b) { return a.start_ns < b.start_ns; });
    const auto det = assign_steps(set);
    EXPECT_EQ(det.source, StepSource::collectives);
    // The n-th data-parallel all-reduce closes step n on every worker.
    for (size_t w = 0; w < set.workers.size(); ++w)
      for (auto& op : set.workers[w].ops) {
        if (op.kind == OpKind::collective) {
          EXPECT_EQ(op.step, op.collective_seq) << "seed " << seed << " worker " << w;
        }
      }
  }
}

TEST(StragglerEndToEnd, SimulatedSlowOperatorIsNamedWithItsClass) {
  SimOptions o;
  o.workers = 16;
  o.steps = 8;
  o.seed = 11;
  o.faults = {{SimFaultKind::slow_compute, 9, 3, 2.0, 0, 0}};
  const auto r = analyze_stragglers(simulate_training(o));
  ASSERT_FALSE(r.stragglers.empty());
  EXPECT_EQ(r.stragglers.front(), 9);
  EXPECT_EQ(r.stage1.ranking.front(), 9);
  ASSERT_FALSE(r.root_causes.empty());
  EXPECT_EQ(r.root_causes[0].kind, CauseKind::compute_operator);
  EXPECT_EQ(r.root_causes[0].operation, "forward.layer3");
  for (double s : r.stage1.score) EXPECT_TRUE(std::isfinite(s));
}

TEST(StragglerEndToEnd, GeneratorAndDetectorAccuracyOnASmallBatch) {
  StragglerEvalOptions o;
  o.trials = 24;
  o.worker_counts = {8, 16, 32};
  o.seed = 5;
  const auto r = evaluate_straggler_detection(o);
  EXPECT_EQ(r.trials, 24);
  EXPECT_GE(r.top1_accuracy(), 0.95);  // 24/24 here; the 300-trial figures are in docs/benchmarks/stragglers.md
  EXPECT_GE(r.class_accuracy(), 0.9);
  // The breakdowns partition the trials.
  for (const auto& rows : {r.by_scenario(), r.by_workers()}) {
    int trials = 0, top1 = 0;
    for (auto& row : rows) {
      trials += row.trials;
      top1 += row.top1_correct;
    }
    EXPECT_EQ(trials, r.trials);
    EXPECT_EQ(top1, r.top1_correct);
  }
  EXPECT_EQ(r.by_workers().size(), 3u);
}

TEST(StragglerEndToEnd, OneStepStallBeatsAPileOfOrdinaryHiccupsOnABigCluster) {
  // 256 workers with frequent background hiccups (1.2-1.5x): some workers collect several on one operator.
  // Worker 77's backward operator stalls 3x in exactly one step (probability 0: the generator forces one
  // stall). The stall added more delay than any hiccup pile and is the verdict.
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    SimOptions o;
    o.workers = 256;
    o.steps = 8;
    o.hiccup_rate = 0.03;
    o.seed = seed;
    o.faults = {{SimFaultKind::intermittent_stall, 77, 8, 3.0, 0, 0.0}};
    const auto r = analyze_stragglers(simulate_training(o));
    ASSERT_FALSE(r.root_causes.empty());
    EXPECT_EQ(r.stragglers.front(), 77) << "seed " << seed;
    EXPECT_EQ(r.root_causes[0].kind, CauseKind::compute_operator) << "seed " << seed;
    EXPECT_EQ(r.root_causes[0].operation, "backward.layer3") << "seed " << seed;  // slot 8 of 12
  }
}

TEST(StragglerAdaptiveTracing, TurnsOnForSuspectsPlusPeersAndOffAfterCalmSteps) {
  AdaptiveTracingOptions o;
  o.random_peers = 3;
  o.calm_steps = 3;
  o.min_detailed_steps = 2;
  AdaptiveTracingPolicy policy(o);
  std::vector<double> calm(32, 100.0);
  for (int w = 0; w < 32; ++w) calm[w] += 0.5 * (w % 5);
  for (int s = 0; s < 5; ++s) EXPECT_FALSE(policy.observe_step(calm).detailed);
  auto slow = calm;
  slow[7] = 250;
  slow[20] = 240;
  const auto on = policy.observe_step(slow);
  EXPECT_TRUE(on.detailed);
  EXPECT_TRUE(on.changed);
  ASSERT_EQ(on.suspects.size(), 2u);
  EXPECT_EQ(on.suspects[0], 7);
  EXPECT_EQ(on.suspects[1], 20);
  EXPECT_EQ(on.traced.size(), 5u);  // 2 suspects + 3 random peers
  EXPECT_TRUE(std::is_sorted(on.traced.begin(), on.traced.end()));
  // Stays on through the calm steps it needs, then turns off.
  int off_at = -1;
  for (int s = 0; s < 10 && off_at < 0; ++s) {
    const auto d = policy.observe_step(calm);
    if (!d.detailed) {
      off_at = s;
      EXPECT_TRUE(d.changed);
      EXPECT_TRUE(d.traced.empty());
    }
  }
  EXPECT_EQ(off_at, 2);  // the third calm step (calm_steps = 3)
  // NaN and empty input never switch it on.
  std::vector<double> bad(8, std::nan(""));
  EXPECT_FALSE(policy.observe_step(bad).detailed);
}

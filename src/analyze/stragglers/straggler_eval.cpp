#include "analyze/stragglers/straggler_eval.h"

#include <algorithm>
#include <map>
#include <random>

namespace stackscope::analyze {

SimOptions random_trial(uint64_t seed, int workers, double pipeline_share, double multi_share, int steps) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  SimOptions o;
  o.seed = seed * 7919 + 1;
  o.steps = steps;
  o.workers = workers;
  // Pipeline trials need 4 replicas per stage at least: with 2, the median of a stage's peers cannot say
  // which of the two is abnormal.
  if (u(rng) < pipeline_share && workers >= 16) {
    o.parallelism = SimOptions::Parallelism::pipeline;
    o.stages = 4;
    o.workers = workers / 4 * 4;
  }
  const bool pipeline = o.parallelism == SimOptions::Parallelism::pipeline;
  const int slots = pipeline ? 2 * o.micro_batches : o.compute_ops;  // compute operator slots per step
  const int n_faults = u(rng) < multi_share ? 2 + static_cast<int>(u(rng) * 2) : 1;
  std::vector<int> used;
  for (int k = 0; k < n_faults; ++k) {
    SimFault f;
    do f.worker = static_cast<int>(u(rng) * o.workers);
    while (std::find(used.begin(), used.end(), f.worker) != used.end());
    used.push_back(f.worker);
    f.kind = static_cast<SimFaultKind>(static_cast<int>(u(rng) * 4));
    f.op = static_cast<int>(u(rng) * slots);
    switch (f.kind) {
      case SimFaultKind::slow_compute: f.factor = 1.5 + 1.5 * u(rng); break;
      case SimFaultKind::intermittent_stall:
        f.factor = 2.5 + 2 * u(rng);
        f.probability = 0.25;
        break;
      case SimFaultKind::slow_link: f.delay_ns = static_cast<int64_t>(o.transfer_ns * (0.7 + 1.3 * u(rng))); break;
      case SimFaultKind::late_start: f.delay_ns = static_cast<int64_t>(o.op_ns * (1.0 + 2 * u(rng))); break;
    }
    o.faults.push_back(f);
  }
  return o;
}

StragglerEvalTrial score_trial(const SimOptions& sim, const StragglerOptions& options) {
  StragglerEvalTrial t;
  t.workers = sim.workers;
  t.pipeline = sim.parallelism == SimOptions::Parallelism::pipeline;
  t.faults = sim.faults;
  const auto report = analyze_stragglers(simulate_training(sim), options);
  // A slow link between pipeline stages delays both of its ends alike: either end names it.
  auto names_fault = [&](int worker, const SimFault& f) {
    if (worker == f.worker) return true;
    if (!t.pipeline || f.kind != SimFaultKind::slow_link) return false;
    return worker / sim.stages == f.worker / sim.stages && std::abs(worker - f.worker) == 1;
  };
  t.top_worker = report.stragglers.empty() ? -1 : report.stragglers.front();
  const int stage1_top = report.stage1.ranking.empty() ? -1 : report.stage1.ranking.front();
  for (auto& f : sim.faults) {
    t.top1_correct |= names_fault(t.top_worker, f);
    t.stage1_top1_correct |= names_fault(stage1_top, f);
  }
  if (!report.root_causes.empty()) {
    const auto& rc = report.root_causes.front();
    t.top_cause = std::string(cause_kind_name(rc.kind)) + " " + report.workers[rc.worker] + " " + rc.operation;
    for (auto& f : sim.faults)
      t.class_correct |= names_fault(rc.worker, f) && cause_is_edge(rc.kind) == sim_fault_is_edge(f.kind);
  }
  return t;
}

namespace {

template <typename Key, typename KeyOf, typename Label>
std::vector<StragglerEvalRow> rows_by(const std::vector<StragglerEvalTrial>& trials, KeyOf key_of, Label label) {
  std::map<Key, StragglerEvalRow> rows;
  for (auto& t : trials) {
    auto& row = rows[key_of(t)];
    row.trials++;
    row.top1_correct += t.top1_correct;
    row.class_correct += t.class_correct;
    row.stage1_top1_correct += t.stage1_top1_correct;
  }
  std::vector<StragglerEvalRow> out;
  for (auto& [key, row] : rows) {
    row.label = label(key);
    out.push_back(row);
  }
  return out;
}

}  // namespace

std::vector<StragglerEvalRow> StragglerEvalResult::by_scenario() const {
  return rows_by<std::string>(details, [](auto& t) { return t.scenario(); }, [](auto& k) { return k; });
}

std::vector<StragglerEvalRow> StragglerEvalResult::by_workers() const {
  return rows_by<int>(details, [](auto& t) { return t.workers; }, [](int k) { return std::to_string(k); });
}

StragglerEvalResult evaluate_straggler_detection(const StragglerEvalOptions& options) {
  StragglerEvalResult r;
  for (int i = 0; i < options.trials; ++i) {
    const int workers = options.worker_counts[i % options.worker_counts.size()];
    auto sim = random_trial(options.seed * 1000003 + i, workers, options.pipeline_share, options.multi_share,
                            options.steps);
    auto t = score_trial(sim);
    r.trials++;
    r.top1_correct += t.top1_correct;
    r.class_correct += t.class_correct;
    r.stage1_top1_correct += t.stage1_top1_correct;
    r.details.push_back(std::move(t));
  }
  return r;
}

}  // namespace stackscope::analyze

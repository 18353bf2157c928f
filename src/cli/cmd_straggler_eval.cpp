// stackscope straggler-eval : accuracy of straggler localisation on simulated multi-worker traces with
// injected stragglers (slow compute operator, slow link, late start, intermittent stalls, several at once).
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "analyze/straggler_eval.h"
#include "cli/registry.h"

namespace stackscope::cli {
namespace {

RegisterCommand reg("straggler-eval", 36, [](CLI::App& app, int& exit_code) {
  auto opt = std::make_shared<analyze::StragglerEvalOptions>();
  auto json = std::make_shared<bool>(false);
  auto verbose = std::make_shared<bool>(false);
  auto* cmd = app.add_subcommand("straggler-eval", "Accuracy of straggler localisation on simulated traces (truth known)");
  cmd->add_option("--trials", opt->trials, "Random trials");
  cmd->add_option("--workers", opt->worker_counts, "Worker counts, cycled through (e.g. 8,64,512,4096)")->delimiter(',');
  cmd->add_option("--steps", opt->steps, "Steps per trial");
  cmd->add_option("--seed", opt->seed, "Random seed");
  cmd->add_option("--pipeline-share", opt->pipeline_share, "Fraction of pipeline-parallel trials");
  cmd->add_option("--multi-share", opt->multi_share, "Fraction of trials with 2-3 stragglers");
  cmd->add_flag("--json", *json, "Print JSON");
  cmd->add_flag("-v,--verbose", *verbose, "List the trials that failed");
  cmd->callback([opt, json, verbose, &exit_code] {
    if (opt->trials < 1 || opt->worker_counts.empty()) throw std::invalid_argument("--trials >= 1 and --workers needed");
    for (int w : opt->worker_counts)
      if (w < 4) throw std::invalid_argument("--workers: every count must be at least 4");
    const auto r = analyze::evaluate_straggler_detection(*opt);
    if (*json) {
      std::cout << nlohmann::json{{"trials", r.trials},
                                  {"top1_accuracy", r.top1_accuracy()},
                                  {"stage1_top1_accuracy", r.stage1_top1_accuracy()},
                                  {"class_accuracy", r.class_accuracy()}}
                       .dump(2)
                << "\n";
    } else {
      std::printf("trials %d  top-1 straggler %.3f  (stage 1 alone %.3f)  root-cause class %.3f\n", r.trials,
                  r.top1_accuracy(), r.stage1_top1_accuracy(), r.class_accuracy());
    }
    if (*verbose)
      for (auto& t : r.details)
        if (!t.top1_correct || !t.class_correct) {
          std::printf("  failed: %d workers%s, top %d, cause [%s], injected:", t.workers, t.pipeline ? " (pipeline)" : "",
                      t.top_worker, t.top_cause.c_str());
          for (auto& f : t.faults) std::printf(" %s@%d", analyze::sim_fault_name(f.kind), f.worker);
          std::printf("\n");
        }
    exit_code = 0;
  });
});

}  // namespace
}  // namespace stackscope::cli

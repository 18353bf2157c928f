// stackscope straggler-eval : accuracy of straggler localisation on simulated multi-worker traces with
// injected stragglers (slow compute operator, slow link, late start, intermittent stalls, several at once).
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "analyze/stragglers/straggler_eval.h"
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
      auto rows_json = [](const std::vector<analyze::StragglerEvalRow>& rows) {
        auto out = nlohmann::json::array();
        for (auto& row : rows)
          out.push_back({{"label", row.label},
                         {"trials", row.trials},
                         {"top1_correct", row.top1_correct},
                         {"stage1_top1_correct", row.stage1_top1_correct},
                         {"class_correct", row.class_correct}});
        return out;
      };
      std::cout << nlohmann::json{{"trials", r.trials},
                                  {"top1_accuracy", r.top1_accuracy()},
                                  {"stage1_top1_accuracy", r.stage1_top1_accuracy()},
                                  {"class_accuracy", r.class_accuracy()},
                                  {"by_scenario", rows_json(r.by_scenario())},
                                  {"by_workers", rows_json(r.by_workers())}}
                       .dump(2)
                << "\n";
    } else {
      std::printf("trials %d  top-1 straggler %.3f  (stage 1 alone %.3f)  root-cause class %.3f\n", r.trials,
                  r.top1_accuracy(), r.stage1_top1_accuracy(), r.class_accuracy());
      auto print_rows = [](const char* title, const std::vector<analyze::StragglerEvalRow>& rows) {
        std::printf("%-20s %7s %9s %9s %9s\n", title, "trials", "top-1", "stage 1", "class");
        for (auto& row : rows)
          std::printf("%-20s %7d %4d %4.0f%% %4d %4.0f%% %4d %4.0f%%\n", row.label.c_str(), row.trials,
                      row.top1_correct, 100.0 * row.top1_correct / row.trials, row.stage1_top1_correct,
                      100.0 * row.stage1_top1_correct / row.trials, row.class_correct,
                      100.0 * row.class_correct / row.trials);
      };
      print_rows("scenario", r.by_scenario());
      print_rows("workers", r.by_workers());
    }
    if (*verbose)
      for (size_t i = 0; i < r.details.size(); ++i)
        if (const auto& t = r.details[i]; !t.top1_correct || !t.class_correct) {
          std::printf("  trial %zu failed %s: %d workers%s, top %d, cause [%s], injected:", i,
                      !t.top1_correct ? "top-1+class" : "class", t.workers, t.pipeline ? " (pipeline)" : "",
                      t.top_worker, t.top_cause.c_str());
          for (auto& f : t.faults) std::printf(" %s@%d", analyze::sim_fault_name(f.kind), f.worker);
          std::printf("\n");
        }
    exit_code = 0;
  });
});

}  // namespace
}  // namespace stackscope::cli

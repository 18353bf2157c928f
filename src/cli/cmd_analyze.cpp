// stackscope analyze REC... : what was abnormal, where and why.
#include <cstdio>
#include <iostream>

#include "cli/analyze.h"
#include "cli/registry.h"

namespace stackscope::cli {
namespace {

int run_analyze(const AnalyzeOptions& opt) {
  nlohmann::json all = nlohmann::json::object();
  int status = 0;
  auto run_one = [&](const char* name, AnalysisOutput (*fn)(const AnalyzeOptions&)) {
    AnalysisOutput out = fn(opt);
    all[name] = out.json;
    if (!opt.json) std::cout << out.text;
    if (out.status) status = out.status;
  };
  if (opt.detector == "gmm" || opt.detector == "all") run_one("gmm", analyze_gmm);
  if (opt.detector == "reveal" || opt.detector == "all") run_one("reveal", analyze_reveal);
  if (opt.json) std::cout << all.dump(2) << "\n";
  return status;
}

RegisterCommand reg("analyze", 30, [](CLI::App& app, int& exit_code) {
  auto opt = std::make_shared<AnalyzeOptions>();
  auto* cmd = app.add_subcommand("analyze", "Find anomalies in recordings and say where and why");
  cmd->add_option("recordings", opt->recordings, "Recording file(s); several for cross-host analysis")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--layers", opt->layers, "Layers to analyse (cuda,nccl,torch,python,nvml,host)")->delimiter(',');
  cmd->add_option("--detector", opt->detector, "gmm (eACGM, per layer), reveal (host telemetry), all")
      ->check(CLI::IsMember({"gmm", "reveal", "all"}));
  cmd->add_option("--window", opt->reveal_window, "reveal: sliding window length (default 3s)");
  cmd->add_option("--stride", opt->reveal_stride, "reveal: sliding window stride (default 1s)");
  cmd->add_option("--reveal-baseline", opt->reveal_baseline,
                  "reveal: fit on the windows of this first stretch only (a clean warm-up, e.g. 30s); default all");
  cmd->add_option("--reveal-metrics", opt->reveal_metrics,
                  "reveal: pruned metric list; reused when the file exists, else the pruning result is saved there");
  cmd->add_flag("--json", opt->json, "Print one JSON object instead of the report");
  cmd->add_flag("!--no-store", opt->store, "Do not write findings back into the recording");
  cmd->add_flag("-q,--quiet", opt->quiet, "No progress on stderr");
  cmd->callback([opt, &exit_code] { exit_code = run_analyze(*opt); });
});

}  // namespace
}  // namespace stackscope::cli

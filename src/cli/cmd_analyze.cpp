// stackscope analyze REC... : what was abnormal, when, where and why. By default the incidents an operator acts
// on (analyze_incidents.cpp); the per-layer detectors (gmm, reveal) on request or with --verbose.
#include <unistd.h>

#include <cstdio>
#include <iostream>

#include <fmt/format.h>

#include "cli/analyze.h"
#include "online/online_detector.h"
#include "cli/registry.h"
#include "store/errors.h"
#include "store/recording_reader.h"

namespace stackscope::cli {
namespace {

// A table imported from elsewhere (`stackscope import`) has no job whose progress the incident engine could
// judge: by default its series are judged one by one (the series detector) instead.
bool all_imported(const std::vector<std::string>& recordings) {
  for (const std::string& path : recordings)
    if (!RecordingReader(path).meta_or("source", "").starts_with("import")) return false;
  return !recordings.empty();
}

int run_analyze(AnalyzeOptions opt) {
  if (!opt.source.empty()) {  // the fleet store: Reveal's host analysis over its hosts (analyze_fleet.cpp)
    if (!opt.recordings.empty()) throw std::invalid_argument("give recordings or --source, not both");
    AnalysisOutput out = analyze_fleet(opt);
    std::cout << (opt.json ? out.json.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n" : out.text);
    if (out.status && opt.json) std::fprintf(stderr, "stackscope analyze: %s", out.text.c_str());
    return out.status;
  }
  if (opt.recordings.empty()) throw std::invalid_argument("no recording given (or --source clickhouse://...)");
  if (!opt.detector_given && all_imported(opt.recordings)) opt.detector = "series";
  for (const std::string& path : opt.recordings)  // analysed all the same (store_findings skips it)
    if (opt.store && !opt.quiet && ::access(path.c_str(), W_OK) != 0)
      std::fprintf(stderr, "stackscope analyze: %s is read-only: findings are not stored in it\n", path.c_str());
  nlohmann::json all = nlohmann::json::object();
  int status = 0;
  const bool only_incidents = opt.detector == "incidents";
  auto run_one = [&](const char* name, AnalysisOutput (*fn)(const AnalyzeOptions&)) {
    AnalysisOutput out = fn(opt);
    all[name] = out.json;
    if (!opt.json) std::cout << out.text;
    if (out.status) status = out.status;
  };
  if (!opt.online_log.empty()) {  // hidden: what record --detect would have said (online/online_detector.h)
    if (opt.recordings.size() != 1) throw std::invalid_argument("--online-log takes one recording");
    online::replay_online(RecordingReader(opt.recordings[0]), opt.online_log, opt.episodes_v1);
  }
  if (opt.detector == "incidents" || opt.detector == "all") run_one("incidents", analyze_incidents);
  // --verbose: the host-telemetry detail behind the incidents (Reveal reads samples only), in the text report.
  // The per-layer GMM decodes every event into memory (gigabytes for an hour of a busy job), so it runs only
  // when asked for (--detector gmm or all).
  const bool detail = opt.detector == "all" || (only_incidents && opt.verbose && !opt.json);
  if (opt.detector == "gmm" || opt.detector == "all") run_one("gmm", analyze_gmm);
  if (opt.detector == "reveal" || detail) run_one("reveal", analyze_reveal);
  if (opt.detector == "series" || opt.detector == "all") run_one("series", analyze_series);
  // The incidents alone print the documented object itself (docs/INCIDENTS.md); several analyses, one key each.
  // Invalid UTF-8 in a name or command line is replaced (U+FFFD), not a failed output.
  if (opt.json)
    std::cout << (only_incidents ? all["incidents"] : all).dump(2, ' ', false, nlohmann::json::error_handler_t::replace)
              << "\n";
  return status;
}

RegisterCommand reg("analyze", 30, [](CLI::App& app, int& exit_code) {
  auto opt = std::make_shared<AnalyzeOptions>();
  auto* cmd = app.add_subcommand("analyze", "Find incidents in recordings: when the job slowed down, by how much, and why");
  cmd->add_option("recordings", opt->recordings, "Recording file(s); several for cross-host analysis")
      ->check(CLI::ExistingFile);
  cmd->add_option("--source", opt->source,
                  "Read the hosts' series from the fleet store instead: clickhouse://HOST[:PORT]/DB (Reveal's "
                  "per-host and cross-host analysis)");
  cmd->add_option("--since", opt->since, "--source: start of the span, a duration back from now (2h) or a UTC time");
  cmd->add_option("--until", opt->until, "--source: end of the span (default now), as --since");
  cmd->add_option("--hosts", opt->hosts, "--source: the hosts to compare (default: every host in the span)")
      ->delimiter(',');
  cmd->add_option("--layers", opt->layers, "gmm: layers to analyse (cuda,nccl,torch,python,nvml,host)")->delimiter(',');
  cmd->add_option("--detector", opt->detector,
                  "incidents (default: episodes of lost progress with root cause), gmm (eACGM, per layer), reveal "
                  "(host telemetry), series (each host series alone, causal; the default for imported tables), "
                  "all")
      ->check(CLI::IsMember({"incidents", "gmm", "reveal", "series", "all"}));
  cmd->add_flag("-v,--verbose", opt->verbose,
                "incidents: also phases, progress signals and class scores, then the Reveal host report (the per-layer GMM, "
                "which holds every event in memory: --detector gmm)");
  cmd->add_option("--incident-window", opt->incident_window_s, "incidents: window length in seconds (default 1)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--window", opt->reveal_window,
                  "reveal: sliding window length (default: 12 sampling intervals, at least 3s; units ns us ms s m "
                  "h d)");
  cmd->add_option("--stride", opt->reveal_stride,
                  "reveal: window stride, series: bin width (default: the sampling interval, at least 1s)");
  cmd->add_option("--series-threshold", opt->series_threshold,
                  "series: excess beyond a series' recent range, in range widths, that opens a finding "
                  "(default 0.05, chosen on half of NAB)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--reveal-baseline", opt->reveal_baseline,
                  "reveal: fit on the windows of this first stretch only (a clean warm-up, e.g. 30s); default all");
  cmd->add_option("--reveal-metrics", opt->reveal_metrics,
                  "reveal: pruned metric list; reused when the file exists, else the pruning result is saved there");
  cmd->add_flag("--json", opt->json, "Print one JSON object instead of the report (schema: docs/INCIDENTS.md)");
  cmd->add_flag("!--no-store", opt->store, "Do not write findings back into the recording");
  cmd->add_flag("-q,--quiet", opt->quiet, "No progress on stderr");
  cmd->add_option("--online-log", opt->online_log,
                  "Replay the recording through record --detect's engine first; its JSON lines to FILE ('-': stderr)")
      ->group("");
  cmd->add_flag("--episodes-v1", opt->episodes_v1, "The incident engine's first episode thresholds (kept for comparison)")
      ->group("");
  cmd->callback([opt, cmd, &exit_code] {
    opt->detector_given = cmd->count("--detector") > 0;
    try {
      exit_code = run_analyze(*opt);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "stackscope analyze: error: %s\n", e.what());
      exit_code = 1;
    }
  });
});

}  // namespace
}  // namespace stackscope::cli

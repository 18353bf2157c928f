// `stackscope analyze`: one command, several analyses over recordings. Each analysis lives in its own file
// (analyze_incidents.cpp: incidents, the default; analyze_gmm.cpp: eACGM per-layer GMM; analyze_reveal.cpp:
// Reveal host-telemetry pipeline).
#pragma once
#include <nlohmann/json.hpp>
#include <cstdint>
#include <string>
#include <vector>


namespace stackscope::cli {

struct AnalyzeOptions {
  std::vector<std::string> recordings;
  std::vector<std::string> layers;  // empty: all
  std::string detector = "incidents";  // incidents | gmm | reveal | series | all
  bool detector_given = false;         // false: imported tables get "series" (cmd_analyze.cpp)
  bool verbose = false;             // incidents: phases, progress candidates, class scores; and the per-layer detail
  double incident_window_s = 1.0;   // incidents: window length
  bool json = false;
  bool store = true;                // write findings back into the recording(s)
  bool quiet = false;               // no progress on stderr
  std::string online_log;           // hidden --online-log: record --detect replayed, its JSON lines here
  bool episodes_v1 = false;         // hidden --episodes-v1: the first episode thresholds (to compare)
  // reveal: sliding windows ("" = sized from the series' sampling interval, cli/series_sizing.h), and the pruned
  // metric list (read when the file exists, else written there). The series detector bins by the stride.
  std::string reveal_window;
  std::string reveal_stride;
  std::string reveal_metrics;
  // reveal: fit the detectors on the windows of this first stretch of each recording only (a clean warm-up),
  // so that several injected anomalies, or one long one, do not become the baseline. Empty: every window.
  std::string reveal_baseline;
  // series: the excess beyond the series' recent range, as a share of that range, that opens a finding.
  double series_threshold = -1;  // < 0: the detector's default
  // --source clickhouse://HOST:PORT/DB: the fleet store instead of recordings (analyze_fleet.cpp): the node series
  // of --hosts (empty: all) from --since to --until (a duration back from now, or a UTC time).
  std::string source;
  std::string since, until;
  std::vector<std::string> hosts;
};

struct AnalysisOutput {
  nlohmann::json json;  // machine-readable result (printed under its analysis name with --json)
  std::string text;     // the human report section
  int status = 0;       // non-zero: the analysis could not run (bad input); message already in text
};

// Throw RecordingError / std::invalid_argument on bad input; the command turns them into a clear error.
AnalysisOutput analyze_incidents(const AnalyzeOptions& options);
AnalysisOutput analyze_gmm(const AnalyzeOptions& options);
AnalysisOutput analyze_reveal(const AnalyzeOptions& options);
// `analyze --source clickhouse://...` (analyze_fleet.cpp): Reveal's per-host analysis and cross-host comparison
// over the hosts' node series in the fleet store.
AnalysisOutput analyze_fleet(const AnalyzeOptions& options);
// Each host series alone, causally (analyze_series.cpp): level shifts, spikes, bursts for as long as they last.
AnalysisOutput analyze_series(const AnalyzeOptions& options);
// "2014-02-14T14:30:00.000Z" for a CLOCK_REALTIME time in ns.
std::string utc_iso(int64_t realtime_ns);

}  // namespace stackscope::cli

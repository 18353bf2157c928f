// `stackscope record --detect`: the incident engine (analyze/incidents) while recording. A TelemetrySink in front
// of the recording: everything goes on to it unchanged, and a copy of each event's and sample's few fields the
// windows need goes to the engine's own thread, which every window builds the window tables incrementally
// (analyze/incidents/incident_input_builder.h, as `analyze` does from a file) and re-runs the engine on the
// windows so far (a rolling horizon: at most 2 x horizon of windows are kept). It prints a line on stderr when an
// incident opens, when its cause changes and when it closes, and writes the same moments as JSON lines (one
// incident object of docs/INCIDENTS.md each, with detected_at_s / cause_at_s and "online": open|cause|close|withdrawn) to
// --detect-log, appended (never truncated), its incident numbers following the highest one the log already holds. At
// the end the incidents are stored in the recording as findings of detector "incident-online".
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "model/finding.h"
#include "model/sink.h"
#include "store/recording_reader.h"

namespace stackscope::online {

struct OnlineDetectOptions {
  double window_s = 1.0;
  double horizon_s = 1800;  // windows the engine looks back over (at least; at most twice this)
  // The engine's pass every window evaluates at most twice this many windows (or twice the horizon, when shorter),
  // so its cost does not grow with the job's age: an incident longer than that stays open, its earlier part kept.
  double evaluated_s = 300;
  std::string log_path;     // JSON lines, appended; "-": stderr; "": none
  std::map<std::string, std::string> log_fields{};  // added to each JSON line (the agent: the job's labels)
  std::string host;
  // Replay of a recording (replay_online): the recording's start as the origin, no engine thread; the passes are
  // made by replay_pass at the times given.
  std::optional<int64_t> replay_start_ns = std::nullopt;
  int64_t replay_realtime_offset_ns = 0;
  bool episodes_v1 = false;  // the first episode thresholds (EpisodeOptions::v1_thresholds)
};

class OnlineDetector final : public TelemetrySink {
 public:
  // Starts the engine's thread; `next` (the recording) gets every call. `job_pids`: the traced processes.
  // Throws std::runtime_error when the log cannot be opened, std::invalid_argument when it is a symbolic link.
  OnlineDetector(TelemetrySink& next, std::set<uint32_t> job_pids, OnlineDetectOptions options);
  ~OnlineDetector() override;  // stops the engine (without the last pass of finish)

  SeriesId add_series(const SeriesInfo& info) override;
  void append_event(Event&& e) override;
  void append_samples(std::span<const Sample> samples) override;
  void add_drops(std::string_view source, uint64_t n) override;
  void add_note(std::string_view source, std::string_view text) override;

  // Once the collectors have stopped: one last pass, every open incident closed, the engine stopped. Returns the
  // incidents found, as findings (detector "incident-online") for the recording.
  std::vector<Finding> finish();

  // Replay mode only: what has been appended so far is taken in and the engine makes its pass at `now_ns`.
  void replay_pass(int64_t now_ns);
  // Windows the engine evaluated, for benchmarks and replays (pass cost does not grow with the job's age).
  struct PassStats {
    uint64_t passes = 0;                       // passes that ran the engine
    size_t last_windows = 0, max_windows = 0;  // windows the engine evaluated: in the last pass, at most
    // The engine thread's CPU time (CLOCK_THREAD_CPUTIME_ID, so a loaded machine's waits do not count) for the
    // work of one window -- the new events and samples taken in, the pass, the generations kept -- last and in all.
    double last_cpu_ms = 0, total_cpu_ms = 0;
  };
  PassStats pass_stats() const;

 private:
  struct Engine;
  TelemetrySink& next_;
  std::unique_ptr<Engine> engine_;
};

// `record --detect` replayed on a finished recording: its events (each as it would have arrived, at its end) and
// samples are fed in time order, and the engine makes its pass every window at the time it would have made it live
// (a window complete 0.5 s after its end), writing the same stderr lines and JSON lines to `log_path` (a file is
// replaced once the replay is done, store/output_file.h: the lines are this recording's alone). What the
// live engine would have said, without the recorder's own CPU load or late arrivals; for re-scoring detection and
// cause delays of recordings made without --detect, or with another engine (eval/incidents/score.py reads the
// JSON lines as X.online.jsonl).
// `after_pass` (optional): called after each window's work with the time of the pass and the engine's stats so far
// (bench/online_detect_cost.cpp measures the engine thread's cost per window with it).
void replay_online(const RecordingReader& recording, const std::string& log_path, bool episodes_v1 = false,
                   const std::function<void(int64_t now_ns, const OnlineDetector::PassStats&)>& after_pass = {});

}  // namespace stackscope::online
